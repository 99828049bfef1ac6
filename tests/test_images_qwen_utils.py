"""Qwen's image conventions in vis_embed.data.images: the smart_resize rule (qwen-vl-utils)
gives exactly the processor's patch grid, and the source forms Qwen tooling accepts (file://
and base64 data URIs) load the very same pixels as the plain path."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vis_embed.data.images import load_image, resized_size, visual_token_count
from vis_embed.errors import DataError
from vis_embed.model.embedding_model import EmbeddingModel

# Sizes whose resized sides stay >= patch * merge: for slivers transformers' processor and
# qwen-vl-utils round differently (e.g. 5 x 300 -> 28 x 448 vs 28 x 308), see resized_size.
SIZES = [(60, 90), (224, 224), (333, 500), (1500, 1000), (640, 120), (64, 64), (1024, 200)]


def _image(width: int, height: int, seed: int = 0) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


@pytest.mark.parametrize("arch", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"])
def test_smart_resize_rule_is_the_processors_grid(arch: str, tiny_checkpoint: Callable[..., Path]) -> None:
    from transformers import AutoProcessor

    image_processor = AutoProcessor.from_pretrained(tiny_checkpoint(arch)).image_processor
    patch, merge = image_processor.patch_size, image_processor.merge_size
    for min_pixels, max_pixels in ((3136, 200704), (3136, 12845), (50000, 60000)):
        size = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
        for width, height in SIZES:
            grid = image_processor(images=[_image(width, height)], size=size, return_tensors="pt")["image_grid_thw"]
            _t, grid_h, grid_w = grid[0].tolist()
            assert resized_size(width, height, min_pixels, max_pixels, patch, merge) == (grid_w * patch, grid_h * patch)
            assert visual_token_count(width, height, min_pixels, max_pixels, patch, merge) == \
                grid_h * grid_w // (merge * merge)


def test_file_and_data_uris_give_the_same_pixels(tmp_path: Path, tiny_checkpoint: Callable[..., Path]) -> None:
    path = tmp_path / "photo.png"
    _image(90, 60, seed=3).save(path)
    data_uri = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
    model = EmbeddingModel.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu", dtype="float32")
    reference = model.prepare_one({"image": str(path)})
    for source in (f"file://{path}", data_uri):
        assert np.array_equal(np.asarray(load_image(source)), np.asarray(load_image(path)))
        prepared = model.prepare_one({"image": source})
        assert torch.equal(prepared.pixel_values, reference.pixel_values)
        assert torch.equal(prepared.input_ids, reference.input_ids)


def test_malformed_data_uri_is_a_data_error() -> None:
    with pytest.raises(DataError, match="base64"):
        load_image("data:image/png;base64,@@not-base64@@")
    buffer = io.BytesIO(b"not an image")
    with pytest.raises(DataError, match="cannot decode"):
        load_image("data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode())
