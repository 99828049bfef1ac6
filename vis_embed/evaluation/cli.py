"""``vis-embed eval``: evaluate a model (+ adapter) on a benchmark manifest.

    vis-embed eval --model Qwen/Qwen2-VL-2B-Instruct --adapter runs/visme/adapter \\
        --benchmark eval/mmeb.yaml --out results/visme-2b [--datasets ImageNet-1K,CIRR]

Writes OUT/results.json, OUT/results.md (Table 1 layout with the published rows),
OUT/plots/<meta-task>.png, OUT/grids/<dataset>.png, and OUT/datasets/ + OUT/cache/ that
make a re-run resume where it stopped.  The library half is :mod:`vis_embed.evaluation.api`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vis_embed.errors import ConfigError
from vis_embed.evaluation import api
from vis_embed.evaluation.harness import EvalSettings
from vis_embed.evaluation.report import comparison_table
from vis_embed.evaluation.search import INDEX_KINDS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="checkpoint folder or hub name of the backbone")
    parser.add_argument("--adapter", default=None, help="LoRA adapter folder (optional)")
    parser.add_argument("--benchmark", required=True, type=Path, help="benchmark manifest YAML")
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--datasets", default=None, help="comma-separated dataset names (default: all)")
    parser.add_argument("--max-queries", type=int, default=None, help="evaluate only the first N queries/rows")
    parser.add_argument("--index", choices=INDEX_KINDS, default="exact",
                        help="gallery search: exact (faiss float32, default), exact-bf16 (same exact result, "
                             "bf16 shortlist + exact re-rank; several times faster on CPUs with AMX) "
                             "or ivf (approximate)")
    parser.add_argument("--depth", type=int, default=None,
                        help="gallery ranking depth (default: whole gallery up to 10k, else 1000)")
    parser.add_argument("--prompt-format", default=None, help="override the model's prompt format (chat | vlm2vec)")
    parser.add_argument("--max-pixels", type=int, default=None, help="override the image pixel budget")
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="embedding cache (default OUT/cache)")
    parser.add_argument("--examples", type=int, default=3, help="queries per retrieval grid (0: no grids)")
    parser.add_argument("--no-pictures", action="store_true", help="skip bar charts and retrieval grids")
    parser.add_argument("--reference", type=Path, default=None,
                        help="published table CSV (default: ../shared/reference/visme_table1.csv)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _load_encoder(args: argparse.Namespace) -> Any:
    return api.load_embedder(args.model, args.adapter, prompt_format=args.prompt_format,
                             max_pixels=args.max_pixels, device=args.device)


def run(args: argparse.Namespace) -> int:
    if args.batch_size <= 0 or (args.max_queries is not None and args.max_queries <= 0):
        raise ConfigError("--batch-size and --max-queries must be positive")
    specs, benchmark_fingerprint = api.load_specs(args.benchmark)
    settings = EvalSettings(
        batch_size=args.batch_size, max_queries=args.max_queries,
        datasets=[name.strip() for name in args.datasets.split(",") if name.strip()] if args.datasets else None,
        index=args.index, depth=args.depth, n_examples=args.examples, cache_dir=args.cache_dir,
        show_progress=not args.quiet, pictures=not args.no_pictures, reference=args.reference,
    )
    encoder = _load_encoder(args)
    results = api.evaluate_encoder(encoder, specs, benchmark_fingerprint, args.out, settings,
                                   model_name=args.model, adapter=args.adapter)
    print(comparison_table({results["model"].get("name") or "model": results["groups"]}))
    print(f"wrote {args.out / 'results.json'} and {args.out / 'results.md'}")
    return 0
