"""Opt-in ``torch.compile`` of the transformer blocks, for inference (``Embedder.compile``).

Eager PyTorch runs every element-wise step of a block (RMSNorm's square, mean and scale,
rotary embeddings, SiLU or QuickGELU times the up-projection, residual adds) as its own
kernel, one memory pass each.  On a CPU where the matrix products already run near the GEMM
peak, those passes are most of the time left over; Inductor fuses each group into one loop.

What is compiled, and why only that:

* every decoder layer (``language_model.layers``), whole: its control flow does not depend
  on the data, so one graph (``dynamic=True``: any batch and sequence length) serves every
  layer and every batch, plus one for batches without padding (no attention mask);
* in every vision block, the norms and the MLP -- not the attention: under transformers' sdpa
  path upstream splits the packed patches per image and loops over them, so a compiled
  attention would recompile for every new number of images in a batch (the default "varlen"
  attention, model/attention.py, makes one call; compiling it is left until measured on a GPU).

The same layout holds for Qwen2-VL, Qwen2.5-VL and Qwen3-VL (checked by the tests).  The
first batches pay the compilation (about 18 s on a 2-core CPU the first time; Inductor caches
the result on disk, after which it is about 3 s); the vectors equal the eager ones up to float
rounding.
"""

from __future__ import annotations

import shutil
from typing import Any

import torch

from vis_embed.errors import ConfigError

# Children of a vision block that are compiled; its "attn" is left eager (see above).
VISION_BLOCK_PARTS = ("norm1", "norm2", "mlp")


def compile_blocks(base_model: Any, device: torch.device) -> int:
    """Compile the decoder layers and the vision blocks' norms and MLPs of a Qwen-VL base
    model in place; return how many modules were compiled."""
    if device.type == "cpu" and not any(shutil.which(name) for name in ("g++", "c++", "clang++")):
        raise ConfigError("compile on CPU needs a C++ compiler (g++ or clang++) on PATH: "
                          "Inductor builds its fused kernels with it; install one or leave compile off")
    modules: list[torch.nn.Module] = list(_decoder_layers(base_model))
    for block in _vision_blocks(base_model):
        modules.extend(getattr(block, name) for name in VISION_BLOCK_PARTS if hasattr(block, name))
    for module in modules:
        module.compile(dynamic=True)
    return len(modules)


def is_compiled(module: torch.nn.Module) -> bool:
    """Whether ``module.compile()`` has been called on it."""
    return getattr(module, "_compiled_call_impl", None) is not None


def _decoder_layers(base_model: Any) -> list[torch.nn.Module]:
    language_model = getattr(base_model, "language_model", None)
    layers = getattr(language_model, "layers", None)
    if layers is None:
        raise ConfigError(f"cannot compile {type(base_model).__name__}: no language_model.layers "
                          f"(compile supports the Qwen-VL families)")
    return list(layers)


def _vision_blocks(base_model: Any) -> list[torch.nn.Module]:
    visual = getattr(base_model, "visual", None)
    return list(getattr(visual, "blocks", None) or [])
