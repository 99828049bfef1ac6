"""Qwen's image conventions in vis_embed.data.images: the source forms Qwen tooling accepts
(file:// and base64 data URIs) load the very same pixels as the plain path.  (The token count
before decoding follows the processor's own resize rule: tests/test_model_lengths.py.)"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vis_embed.data.images import load_image
from vis_embed.errors import DataError
from vis_embed.model.network.embedding_model import EmbeddingModel

def _image(width: int, height: int, seed: int = 0) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


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
