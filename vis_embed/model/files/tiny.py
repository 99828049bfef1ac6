"""Tiny randomly initialised Qwen-VL checkpoints that load exactly like hub models.

``build_tiny_checkpoint(out_dir, arch=...)`` writes a real config, safetensors weights, a real
byte-level BPE tokenizer (trained here, deterministically, on built-in text, with the Qwen
special tokens and a chat template), an image processor and a video processor config.  The
result is loaded back with ``AutoProcessor.from_pretrained`` /
``AutoModelForImageTextToText.from_pretrained`` -- the same path a hub model takes -- so the
whole test suite exercises the production loading code.

Sizes: text hidden 128 x 2 layers, vision depth 2 (width 96); a 112 px image becomes 16 merged
visual tokens.  ``preset="qwen2-vl-2b-shallow"`` gives Qwen2-VL-2B's vocabulary size and hidden
width with few layers (for benchmarks; random init, usually not saved).  The full-size presets
``qwen2-vl-2b``, ``qwen2.5-vl-3b`` and ``qwen2.5-vl-7b`` have the published models' widths, depths
and vocabularies (their hub ``config.json``), for GPU throughput checks with random weights
(``benchmarks/gpu_encode.py``); pair them with the matching ``arch``.

CLI: ``vis-embed tiny-model OUT_DIR [--arch qwen2-vl|qwen2.5-vl|qwen3-vl] [--seed N]``
(arguments in :mod:`vis_embed.model.cli`).  torch and transformers are imported inside the
builders so that the CLI can read ``ARCHS`` / ``PRESETS`` for ``--help`` without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vis_embed.errors import ConfigError
from vis_embed.io import atomic_directory
from vis_embed.model.defaults import CHECKPOINT_MARKER, DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS

if TYPE_CHECKING:  # no torch or transformers at import time: `vis-embed tiny-model --help`
    import torch
    from transformers import (PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast,
                              ProcessorMixin)

ARCHS = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl")
PRESETS = ("tiny", "qwen2-vl-2b-shallow", "qwen2-vl-2b", "qwen2.5-vl-3b", "qwen2.5-vl-7b")

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|image_pad|>", "<|video_pad|>",
]

# A chat template in the Qwen-VL message convention (written for this project): each message
# is wrapped in <|im_start|>role ... <|im_end|>; image/video parts become a vision block whose
# single pad token the processor expands to the right number of visual tokens.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "<|im_start|>{{ message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' or 'image' in part -%}<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif part['type'] == 'video' or 'video' in part -%}<|vision_start|><|video_pad|><|vision_end|>"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "<|im_end|>{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant{{ '\\n' }}{%- endif -%}"
)

# Training text for the tiny tokenizer: enough English-ish words that prompts tokenize into
# a realistic number of pieces.  Deterministic: the BPE trainer is deterministic given input.
_CORPUS = """
Represent the given image. Find the same object as the one in the given image.
Retrieve an image that matches the description. Which photo shows the same person?
Represent the given image with the following question: what is in the picture?
A photo of a red car parked on the street next to a small blue bicycle.
The quick brown fox jumps over the lazy dog near the river bank at sunset.
An identity is the specific individual object, person, animal or place in a picture.
Query candidate positive negative gallery retrieval classification grounding editing.
system user assistant you are a helpful assistant answer the question briefly please.
zero one two three four five six seven eight nine ten hundred thousand colours shapes.
"""


def _build_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE with a small vocabulary plus the Qwen special tokens, as a HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus_lines = [line for line in _CORPUS.strip().splitlines() for _ in range(3)]
    backend.train_from_iterator(corpus_lines, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None,
        additional_special_tokens=SPECIAL_TOKENS[1:],
        model_max_length=32768, padding_side="right",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _sizes(preset: str) -> dict[str, Any]:
    if preset == "tiny":
        return dict(hidden=128, layers=2, heads=4, kv_heads=2, intermediate=256,
                    vision_width=96, vision_depth=2, vision_heads=2, mlp_ratio=2, vocab=0,
                    tie=0)
    if preset == "qwen2-vl-2b-shallow":
        # Qwen2-VL-2B: vocab 151936, hidden 1536, 12 heads / 2 kv heads, MLP 8960, vision
        # width 1280; layers cut (28 -> 4, vision 32 -> 4) so a CPU benchmark finishes.
        return dict(hidden=1536, layers=4, heads=12, kv_heads=2, intermediate=8960,
                    vision_width=1280, vision_depth=4, vision_heads=16, mlp_ratio=4,
                    vocab=151936, tie=1)
    # The published models' sizes (hub config.json of Qwen/Qwen2-VL-2B-Instruct,
    # Qwen/Qwen2.5-VL-3B-Instruct and Qwen/Qwen2.5-VL-7B-Instruct).
    if preset == "qwen2-vl-2b":
        return dict(_sizes("qwen2-vl-2b-shallow"), layers=28, vision_depth=32)
    qwen25_vision = dict(vision_width=1280, vision_depth=32, vision_heads=16, mlp_ratio=4,
                         vision_intermediate=3420, full_attention_blocks=[7, 15, 23, 31])
    if preset == "qwen2.5-vl-3b":
        return dict(qwen25_vision, hidden=2048, layers=36, heads=16, kv_heads=2, intermediate=11008,
                    vocab=151936, tie=1)
    if preset == "qwen2.5-vl-7b":
        return dict(qwen25_vision, hidden=3584, layers=28, heads=28, kv_heads=4, intermediate=18944,
                    vocab=152064, tie=0)
    raise ValueError(f"unknown preset {preset!r}; choose one of {PRESETS}")


def _token_ids(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    ids = {name: tokenizer.convert_tokens_to_ids(tok) for name, tok in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    return ids


def tiny_config(arch: str = "qwen2-vl", preset: str = "tiny",
                tokenizer: PreTrainedTokenizerBase | None = None, num_layers: int | None = None,
                vision_depth: int | None = None) -> PretrainedConfig:
    """The model config for ``arch`` at ``preset`` size (special-token ids from ``tokenizer``)."""
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {ARCHS}")
    tokenizer = tokenizer if tokenizer is not None else _build_tokenizer()
    s = _sizes(preset)
    layers = num_layers or s["layers"]
    depth = vision_depth or s["vision_depth"]
    head_dim = s["hidden"] // s["heads"]
    # M-RoPE splits head_dim/2 rotary frequencies over (temporal, height, width).
    quarter = head_dim // 2
    mrope_section = [quarter - 2 * (3 * quarter // 8), 3 * quarter // 8, 3 * quarter // 8]
    vocab = max(s["vocab"], len(tokenizer))
    text: dict[str, Any] = dict(
        vocab_size=vocab, hidden_size=s["hidden"], intermediate_size=s["intermediate"],
        num_hidden_layers=layers, num_attention_heads=s["heads"],
        num_key_value_heads=s["kv_heads"], max_position_embeddings=32768,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                         "mrope_section": mrope_section},
    )
    # Qwen2-VL-2B ties the LM head to the input embeddings; the tiny models do not.
    ids: dict[str, Any] = dict(_token_ids(tokenizer), tie_word_embeddings=bool(s["tie"]))
    if arch == "qwen2-vl":
        from transformers import Qwen2VLConfig

        vision = dict(depth=depth, embed_dim=s["vision_width"],
                      hidden_size=s["hidden"], num_heads=s["vision_heads"], mlp_ratio=s["mlp_ratio"])
        return Qwen2VLConfig(text_config=text, vision_config=vision, **ids)
    if arch == "qwen2.5-vl":
        from transformers import Qwen2_5_VLConfig

        vision = dict(depth=depth, hidden_size=s["vision_width"],
                      intermediate_size=s.get("vision_intermediate", s["mlp_ratio"] * s["vision_width"]),
                      num_heads=s["vision_heads"], out_hidden_size=s["hidden"], window_size=112,
                      fullatt_block_indexes=s.get("full_attention_blocks", [depth - 1]))
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids)
    from transformers import Qwen3VLConfig

    text.update(head_dim=head_dim)
    text["rope_parameters"]["mrope_interleaved"] = True
    vision = dict(depth=depth, hidden_size=s["vision_width"],
                  intermediate_size=s["mlp_ratio"] * s["vision_width"], num_heads=s["vision_heads"],
                  out_hidden_size=s["hidden"], num_position_embeddings=256,
                  deepstack_visual_indexes=[0])
    return Qwen3VLConfig(text_config=text, vision_config=vision, **ids)


def build_processor(arch: str = "qwen2-vl", tokenizer: PreTrainedTokenizerBase | None = None,
                    min_pixels: int = DEFAULT_MIN_PIXELS, max_pixels: int = DEFAULT_MAX_PIXELS) -> ProcessorMixin:
    """The Qwen processor (tokenizer + image processor + video processor) for ``arch``."""
    from transformers import Qwen2VLImageProcessor

    tokenizer = tokenizer if tokenizer is not None else _build_tokenizer()
    size = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
    if arch == "qwen3-vl":
        from transformers import Qwen3VLProcessor, Qwen3VLVideoProcessor

        image_processor = Qwen2VLImageProcessor(size=size, patch_size=16, merge_size=2)
        video_processor = Qwen3VLVideoProcessor(patch_size=16, merge_size=2)
        return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                video_processor=video_processor, chat_template=CHAT_TEMPLATE)
    from transformers import Qwen2VLVideoProcessor

    image_processor = Qwen2VLImageProcessor(size=size, patch_size=14, merge_size=2)
    video_processor = Qwen2VLVideoProcessor(patch_size=14, merge_size=2)
    if arch == "qwen2.5-vl":
        from transformers import Qwen2_5_VLProcessor as processor_class
    else:
        from transformers import Qwen2VLProcessor as processor_class
    return processor_class(image_processor=image_processor, tokenizer=tokenizer,
                           video_processor=video_processor, chat_template=CHAT_TEMPLATE)


def build_random_model(arch: str = "qwen2-vl", preset: str = "tiny", seed: int = 0,
                       num_layers: int | None = None, vision_depth: int | None = None,
                       dtype: torch.dtype | None = None,
                       device: torch.device | str | None = None) -> tuple[PreTrainedModel, ProcessorMixin]:
    """``(model, processor)`` randomly initialised in memory (nothing written).  ``device``: where
    the weights are created and initialised (a 7B model initialised on a GPU takes seconds, on
    a CPU minutes)."""
    import torch
    from transformers import AutoModelForImageTextToText

    if not -2**63 <= seed < 2**64:  # torch.manual_seed's range; beyond, its ValueError ('Overflow ...')
        raise ConfigError(f"--seed must be an integer from {-2**63} to {2**64 - 1}, got {seed}")
    tokenizer = _build_tokenizer()
    config = tiny_config(arch, preset, tokenizer, num_layers=num_layers, vision_depth=vision_depth)
    torch.manual_seed(seed)
    with torch.device(device or "cpu"):
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype or torch.float32)
    model.eval()
    return model, build_processor(arch, tokenizer)


def build_tiny_checkpoint(out_dir: str | Path, arch: str = "qwen2-vl", seed: int = 0,
                          preset: str = "tiny") -> Path:
    """Write a tiny random checkpoint of ``arch`` to ``out_dir`` and return the path."""
    out_dir = Path(out_dir)
    # atomic_directory: a killed build never leaves a half-written checkpoint behind; a folder
    # of other files is refused before anything is built (replacing it would delete them)
    with atomic_directory(out_dir, marker=CHECKPOINT_MARKER, what="a model checkpoint", flag="OUT_DIR") as tmp:
        model, processor = build_random_model(arch, preset, seed)
        model.save_pretrained(tmp, safe_serialization=True)
        processor.save_pretrained(tmp)
    return out_dir
