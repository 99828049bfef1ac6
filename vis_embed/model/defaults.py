"""Model defaults shared by the model, the training recipe and the command lines.

Importing this module must stay cheap (no torch): ``vis-embed encode --help`` and recipe
validation read these values before any model is loaded.
"""

from __future__ import annotations

# Image pixel budget of the Qwen-VL processors.
DEFAULT_MIN_PIXELS = 56 * 56
DEFAULT_MAX_PIXELS = 200704  # 256 merged visual tokens of 28x28 pixels

# LoRA targets by default: every linear layer of the Qwen-VL decoder (names shared by
# Qwen2/2.5/3-VL); the vision tower's names are in embedding_model.VISION_LORA_MODULES.
TEXT_LORA_MODULES: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# Names a user may give for the weights' dtype (model/embedding_model.resolve_dtype, the one rule):
# "auto" = by device (bfloat16 on CUDA, float32 elsewhere), "checkpoint" = the checkpoint's own.
DTYPE_NAMES: tuple[str, ...] = ("auto", "checkpoint", "bfloat16", "float32", "float16")

# --compile (encode, eval, serve): what it does and costs, measured in docs/benchmarks.md.
COMPILE_HELP = ("compile the transformer blocks (torch.compile): fused element-wise kernels, about 5%% "
                "faster encodes on CPU after ~20 s of compilation (a few s once cached); "
                "same vectors up to float rounding")
