"""Which attention kernel a Qwen-VL backbone runs, and the project's own: ``"varlen"``.

transformers 5 (qwen2_vl, qwen2_5_vl, qwen3_vl) runs a vision block's attention in one of two
ways, chosen by a substring test on the vision config's attention name (``"flash" in name``,
``transformers.utils.generic.is_flash_attention_requested``):

* a name containing "flash": ONE call for the whole packed batch, with ``cu_seq_lens_q/k`` and
  ``max_length_q/k`` (the boundaries computed once per forward, no host sync per layer);
* any other name (sdpa, eager, flex_attention): the packed patches are split at ``cu_seqlens``
  (``lengths.tolist()``: a device-to-host sync in every block) and attention is called once
  per image -- for Qwen2.5-VL's windowed blocks once per 112-px window.

``"varlen"`` takes the first route without the flash-attn package: a function registered with
transformers' ``AttentionInterface`` under :data:`VISION_ATTENTION` (a name with "flash" in it,
so the vision tower hands it the packed sequence and its boundaries) is set on the vision config
only; the decoder keeps transformers' sdpa, which already makes one call per layer.  The name
is set through ``set_attn_implementation`` on the loaded model, never at load: at load a name
with "flash" in it is treated as a flash-attn package or Hub kernel and imported (and fails);
the per-sub-model path only checks that the name is registered.

The function (:func:`packed_attention`): on CUDA with fp16/bf16 and a card of compute
capability 8.0 or newer, torch's variable-length kernel (``torch.nn.attention.varlen``,
FlashAttention-2 inside; no padding); elsewhere the segments are padded to the longest and
attended in ONE batched ``scaled_dot_product_attention`` call with a key mask.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from vis_embed.errors import ConfigError

# The project's default: one attention call per vision block for the whole batch (see above).
VARLEN = "varlen"
# The name registered with transformers' AttentionInterface and set on the vision config.  It
# must contain "flash": that substring is how transformers' vision towers pick their
# variable-length calling convention (cu_seq_lens_q/k, max_length_q/k).
VISION_ATTENTION = "vis_embed_flash_varlen"
# Names whose kernel comes from a package that may be missing: usable only when importable.
FLASH_PACKAGES = {"flash_attention_2": "flash-attn", "flash_attention_4": "flash-attn-4"}


def flash_attention_available(name: str) -> bool:
    """Whether transformers' ``name`` (flash_attention_2 / _4) really works here: a CUDA device
    and the right *distribution* installed.  transformers' own checks read the distribution
    name, so flash-attn-4 (which installs a ``flash_attn/`` folder without ``__init__.py``, so
    ``import flash_attn`` succeeds) is not mistaken for flash-attn 2."""
    from transformers.utils import import_utils

    check = {"flash_attention_2": import_utils.is_flash_attn_2_available,
             "flash_attention_4": import_utils.is_flash_attn_4_available}.get(name)
    return bool(check is not None and torch.cuda.is_available() and check())


def resolve_attn_implementation(requested: str | None, device: torch.device) -> str:
    """The one rule for the attention kernel.  None: flash_attention_2 on CUDA when flash-attn 2
    is really installed, else :data:`VARLEN`.  A flash_attention_2/4 that is not importable here
    is a ConfigError naming the package; any other name is passed to transformers as given
    (``sdpa``: transformers' own per-image path, kept for comparison)."""
    if requested is None:
        if device.type == "cuda" and flash_attention_available("flash_attention_2"):
            return "flash_attention_2"
        return VARLEN
    if requested in FLASH_PACKAGES and not flash_attention_available(requested):
        raise ConfigError(f"attn_implementation {requested!r} needs the {FLASH_PACKAGES[requested]} package and "
                          f"a CUDA device; neither is usable here (leave it unset for {VARLEN!r}: one attention "
                          f"call per vision block from torch's own kernels)")
    return requested


def load_attn_implementation(name: str) -> str:
    """What ``from_pretrained(attn_implementation=...)`` gets for ``name``: :data:`VARLEN` loads
    as sdpa and is switched by :func:`set_attention` after loading (see the module docstring)."""
    return "sdpa" if name == VARLEN else name


def set_attention(backbone: Any, name: str) -> None:
    """Switch a loaded Qwen-VL backbone (peft-wrapped or not) to attention ``name``."""
    model = backbone.get_base_model() if hasattr(backbone, "get_base_model") else backbone
    if name != VARLEN:
        model.set_attn_implementation(name)
        return
    register()
    model.set_attn_implementation({"": "sdpa", "text_config": "sdpa", "vision_config": VISION_ATTENTION})


def attention_name(backbone: Any) -> str | None:
    """The attention ``name`` a backbone runs (as :func:`set_attention` takes it)."""
    config = getattr(backbone, "config", None)
    vision = getattr(config, "vision_config", None)
    if getattr(vision, "_attn_implementation", None) == VISION_ATTENTION:
        return VARLEN
    return getattr(config, "_attn_implementation", None)


def register() -> None:
    """Register :func:`packed_attention` with transformers (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(VISION_ATTENTION, packed_attention)


def packed_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                     cu_seq_lens_q: torch.Tensor | None = None, cu_seq_lens_k: torch.Tensor | None = None,
                     max_length_q: int | None = None, max_length_k: int | None = None,
                     is_causal: bool = False, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Non-causal attention over the packed segments ``cu_seq_lens_q`` of ``query`` / ``key`` /
    ``value`` (each ``(1, heads, tokens, head_dim)``, as the vision towers call it); returns
    ``((1, tokens, heads, head_dim), None)`` like transformers' flash functions."""
    if cu_seq_lens_q is None or max_length_q is None or is_causal or attention_mask is not None:
        raise ConfigError(f"{VISION_ATTENTION} serves the Qwen-VL vision towers only (packed, non-causal "
                          f"attention with cu_seq_lens); got another call")
    if cu_seq_lens_k is not None and cu_seq_lens_k is not cu_seq_lens_q \
            and not torch.equal(cu_seq_lens_k, cu_seq_lens_q):
        raise ConfigError(f"{VISION_ATTENTION}: queries and keys must share their segments")
    q, k, v = (tensor[0].transpose(0, 1) for tensor in (query, key, value))  # (tokens, heads, dim)
    if dropout and module.training:
        raise ConfigError(f"{VISION_ATTENTION} does not implement attention dropout (Qwen-VL's is 0)")
    if _varlen_kernel_usable(q):
        out = _varlen(q, k, v, cu_seq_lens_q, int(max_length_q), scaling)
    else:
        out = _padded(q, k, v, cu_seq_lens_q, int(max_length_q), scaling)
    return out.unsqueeze(0), None


def _varlen_kernel_usable(q: torch.Tensor) -> bool:
    if q.device.type != "cuda" or q.dtype not in (torch.float16, torch.bfloat16):
        return False
    try:
        from torch.nn.attention import varlen  # noqa: F401  (torch >= 2.10)
    except ImportError:
        return False
    return torch.cuda.get_device_capability(q.device) >= (8, 0)


def _varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_len: int,
            scaling: float | None) -> torch.Tensor:
    from torch.nn.attention.varlen import varlen_attn

    cu = cu_seqlens.to(torch.int32)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # the kernel's stride checks (no-op when so)
    # Positional arguments only: varlen_attn's keyword arguments changed between torch 2.10 and
    # 2.12.  The default scale is head_dim ** -0.5, which is what the vision towers pass.
    if scaling is None or abs(scaling - q.shape[-1] ** -0.5) < 1e-12:
        return varlen_attn(q, k, v, cu, cu, max_len, max_len)
    return varlen_attn(q, k, v, cu, cu, max_len, max_len, scale=scaling)


def _padded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_len: int,
            scaling: float | None) -> torch.Tensor:
    """One SDPA call over the segments padded to ``max_len`` (keys beyond a segment masked).
    Written by hand because torch has no variable-length attention off CUDA; the index work is
    a few tensor ops on the device (no host sync), from ``cu_seqlens`` and ``max_len`` only."""
    tokens, heads, dim = q.shape
    segments = cu_seqlens.numel() - 1
    if tokens == segments * max_len:  # every segment is max_len long (no segment exceeds it): no padding
        def split(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.view(segments, max_len, heads, dim).transpose(1, 2)

        out = F.scaled_dot_product_attention(split(q), split(k), split(v), scale=scaling)
        return out.transpose(1, 2).reshape(tokens, heads, dim)
    cu = cu_seqlens.to(device=q.device, dtype=torch.long)
    positions = torch.arange(tokens, device=q.device)
    segment = torch.searchsorted(cu[1:], positions, right=True)  # which segment each token is in
    slot = segment * max_len + (positions - cu[segment])  # its row in the padded (segments * max_len)
    lengths = (cu[1:] - cu[:-1]).clamp(min=1)  # an empty segment keeps one key: no all-masked NaN rows
    key_mask = torch.arange(max_len, device=q.device) < lengths[:, None]

    def pad(tensor: torch.Tensor) -> torch.Tensor:
        padded = tensor.new_zeros(segments * max_len, heads, dim).index_copy(0, slot, tensor)
        return padded.view(segments, max_len, heads, dim).transpose(1, 2)

    out = F.scaled_dot_product_attention(pad(q), pad(k), pad(v), attn_mask=key_mask[:, None, None, :],
                                         scale=scaling)
    return out.transpose(1, 2).reshape(segments * max_len, heads, dim).index_select(0, slot)


# Operators that each run one attention (the entry points; what they call inside is not counted
# again): torch's SDPA, its CUDA variable-length op, the kernels both dispatch to, flash-attn's.
ATTENTION_OPS = frozenset({
    "aten::scaled_dot_product_attention", "torch_attn::_varlen_attn", "aten::_flash_attention_forward",
    "aten::_efficient_attention_forward", "aten::_cudnn_attention_forward",
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_cudnn_attention",
    "flash_attn::_flash_attn_varlen_forward", "flash_attn::_flash_attn_forward",
})


def count_attention_calls(run: Any) -> int:
    """How many attention operators ``run()`` executes, as the torch profiler records them: an
    operator of :data:`ATTENTION_OPS` called from inside another one is the same attention."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        run()
    count = 0
    for event in profiler.events():
        if event.name not in ATTENTION_OPS:
            continue
        parent = event.cpu_parent
        while parent is not None and parent.name not in ATTENTION_OPS:
            parent = parent.cpu_parent
        count += parent is None
    return count
