"""Tiny checkpoints load through the same code path as hub models."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from vis_embed.cli import main

ARCHS = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"]
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|vision_start|>", "<|vision_end|>",
           "<|image_pad|>", "<|video_pad|>"]


@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_checkpoint_loads_like_a_hub_model(arch: str, tiny_checkpoint: Callable[..., Path]) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    path = tiny_checkpoint(arch)
    assert (path / "model.safetensors").is_file() and (path / "config.json").is_file()
    processor = AutoProcessor.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path)
    tokenizer = processor.tokenizer
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL}
    assert None not in ids.values() and len(set(ids.values())) == len(SPECIAL)
    # Special tokens are single, unsplittable tokens.
    assert tokenizer("<|image_pad|>", add_special_tokens=False)["input_ids"] == [ids["<|image_pad|>"]]
    assert model.config.image_token_id == ids["<|image_pad|>"]
    assert model.config.vision_start_token_id == ids["<|vision_start|>"]
    assert model.config.text_config.hidden_size == 128
    assert model.config.text_config.vocab_size >= len(tokenizer)
    assert processor.chat_template and processor.video_processor is not None
    # A 112 px image becomes 16 merged visual tokens.
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    batch = processor(text=[prompt], images=[Image.new("RGB", (112, 112))], return_tensors="pt")
    assert int((batch["input_ids"] == ids["<|image_pad|>"]).sum()) == 16
    assert "mm_token_type_ids" in batch


def test_same_seed_same_weights_and_different_seed_differs(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from vis_embed.model.files.tiny import build_tiny_checkpoint

    first = load_file(build_tiny_checkpoint(tmp_path / "a", seed=1) / "model.safetensors")
    second = load_file(build_tiny_checkpoint(tmp_path / "b", seed=1) / "model.safetensors")
    third = load_file(build_tiny_checkpoint(tmp_path / "c", seed=2) / "model.safetensors")
    assert all((first[k] == second[k]).all() for k in first)
    assert any((first[k] != third[k]).any() for k in first)
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "c" / "tokenizer.json").read_bytes()


def test_tiny_model_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiny-model", str(tmp_path / "m"), "--arch", "qwen2.5-vl", "--seed", "3"]) == 0
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["model_type"] == "qwen2_5_vl"
    assert "wrote" in capsys.readouterr().out


def test_benchmark_preset_has_qwen2_vl_2b_vocab_and_width() -> None:
    from vis_embed.model.files.tiny import tiny_config

    config = tiny_config("qwen2-vl", preset="qwen2-vl-2b-shallow")
    text = config.text_config
    assert (text.vocab_size, text.hidden_size) == (151936, 1536)
    assert sum(text.rope_parameters["mrope_section"]) * 2 == text.hidden_size // text.num_attention_heads
    assert config.vision_config.hidden_size == text.hidden_size


@pytest.mark.parametrize(("arch", "preset", "published"), [
    ("qwen2-vl", "qwen2-vl-2b", 2_208_985_600),    # Qwen/Qwen2-VL-2B-Instruct: 2.21B
    ("qwen2.5-vl", "qwen2.5-vl-3b", 3_754_622_976),  # Qwen/Qwen2.5-VL-3B-Instruct: 3.75B
    ("qwen2.5-vl", "qwen2.5-vl-7b", 8_292_166_656),  # Qwen/Qwen2.5-VL-7B-Instruct: 8.29B
])
def test_full_size_presets_have_the_published_parameter_counts(arch: str, preset: str, published: int) -> None:
    """The GPU throughput figures are only the published models' if the configs are theirs: the
    parameter count (built on the meta device: no memory) pins every width, depth and vocabulary."""
    import torch
    from transformers import AutoModelForImageTextToText

    from vis_embed.model.files.tiny import tiny_config

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(tiny_config(arch, preset))
    assert sum(parameter.numel() for parameter in model.parameters()) == published
