"""Does ``--decode fast`` change retrieval?  Paired P@1 of exact vs fast on the synthetic benchmark.

For each seed: render the synthetic benchmark (``vis_embed.prep.synth.generate``), store every
evaluation image ``--upscale`` times larger as a JPEG (bicubic; boxes scaled with it) so that
the images are photo-sized next to the pixel budget and fast decoding actually reduces them,
then evaluate the same model on it twice -- ``decode="exact"`` and ``decode="fast"`` -- and
print each dataset's P@1 (the harness's main metric) in both modes, the paired differences per
seed, their mean and standard error, and the cosine between the two modes' vectors.  Make
``fast`` the default only if the mean paired difference is within noise (|mean| < 2 SE).

    .venv/bin/python benchmarks/decode_fidelity.py --model runs/quickstart/merged --seeds 0 1 2 3 4
    .venv/bin/python benchmarks/decode_fidelity.py --quick      # smoke run: tiny random model, 1 seed
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image


def upscale_eval_images(root: Path, factor: int) -> None:
    """Every image under ``root/eval/images`` ``factor`` x larger (JPEG bytes, same file name),
    and every ``bbox`` in ``root/eval/*.jsonl`` scaled with it."""
    for path in sorted((root / "eval" / "images").rglob("*.*")):
        with Image.open(path) as image:
            large = image.convert("RGB").resize((image.width * factor, image.height * factor), Image.BICUBIC)
        large.save(path, format="JPEG", quality=92)  # the decoder sniffs the format, not the name
    for table in (root / "eval").glob("*.jsonl"):
        rows = [_scale_boxes(json.loads(line), factor) for line in table.read_text().splitlines() if line.strip()]
        table.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _scale_boxes(value: Any, factor: int) -> Any:
    if isinstance(value, dict):
        return {key: ([coordinate * factor for coordinate in item] if key in ("bbox", "boxes") and _numbers(item)
                      else _scale_boxes(item, factor)) for key, item in value.items()}
    if isinstance(value, list):
        return [_scale_boxes(item, factor) for item in value]
    return value


def _numbers(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, (int, float)) for v in value)


def evaluate(model: str, adapter: str | None, root: Path, out: Path, decode: str, max_pixels: int,
             datasets: list[str] | None, max_queries: int | None) -> dict[str, float]:
    """Dataset name -> P@1 (the datasets whose primary metric it is) of ``model`` on
    ``root/benchmark.yaml`` with ``decode``."""
    from vis_embed.evaluation.api import evaluate_encoder, load_specs
    from vis_embed.evaluation.settings import EvalSettings
    from vis_embed.model.runtime.embedder import load_embedder

    specs, fingerprint = load_specs(root / "benchmark.yaml")
    embedder = load_embedder(model, adapter, decode=decode, max_pixels=max_pixels, workers="auto")
    try:
        results = evaluate_encoder(embedder, specs, fingerprint, out, EvalSettings(
            datasets=datasets, max_queries=max_queries, show_progress=False, pictures=False, n_examples=0))
    finally:
        embedder.close()
    return {name: float(entry["metrics"]["P@1"]) for name, entry in results["datasets"].items()
            if entry.get("primary", "P@1") == "P@1" and "P@1" in entry.get("metrics", {})}


def vector_cosines(model: str, adapter: str | None, root: Path, max_pixels: int, limit: int = 256) -> np.ndarray:
    """Cosine between the exact and fast vectors of (up to ``limit``) evaluation images."""
    from vis_embed.model.runtime.embedder import load_embedder

    paths = sorted((root / "eval" / "images").rglob("*.*"))[:limit]
    items = [{"image": str(path)} for path in paths]
    vectors = []
    for decode in ("exact", "fast"):
        embedder = load_embedder(model, adapter, decode=decode, max_pixels=max_pixels, workers="auto")
        try:
            vectors.append(embedder.encode(items))
        finally:
            embedder.close()
    return np.sum(vectors[0] * vectors[1], axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="checkpoint (default: a tiny random one: a smoke run only)")
    parser.add_argument("--adapter", default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--size", default="small", help="synth size (default: small)")
    parser.add_argument("--upscale", type=int, default=8, help="evaluation images stored this many times larger")
    parser.add_argument("--max-pixels", type=int, default=12544,
                        help="pixel budget (default: 112x112, the quickstart's)")
    parser.add_argument("--datasets", default=None, help="comma-separated datasets (default: all)")
    parser.add_argument("--max-queries", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="tiny synth, one seed, a tiny random model")
    args = parser.parse_args()
    from vis_embed.prep.synth import generate

    seeds = args.seeds[:1] if args.quick else args.seeds
    datasets = [name.strip() for name in args.datasets.split(",")] if args.datasets else None
    differences: dict[str, list[float]] = {}
    cosine_lines: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        model = args.model
        if model is None:
            from vis_embed.model.files.tiny import build_tiny_checkpoint

            model = str(build_tiny_checkpoint(Path(scratch) / "tiny"))
        print("| seed | dataset | P@1 exact | P@1 fast | fast - exact |")
        print("|---:|---|---:|---:|---:|")
        for seed in seeds:
            root = generate(Path(scratch) / f"synth{seed}", seed=seed, size="tiny" if args.quick else args.size)
            upscale_eval_images(Path(root), args.upscale)
            scores = {decode: evaluate(model, args.adapter, Path(root), Path(scratch) / f"eval{seed}-{decode}",
                                       decode, args.max_pixels, datasets, args.max_queries)
                      for decode in ("exact", "fast")}
            cosines = vector_cosines(model, args.adapter, Path(root), args.max_pixels)
            cosine_lines.append(f"seed {seed}: {len(cosines)} images, cosine fast vs exact min {cosines.min():.6f}, "
                                f"mean {cosines.mean():.6f}")
            for name in sorted(scores["exact"]):
                exact, fast = scores["exact"][name], scores["fast"].get(name, math.nan)
                differences.setdefault(name, []).append(fast - exact)
                print(f"| {seed} | {name} | {exact:.4f} | {fast:.4f} | {fast - exact:+.4f} |")
    print("\n" + "\n".join(cosine_lines))
    print("\n| dataset | seeds | mean fast - exact | standard error | within noise (|mean| < 2 SE) |")
    print("|---|---:|---:|---:|---|")
    for name, values in sorted(differences.items()):
        data = np.asarray(values)
        se = float(data.std(ddof=1) / math.sqrt(len(data))) if len(data) > 1 else math.nan
        within = "yes" if (se == se and abs(data.mean()) < 2 * se) or not data.any() else "no"
        print(f"| {name} | {len(data)} | {data.mean():+.4f} | {se:.4f} | {within} |")


if __name__ == "__main__":
    main()
