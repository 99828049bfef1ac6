"""``torch.compile`` of the transformer blocks.  Inference (``Embedder.compile``): on by default
on CUDA (:func:`resolve_compile`, the one compile rule), opt-in elsewhere; training: the same
rule unless the recipe's ``model_options.compile`` says otherwise, never by default under ZeRO-3
(training/model_setup.training_compiles; the vision attention's operator has a backward).

Eager PyTorch runs every element-wise step of a block (RMSNorm's square, mean and scale, the
vision rotary embedding -- q and k cast to fp32, ``rotate_half`` with a ``cat``, separate
multiplies and adds --, SiLU-and-mul or QuickGELU's three kernels, residual adds) as its own
kernel, one memory pass each: an H100 profile of a 2B forward spent 220 of 480 ms of kernel time
there.  Inductor fuses each group into one kernel (the rotary of q and k in one pass, in the
model's dtype on the way out).  No maintained package's kernel is used for it: Liger-Kernel
0.8.5's Qwen2-VL patch does not import on transformers 5.24 and would replace transformers'
modules; flash-attn's rotary needs the flash-attn package (no wheel, a CUDA toolchain to build);
a compiled block fuses the rotary with its neighbours, which a single-op kernel cannot.

What is compiled (regional compilation: each block compiled once and reused by every block of
its kind, ``dynamic=True``: any token count and batch):

* every decoder layer (``language_model.layers``), whole;
* every vision block, whole, when the vision attention is the project's "varlen"
  (model/network/attention.py): its attention is one call for the batch, wrapped as one opaque operator
  (``vis_embed::packed_attention``), so the block is one graph without a break (tested with
  ``torch._dynamo.explain``) and the rotary embedding is fused;
* under transformers' sdpa vision path (a per-image loop that would recompile for every new
  number of images) only each vision block's norms and MLP.

The same layout holds for Qwen2-VL, Qwen2.5-VL and Qwen3-VL (checked by the tests).  The first
batches pay the compilation (measured in docs/benchmarks.md; Inductor caches the result on
disk); the vectors equal the eager ones up to float rounding.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

import torch

from vis_embed.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# Children of a vision block that are compiled under transformers' per-image attention (see above).
VISION_BLOCK_PARTS = ("norm1", "norm2", "mlp")


def resolve_compile(requested: bool | None, device: torch.device) -> bool:
    """The one compile rule: None (not given) = on for CUDA, off elsewhere (on a CPU it needs a
    C++ compiler and its first call costs a minute or more on a small machine for a few percent:
    docs/model.md); True / False as given."""
    return device.type == "cuda" if requested is None else bool(requested)


def compile_blocks(base_model: PreTrainedModel, device: torch.device) -> int:
    """Compile the decoder layers and the vision blocks (whole under the "varlen" attention,
    else their norms and MLPs) of a Qwen-VL base model in place; return how many modules."""
    if device.type == "cpu" and not any(shutil.which(name) for name in ("g++", "c++", "clang++")):
        raise ConfigError("compile on CPU needs a C++ compiler (g++ or clang++) on PATH: "
                          "Inductor builds its fused kernels with it; install one or leave compile off")
    modules: list[torch.nn.Module] = list(_decoder_layers(base_model))
    whole = vision_blocks_compile_whole(base_model)
    for block in _vision_blocks(base_model):
        modules.extend([block] if whole else [getattr(block, name) for name in VISION_BLOCK_PARTS
                                              if hasattr(block, name)])
    raise_recompile_limit()
    for module in modules:
        module.compile(dynamic=True)
    return len(modules)


# Dynamo keeps one cache per code object, and in transformers 5 every decoder layer AND every
# vision block runs through the same ``GradientCheckpointingLayer`` code, so all of them share one
# cache of torch's default 8 entries.  A lent H200 (docs/benchmarks.md) filled 7 of them in one
# process: vision (2-D input) and decoder (3-D) graphs, with and without an attention mask, under
# no_grad and inference_mode (the benchmark's process, two models).  Past the limit Dynamo runs
# the blocks eagerly from then on (one logged warning), so the limit is raised, never lowered.
RECOMPILE_LIMIT = 64


def raise_recompile_limit() -> None:
    """Let the shared block code hold a compiled graph per (block kind, mask, grad mode)."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)


def vision_blocks_compile_whole(base_model: PreTrainedModel) -> bool:
    """Whether the vision attention is one call per block (the project's "varlen"), so a whole
    vision block compiles into one graph."""
    from vis_embed.model.network.attention import VISION_ATTENTION

    vision_config = getattr(getattr(base_model, "config", None), "vision_config", None)
    return getattr(vision_config, "_attn_implementation", None) == VISION_ATTENTION


def is_compiled(module: torch.nn.Module) -> bool:
    """Whether ``module.compile()`` has been called on it."""
    return getattr(module, "_compiled_call_impl", None) is not None


def _decoder_layers(base_model: PreTrainedModel) -> list[torch.nn.Module]:
    language_model = getattr(base_model, "language_model", None)
    layers = getattr(language_model, "layers", None)
    if layers is None:
        raise ConfigError(f"cannot compile {type(base_model).__name__}: no language_model.layers "
                          f"(compile supports the Qwen-VL families)")
    return list(layers)


def _vision_blocks(base_model: PreTrainedModel) -> list[torch.nn.Module]:
    visual = getattr(base_model, "visual", None)
    return list(getattr(visual, "blocks", None) or [])
