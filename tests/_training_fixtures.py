"""Small identity datasets, schedules and recipes for the training tests (no scheduler needed).

Images are small coloured shapes: an identity is a (background, shape, colour) combination,
its instances differ in position.  Schedules come from the real scheduler.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import yaml

COLORS = [(220, 40, 40), (40, 180, 60), (40, 60, 220), (230, 200, 40), (160, 40, 200), (40, 200, 200),
          (250, 130, 20), (120, 120, 120), (20, 20, 20), (240, 240, 240), (140, 80, 30), (250, 150, 200)]


def write_identity_dataset(root: Path, identities: int = 12, images_per_identity: int = 3,
                           size: int = 56, seed: int = 0, random_background: bool = False) -> Path:
    """``root/train.yaml`` + ``root/rec.jsonl`` + PNGs; returns the YAML path.

    ``random_background``: each instance gets a random background, so the identity (shape and
    its colour) is a small part of the image and an untrained model does not already match it.
    """
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    image_dir = root / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for identity in range(identities):
        background = COLORS[identity % len(COLORS)]
        shape = COLORS[(identity * 5 + 3) % len(COLORS)]
        for instance in range(images_per_identity):
            if random_background:
                background = tuple(rng.randrange(256) for _ in range(3))
            image = Image.new("RGB", (size, size), background)
            draw = ImageDraw.Draw(image)
            x, y = rng.randint(4, size // 3), rng.randint(4, size // 3)
            extent = size // 3 + (identity % 3) * 4
            (draw.ellipse if identity % 2 else draw.rectangle)([x, y, x + extent, y + extent], fill=shape)
            name = f"id{identity:03d}_{instance}.png"
            image.save(image_dir / name)
            rows.append({"id": f"id{identity:03d}_{instance}", "image": f"images/{name}",
                         "identity": f"obj{identity:03d}"})
    (root / "rec.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {"datasets": [{"name": "toy", "kind": "identity", "path": "rec.jsonl", "image_root": ".",
                            "query_instruction": "Find the same object.",
                            "candidate_instruction": "Represent the given image."}]}
    path = root / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def write_schedule(data_yaml: Path, out: Path, steps: int, batch: int, seed: int = 0) -> Path:
    """A schedule of ``steps`` x ``batch`` (one slot, no hard negatives) via the real scheduler."""
    from vis_embed.data import load_train_config
    from vis_embed.training.schedule_source import write_recipe_schedule

    return write_recipe_schedule(load_train_config(data_yaml), out, steps=steps, global_batch_size=batch, seed=seed,
                                 sampling={"interleave_batch_size": batch, "hard_negatives": 0}, show_progress=False)


def tiny_recipe(model: Path, data_yaml: Path, schedule: Path, output_dir: Path, **overrides: Any) -> dict[str, Any]:
    """A raw recipe dict for tests (fp32, fixed seed, no progress bar, small LoRA)."""
    raw: dict[str, Any] = {
        "model": str(model), "data": str(data_yaml), "schedule": str(schedule), "output_dir": str(output_dir),
        "max_steps": 4, "global_batch_size": 4, "seed": 0,
        "sampling": {"hard_negatives": 0},  # what write_schedule builds (M unset = B, seed 0)
        "optimizer": {"lr": 1e-3, "warmup_steps": 1, "max_grad_norm": 1.0},
        "temperature": {"init": 0.05, "learnable": True},
        "lora": {"r": 4, "alpha": 8, "dropout": 0.0},
        "gradcache": {"chunk_size": 0},
        "model_options": {"dtype": "float32"},
        "checkpoint": {"every": 0},
        "logging": {"tensorboard": False, "progress_bar": False},
        "num_workers": 0,
    }
    for dotted, value in overrides.items():
        node = raw
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return raw
