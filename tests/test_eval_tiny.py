"""``vis-embed eval`` with a real (tiny, random) Qwen2-VL checkpoint through Embedder.

Checks that the harness scores exactly what the model embeds (P@1 recomputed here from
direct ``Embedder.encode`` calls), that the model block of results.json describes the model,
and that the cache is keyed by the real fingerprint: the same command re-encodes nothing, a
different prompt format re-encodes everything.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from eval_fakes import make_identity_benchmark

from vis_embed.cli import main
from vis_embed.model.runtime.embedder import Embedder


@pytest.fixture()
def manifest(tmp_path: Path) -> Path:
    files = make_identity_benchmark(tmp_path / "bench", n_views=2)
    path = files["candidates"].parent / "benchmark.yaml"
    path.write_text(yaml.safe_dump({"name": "tiny", "datasets": [
        {"name": "Cand", "benchmark": "MVEB", "meta_task": "ID-Rec", "split": "IND", "layout": "candidates",
         "path": "cand.jsonl", "image_root": "images", "query_instruction": "Find the same object.",
         "candidate_instruction": "Represent the image."},
        {"name": "Gal", "benchmark": "MVEB", "meta_task": "Re-ID", "split": "OOD", "layout": "gallery",
         "queries": "queries.jsonl", "gallery": "gallery.jsonl", "image_root": "images",
         "query_instruction": "Find the same object.", "candidate_instruction": "Represent the image."},
    ]}))
    return path


def _pessimistic_p_at_1(query: np.ndarray, candidates: np.ndarray) -> float:
    scores = candidates @ query
    return float(scores[0] > scores[1:].max())


def test_eval_with_tiny_checkpoint(tiny_checkpoint, manifest: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoint = tiny_checkpoint("qwen2-vl")
    encoded: list[int] = []
    original_encode = Embedder.encode

    def counting_encode(self, items, *args, **kwargs):
        encoded.append(len(items))
        return original_encode(self, items, *args, **kwargs)

    monkeypatch.setattr(Embedder, "encode", counting_encode)
    out = tmp_path / "out"
    argv = ["eval", "--model", str(checkpoint), "--benchmark", str(manifest), "--out", str(out),
            "--device", "cpu", "--batch-size", "4", "--quiet", "--no-pictures"]
    assert main(argv) == 0
    assert sum(encoded) == 6 + 6 + 12  # queries (shared by both datasets), candidates, gallery
    results = json.loads((out / "results.json").read_text())
    embedder = Embedder.from_pretrained(checkpoint, device="cpu")
    model = results["model"]
    assert model["name"] == str(checkpoint) and model["adapter"] is None
    assert model["prompt_format"] == "chat"
    assert model["pixels"] == {"min_pixels": embedder.model.min_pixels, "max_pixels": embedder.model.max_pixels}
    assert model["fingerprints"]["model"] == embedder.fingerprint()

    # The harness scores what the model embeds: recompute Cand's P@1 from direct encodes.
    rows = [json.loads(line) for line in (manifest.parent / "cand.jsonl").read_text().splitlines()]
    images = manifest.parent / "images"
    queries = original_encode(embedder, [{"image": str(images / r["query"]["image"])} for r in rows],
                              instruction="Find the same object.")
    expected = np.mean([
        _pessimistic_p_at_1(q, original_encode(embedder, [{"image": str(images / c["image"])} for c in r["candidates"]],
                                               instruction="Represent the image."))
        for q, r in zip(queries, rows, strict=True)])
    assert results["datasets"]["Cand"]["metrics"]["P@1"] == pytest.approx(100 * expected)

    encoded.clear()
    assert main(argv) == 0
    assert encoded == []  # same model, same data: everything resumed / cached
    assert main([*argv, "--prompt-format", "vlm2vec"]) == 0
    assert sum(encoded) == 24  # a new prompt format changes every embedding
    assert json.loads((out / "results.json").read_text())["model"]["prompt_format"] == "vlm2vec"
