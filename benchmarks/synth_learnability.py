"""Is the synthetic ID-Rec task learnable at the quickstart's scale?  A data calibration.

Trains a tiny ViT shaped like the quickstart's vision tower (112 px, 14 px patches, 2 layers,
2x2 patch merge -> 16 tokens) *from scratch* with InfoNCE on ``synth_rec`` and reports
Precision@1 on the held-out ``SynthRec`` gallery before and during training, next to two
training-free baselines (raw pixels, whole-image colour histogram) that show how strongly
context dominates the pixels.  Plain torch, no Qwen model: it calibrates the data, not the
toolkit (the quickstart measures the real model).

    .venv/bin/python benchmarks/synth_learnability.py --seconds 240
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from vis_embed.prep.synth import generate


def load_images(root: Path, split: str, table: str) -> tuple[torch.Tensor, np.ndarray]:
    rows = [json.loads(line) for line in (root / split / table).read_text().splitlines()]
    pixels = np.stack([np.asarray(Image.open(root / split / "images" / row["image"]).convert("RGB"))
                       for row in rows])
    return torch.from_numpy(pixels).permute(0, 3, 1, 2).float().div(255), np.array([r["identity"] for r in rows])


def precision_at_1(embeddings: torch.Tensor, identities: np.ndarray) -> float:
    """All-vs-all gallery P@1, each image excluded from its own gallery."""
    features = F.normalize(embeddings - embeddings.mean(0), dim=-1)
    similarity = features @ features.T
    similarity.fill_diagonal_(-float("inf"))
    return float((identities[similarity.argmax(1).numpy()] == identities).mean())


class TinyViT(nn.Module):
    """112 px -> 8x8 patches -> 2 blocks -> 2x2 merge -> 16 tokens -> 1 block -> mean."""

    def __init__(self, width: int = 96, depth: int = 2, out_width: int = 128) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, width, 14, 14)
        self.position = nn.Parameter(torch.zeros(1, 64, width))
        self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(width, 4, 4 * width, 0.0, batch_first=True,
                                                               norm_first=True) for _ in range(depth))
        self.merge = nn.Linear(4 * width, out_width)
        self.head = nn.TransformerEncoderLayer(out_width, 4, 2 * out_width, 0.0, batch_first=True, norm_first=True)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        tokens = self.patch(images).flatten(2).transpose(1, 2) + self.position
        for block in self.blocks:
            tokens = block(tokens)
        batch, _, width = tokens.shape
        tokens = tokens.view(batch, 4, 2, 4, 2, width).permute(0, 1, 3, 2, 4, 5).reshape(batch, 16, 4 * width)
        return F.normalize(self.head(self.merge(tokens)).mean(1), dim=-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="an existing `vis-embed synth` folder (default: render small)")
    parser.add_argument("--seconds", type=float, default=240.0, help="training time budget")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="synth-learn-") as tmp:
        root = args.data or generate(Path(tmp) / "synth", seed=0, size="small")
        train_x, train_ids = load_images(root, "train", "rec.jsonl")
        eval_x, eval_ids = load_images(root, "eval", "rec_gallery.jsonl")
    print(f"train {len(train_x)} images / {len(set(train_ids))} identities; "
          f"eval {len(eval_x)} images / {len(set(eval_ids))} identities; "
          f"chance P@1 ~{2 / (len(eval_x) - 1):.3f}")
    print(f"raw-pixel P@1 {precision_at_1(eval_x.flatten(1), eval_ids):.3f}")
    codes = (eval_x * 7.999).long()
    codes = codes[:, 0] * 64 + codes[:, 1] * 8 + codes[:, 2]
    histograms = torch.stack([torch.bincount(c.flatten(), minlength=512) for c in codes]).float().sqrt()
    print(f"colour-histogram P@1 {precision_at_1(histograms, eval_ids):.3f}")

    model = TinyViT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    def evaluate() -> float:
        model.eval()
        with torch.no_grad():
            embeddings = torch.cat([model(eval_x[i:i + 128]) for i in range(0, len(eval_x), 128)])
        model.train()
        return precision_at_1(embeddings, eval_ids)

    groups: dict[str, list[int]] = {}
    for index, identity in enumerate(train_ids):
        groups.setdefault(identity, []).append(index)
    names = list(groups)
    rng = np.random.default_rng(0)
    print(f"step 0: P@1 {evaluate():.3f}")
    started, step = time.perf_counter(), 0
    while time.perf_counter() - started < args.seconds:
        anchors, positives = [], []
        for choice in rng.choice(len(names), args.batch_size, replace=False):
            first, second = rng.choice(groups[names[choice]], 2, replace=False)
            anchors.append(first)
            positives.append(second)
        logits = model(train_x[anchors]) @ model(train_x[positives]).T / 0.07
        loss = F.cross_entropy(logits, torch.arange(args.batch_size))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step % 100 == 0:
            print(f"step {step} ({time.perf_counter() - started:.0f} s): loss {loss.item():.3f} P@1 {evaluate():.3f}")
    print(f"final after {step} steps / {time.perf_counter() - started:.0f} s: P@1 {evaluate():.3f}")


if __name__ == "__main__":
    main()
