"""estimated_lengths: the token count encode batches by must be the one the model sees.

If the estimate leaves out the prompt template or assumes Qwen2-VL's 14-pixel patches for
every family, batches that look uniform carry real padding (issue 20: 12% where 10% was
asked for).  Checked item by item against ``prepare_one`` on every architecture and both
prompt formats.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vis_embed.model.inputs.batching import chunk_order
from vis_embed.model.network.embedding_model import EmbeddingModel
from vis_embed.model.inputs.lengths import estimated_lengths

INSTRUCTION = "Find the same object as the one in the given image."


def _image(height: int, width: int, seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8))


def _items(tmp_path: Path) -> list[dict]:
    on_disk = tmp_path / "photo.png"
    _image(90, 170, 9).save(on_disk)
    return [
        {"text": "a red car"},
        {"image": _image(112, 112, 0)},
        {"image": _image(60, 200, 1), "text": "the quick brown fox jumps over the lazy dog " * 3},
        {"image": _image(300, 140, 2), "text": "object"},
        {"image": _image(500, 500, 3)},  # above the pixel budget: resized down
        {"image": _image(400, 300, 4), "bbox": [10, 20, 210, 170]},  # the crop's size counts
        {"image": "photo.png", "text": "from a file"},  # size from the header
        {"image": _image(3, 900, 5)},  # a sliver: padded to the aspect limit, then resized
    ]


@pytest.mark.parametrize("arch", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"])
@pytest.mark.parametrize("prompt_format", ["chat", "vlm2vec"])
@pytest.mark.parametrize("instruction", [INSTRUCTION, None])
def test_estimates_equal_prepared_lengths(arch: str, prompt_format: str, instruction: str | None,
                                          tiny_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    model = EmbeddingModel.from_pretrained(tiny_checkpoint(arch), device="cpu", prompt_format=prompt_format,
                                           max_pixels=160 * 160)
    items = _items(tmp_path)
    real = [model.prepare_one(item, instruction, tmp_path).length for item in items]
    assert estimated_lengths(model, items, instruction, tmp_path) == real


def test_batches_from_estimates_keep_the_padding_asked_for(tiny_checkpoint: Callable[..., Path],
                                                           tmp_path: Path) -> None:
    model = EmbeddingModel.from_pretrained(tiny_checkpoint(), device="cpu", max_pixels=160 * 160)
    items = _items(tmp_path) * 3
    lengths = [model.prepare_one(item, INSTRUCTION, tmp_path).length for item in items]
    for chunk in chunk_order(estimated_lengths(model, items, INSTRUCTION, tmp_path), 8, max_padding=0.1):
        real = [lengths[i] for i in chunk]
        if len(chunk) > 2:  # chunk_order keeps at least a quarter of the batch however spread
            assert 1 - sum(real) / (max(real) * len(real)) <= 0.1
