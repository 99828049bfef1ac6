"""Test doubles for the evaluation harness: a counting fake encoder and tiny benchmarks on disk.

The fake embeds an item from the *content* of its image file (so rewriting one image changes
its embedding) plus its text, through a fixed random projection -- deterministic, fast, and
an honest stand-in for anything with ``encode`` + ``fingerprint``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

DIM = 16


def _unit(seed_bytes: bytes) -> np.ndarray:
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(seed_bytes).digest()[:8], "little"))
    vector = rng.standard_normal(DIM)
    return vector / np.linalg.norm(vector)


class FakeEncoder:
    """Embeds ``item`` as a unit vector; identity ``colour`` images share a direction.

    Images named ``<identity>_<view>.png`` are drawn in their identity's colour; the fake
    maps an image to the normalised mean RGB + a small content hash component, so views of
    one identity are close and any byte change moves the vector.
    """

    def __init__(self, adapter: str | None = None, prompt_format: str = "chat", max_pixels: int = 200704,
                 fail_after_calls: int | None = None) -> None:
        self.adapter, self.prompt_format, self.max_pixels = adapter, prompt_format, max_pixels
        self.name_or_path = "fake-model"
        self.fail_after_calls = fail_after_calls
        self.calls: list[tuple[str | None, int]] = []  # (instruction, number of items)

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps([self.adapter, self.prompt_format, self.max_pixels]).encode()).hexdigest()

    @property
    def n_items_encoded(self) -> int:
        return sum(n for _instruction, n in self.calls)

    def embed_one(self, item: dict[str, Any]) -> np.ndarray:
        vector = np.zeros(DIM)
        if item.get("image"):
            data = Path(item["image"]).read_bytes()
            with Image.open(item["image"]) as image:
                mean_rgb = np.asarray(image.convert("RGB"), dtype=np.float64).reshape(-1, 3).mean(axis=0)
            vector[:3] = mean_rgb / 255.0
            vector += 0.05 * _unit(data)
        if item.get("text"):
            vector += 0.5 * _unit(item["text"].encode())
        return vector / np.linalg.norm(vector)

    def encode(self, items, instruction=None, batch_size=16, show_progress=False, base_dir=None) -> np.ndarray:
        if self.fail_after_calls is not None and len(self.calls) >= self.fail_after_calls:
            raise KeyboardInterrupt("simulated interruption")
        self.calls.append((instruction, len(items)))
        return np.stack([self.embed_one(item) for item in items]).astype(np.float32)


COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 220), "yellow": (230, 220, 30),
           "cyan": (30, 210, 220), "magenta": (210, 30, 200)}


class NaNEncoder(FakeEncoder):
    """Embeds one image (``poison``) as NaN: a broken model or a corrupt file."""

    def __init__(self, poison: str) -> None:
        super().__init__()
        self.poison = poison

    def embed_one(self, item: dict[str, Any]) -> np.ndarray:
        vector = super().embed_one(item)
        return np.full_like(vector, np.nan) if item.get("image", "").endswith(self.poison) else vector


def write_image(path: Path, colour: tuple[int, int, int], jitter: int = 0, size: int = 24) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.empty((size, size, 3), dtype=np.uint8)
    pixels[:] = np.clip(np.asarray(colour) + jitter, 0, 255)
    pixels[0, 0] = (jitter * 7) % 256  # makes every view's bytes distinct
    Image.fromarray(pixels).save(path)
    return path


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def make_identity_benchmark(root: Path, n_views: int = 3) -> dict[str, Path]:
    """Images ``images/<colour>_<v>.png``, a candidates file and a gallery query/gallery pair."""
    for name, colour in COLOURS.items():
        for view in range(n_views):
            write_image(root / "images" / f"{name}_{view}.png", colour, jitter=view * 3)
    names = list(COLOURS)
    candidate_rows = []
    for i, name in enumerate(names):
        others = [names[(i + j) % len(names)] for j in range(1, 4)]
        candidate_rows.append({"id": f"q{i}", "query": {"image": f"{name}_0.png"},
                               "candidates": [{"image": f"{name}_1.png"}] + [{"image": f"{o}_1.png"} for o in others]})
    query_rows = [{"id": f"{name}_0", "image": f"{name}_0.png", "identity": name} for name in names]
    gallery_rows = [{"id": f"{name}_{v}", "image": f"{name}_{v}.png", "identity": name}
                    for name in names for v in range(n_views)]
    return {
        "candidates": write_jsonl(root / "cand.jsonl", candidate_rows),
        "queries": write_jsonl(root / "queries.jsonl", query_rows),
        "gallery": write_jsonl(root / "gallery.jsonl", gallery_rows),
        "images": root / "images",
    }


def make_qrels_benchmark(root: Path, tsv: bool = False) -> dict[str, Path]:
    """A BEIR-shaped ``qrels`` dataset: page images (``pages/<colour>_<v>.png``, some with text) as
    the corpus, text and image queries, graded judgements (2: the page of the query's colour in
    view 0, 1: view 1) and one query judged with grade 0 only (left out of the scores)."""
    names = list(COLOURS)
    for name in names:
        for view in range(2):
            write_image(root / "pages" / f"{name}_{view}.png", COLOURS[name], jitter=view * 5)
    corpus = [{"id": f"doc {name}-{v}", "image": f"pages/{name}_{v}.png",
               **({"text": f"page about {name}"} if v == 1 else {})} for name in names for v in range(2)]
    queries = [{"id": f"t-{name}", "text": f"which page is {name}?"} for name in names[:3]]
    queries += [{"id": f"i-{name}", "image": f"pages/{name}_1.png", "text": "find this page"} for name in names[3:]]
    judgements = []
    for query in queries:
        name = query["id"].split("-", 1)[1]
        judgements += [(query["id"], f"doc {name}-0", 2), (query["id"], f"doc {name}-1", 1)]
    queries.append({"id": "t-none", "text": "a query nobody judged relevant"})
    judgements.append(("t-none", "doc red-0", 0))
    files = {"queries": write_jsonl(root / "queries.jsonl", queries),
             "corpus": write_jsonl(root / "corpus.jsonl", corpus)}
    if tsv:
        text = "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in judgements)
        (root / "qrels.tsv").write_text(text)
        files["qrels"] = root / "qrels.tsv"
    else:
        files["qrels"] = write_jsonl(root / "qrels.jsonl", [{"query_id": q, "corpus_id": d, "score": g}
                                                             for q, d, g in judgements])
    return files
