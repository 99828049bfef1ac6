"""Model defaults shared by the model, the training recipe and the command lines.

Importing this module must stay cheap (no torch): ``vis-embed encode --help`` and recipe
validation read these values before any model is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

# Image pixel budget of the Qwen-VL processors.
DEFAULT_MIN_PIXELS = 56 * 56
DEFAULT_MAX_PIXELS = 200704  # 256 merged visual tokens of 28x28 pixels

# Video items (data/video.py): frames a clip gives the model (VLM2Vec-V2's MMEB-V2 protocol: 8)
# and the pixel budget of each frame.  768 * 28 * 28 is the per-frame cap of Qwen's own video
# tooling (qwen-vl-utils' VIDEO_MAX_PIXELS, transformers' Qwen2VLVideoProcessor longest_edge):
# what VLM2Vec gets from the processor; 768 merged tokens per frame pair on Qwen2/2.5-VL, so an
# 8-frame clip costs at most 4 x 768 = 3072 visual tokens.
DEFAULT_VIDEO_FRAMES = 8
DEFAULT_VIDEO_MAX_PIXELS = 768 * 28 * 28

# LoRA targets by default: every linear layer of the Qwen-VL decoder (names shared by
# Qwen2/2.5/3-VL); the vision tower's names are in adaptation/lora.py's VISION_LORA_MODULES.
TEXT_LORA_MODULES: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# What save_pretrained writes into every checkpoint folder (transformers' CONFIG_NAME): a folder
# holding it is one that export, merge and tiny-model may replace (vis_embed.io.check_replaceable).
CHECKPOINT_MARKER = "config.json"

# Names a user may give for the weights' dtype (model/network/embedding_model.resolve_dtype, the one rule):
# "auto" = by device (bfloat16 on CUDA, float32 elsewhere), "checkpoint" = the checkpoint's own.
DTYPE_NAMES: tuple[str, ...] = ("auto", "checkpoint", "bfloat16", "float32", "float16")

# --compile (encode, eval, serve): what it does and costs, measured in docs/benchmarks.md.
COMPILE_HELP = ("compile the transformer blocks (torch.compile): fused element-wise kernels; default: on for "
                "CUDA, off elsewhere (on CPU a few %% faster encodes after a minute or more of compilation, a few "
                "s once cached); same vectors up to float rounding")

# --adapter (encode, eval, mine-negatives, serve, mteb): what from_pretrained(adapter=...) loads
# (model/network/adaptation/saved.saved_adapter).
ADAPTER_HELP = ("a saved adapter loaded over --model: a peft LoRA adapter or a projection-head directory (a run's "
                "final/ or checkpoint-STEP/); a full fine-tune is a model of its own: pass it as --model")
MODEL_HELP = "the model: a Hub id or a local checkpoint directory (a full fine-tune's final/ too)"


def add_model_reference_arguments(parser: argparse.ArgumentParser, model_help: str = MODEL_HELP) -> None:
    """``--model`` (required) and ``--adapter``: the pair every command that loads a model for
    inference declares (encode, eval, search, mine-negatives, serve, mteb), written once; both
    strings (a Hub id is no path), handed to ``Embedder.from_pretrained`` as given."""
    parser.add_argument("--model", required=True, help=model_help)
    parser.add_argument("--adapter", default=None, help=ADAPTER_HELP)

# Item preparation (model/runtime/prepare_pool.py, data/images.py): --workers and --decode on encode,
# eval, mine-negatives and serve; the recipe's num_workers and model_options.decode.
WORKERS_HELP = ("processes preparing items (decode, resize, tokenise) beside the model: N, 0 = in the main "
                "process, or auto (default: the cores available to this process shared by the torchrun ranks "
                "on the node, at most 8 for a model on the CPU, all but one (at most 32) for a model on a GPU; "
                "none for fewer than 32 image items)")
DECODE_HELP = ("exact (default): decode every pixel, the processor resizes; fast: decode images larger than "
               "the pixel budget at a reduced scale (JPEG draft mode, else a box reduce), never below twice "
               "the size the processor resizes to, then the processor's usual resize (vectors differ slightly)")


def parse_workers(value: str) -> int | str:
    """argparse type of ``--workers``: ``auto`` or an integer >= 0."""
    import argparse

    if value == "auto":
        return value
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer >= 0, got {value!r}")
    return count


def add_preparation_arguments(parser: argparse.ArgumentParser) -> None:
    """``--workers`` on a command that encodes items (``--decode`` is a loading setting of
    EmbeddingConfig: it travels with the model)."""
    parser.add_argument("--workers", type=parse_workers, default="auto", metavar="N|auto", help=WORKERS_HELP)
