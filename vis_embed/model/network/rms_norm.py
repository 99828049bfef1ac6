"""The Qwen-VL RMSNorms as torch's fused ``F.rms_norm``.

transformers' Qwen2-VL / Qwen2.5-VL / Qwen3-VL RMSNorm runs as a chain of element-wise kernels
(cast to fp32, ``pow``, ``mean``, add, ``rsqrt``, multiply, cast back, multiply by the weight:
22 ms of an H100 profile of a 3B forward) where torch has one fused kernel for the
normalisation.  :func:`use_fused_rms_norm` switches each such module's class to a subclass
whose forward is ``weight * F.rms_norm(x.float(), eps).to(dtype)``: the same formula in the
same precision (fp32 inside, the weight applied after the cast back, as transformers does), so
the same numbers up to float rounding (tested).  The module keeps its class's parameters, names
and state dict (it *is* one), so checkpoints, peft and ``save_pretrained`` see no difference --
the convention of :mod:`vis_embed.model.network.patch_embedding`.  In a compiled block Inductor fuses
either form; this is the eager path's (CPU, ``--no-compile``, training).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# transformers' classes whose forward is exactly the formula above (read in transformers 5.24).
RMS_NORM_CLASSES = ("Qwen2VLRMSNorm", "Qwen2_5_VLRMSNorm", "Qwen3VLTextRMSNorm", "Qwen2RMSNorm")

_fused_classes: dict[type, type] = {}


def _forward(self: torch.nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
    dtype = hidden_states.dtype
    normalised = F.rms_norm(hidden_states.float(), (hidden_states.shape[-1],), eps=self.variance_epsilon)
    return self.weight * normalised.to(dtype)


def _fused_class(cls: type) -> type:
    if cls not in _fused_classes:
        _fused_classes[cls] = type(f"Fused{cls.__name__}", (cls,), {"forward": _forward, "__module__": __name__})
    return _fused_classes[cls]


def use_fused_rms_norm(model: torch.nn.Module) -> int:
    """Switch every RMSNorm of :data:`RMS_NORM_CLASSES` in ``model`` to its fused subclass;
    returns how many were switched."""
    switched = 0
    for module in model.modules():
        cls = type(module)
        if cls.__name__ in RMS_NORM_CLASSES and hasattr(module, "variance_epsilon") and \
                cls.__module__.startswith("transformers."):
            module.__class__ = _fused_class(cls)
            switched += 1
    return switched
