"""Helpers for the preparation-worker tests: photo-like JPEGs and a preparer that crashes.

Importable by worker processes (they receive the preparer by reference to this module).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vis_embed.errors import ConfigError
from vis_embed.model.inputs.preparer import PreparedItem, Preparer

CRASH_TEXT = "crash this worker"
CONFIG_ERROR_TEXT = "refuse this configuration"


class CrashingPreparer(Preparer):
    """Prepares like :class:`Preparer`, but the process dies (no exception, no reply) on an item
    whose text is :data:`CRASH_TEXT` (what a segfault in a decoder looks like to the parent) and
    raises a ConfigError (not a bad item: a bad setting) on :data:`CONFIG_ERROR_TEXT`."""

    def prepare_one(self, item: dict[str, Any], instruction: str | None = None,
                    base_dir: str | Path | None = None) -> PreparedItem:
        if item.get("text") == CRASH_TEXT:
            os._exit(7)
        if item.get("text") == CONFIG_ERROR_TEXT:
            raise ConfigError("the model's processor has no chat template")
        return super().prepare_one(item, instruction, base_dir)


def crashing_copy(preparer: Preparer) -> CrashingPreparer:
    return CrashingPreparer(preparer.processor, preparer.config, preparer.token_limit, preparer.pixel_dtype)


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    """A photo-like RGB image: smooth colour gradients plus grain (compresses like a photo)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([127 + 100 * np.sin(x / (37 + 11 * c) + y / (53 + 7 * c) + c) for c in range(3)], axis=-1)
    grain = rng.normal(0, 18, (height, width, 3))
    return Image.fromarray(np.clip(base + grain, 0, 255).astype(np.uint8))


def write_items(root: Path, sizes: list[tuple[int, int]], texts: int = 3, extra: list[dict] | None = None) -> Path:
    """``root/items.jsonl``: one JPEG item per size (with a text on every other), ``texts`` text
    items and ``extra`` rows, interleaved so that batches (sorted by length) mix them."""
    root.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for number, (width, height) in enumerate(sizes):
        name = f"p{number}.jpg"
        photo(width, height, seed=number).save(root / name, quality=90)
        rows.append({"id": f"img{number}", "image": name, **({"text": f"photo {number}"} if number % 2 else {})})
    for number in range(texts):
        rows.insert(1 + 2 * number, {"id": f"txt{number}", "text": "a caption " * (1 + 3 * number)})
    rows += extra or []
    path = root / "items.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
