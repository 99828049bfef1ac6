"""``vis-embed eval``: evaluate a model (+ adapter) on a benchmark manifest.

    vis-embed eval --model Qwen/Qwen2-VL-2B-Instruct --adapter runs/visme/adapter \\
        --benchmark eval/mmeb.yaml --out results/visme-2b [--datasets ImageNet-1K,CIRR]

Writes OUT/results.json, OUT/results.md (Table 1 layout with the published rows),
OUT/plots/<meta-task>.png, OUT/grids/<dataset>.png, and OUT/datasets/ + OUT/cache/ that
make a re-run resume where it stopped.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vis_embed.errors import ConfigError, DataError
from vis_embed.evaluation.layouts import LAYOUTS, DatasetSpec
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


def _get(entry: Any, key: str, default: Any = None) -> Any:
    if isinstance(entry, dict):
        return entry.get(key, default)
    return getattr(entry, key, default)


def spec_from_entry(entry: Any) -> DatasetSpec:
    """Adapt one entry of ``vis_embed.data.load_benchmark`` (object or dict) to a DatasetSpec."""
    files = {}
    for role in ("path", "queries", "gallery"):
        value = _get(entry, role)
        if value is None and isinstance(_get(entry, "paths"), dict):
            value = _get(entry, "paths").get(role)
        if value is not None:
            files[role] = Path(value)
    image_root = _get(entry, "image_root")
    layout = str(_get(entry, "layout", "candidates"))
    if layout not in LAYOUTS:
        raise ConfigError(f"dataset {_get(entry, 'name')!r}: unknown layout {layout!r}; expected one of {LAYOUTS}")
    instructions = _get(entry, "instructions") or {}
    options = dict(_get(entry, "options") or {})
    if "index" in options and options["index"] not in INDEX_KINDS:
        raise DataError(f"unknown index {options['index']!r}; expected one of {', '.join(INDEX_KINDS)}",
                        path=_get(entry, "manifest_path"), line=_get(entry, "line"),
                        field=f"{_get(entry, 'name')}.options.index")
    return DatasetSpec(
        name=str(_get(entry, "name")), layout=layout, meta_task=str(_get(entry, "meta_task")),
        split=_get(entry, "split"), benchmark=_get(entry, "benchmark"), files=files,
        image_root=Path(image_root) if image_root else None,
        query_instruction=_get(entry, "query_instruction", instructions.get("query")),
        candidate_instruction=_get(entry, "candidate_instruction", instructions.get("candidate")),
        options=options,
    )


def load_specs(manifest: Path) -> tuple[list[DatasetSpec], str]:
    """Dataset specs of a manifest and the manifest's fingerprint.

    Parsing and validation belong to ``vis_embed.data.load_benchmark`` (errors name the file,
    line and key); this only adapts its entries to the harness's DatasetSpec.
    """
    from vis_embed.data import load_benchmark

    benchmark = load_benchmark(manifest)
    return [spec_from_entry(entry) for entry in benchmark.datasets], benchmark.fingerprint()


def _load_encoder(args: argparse.Namespace) -> Any:
    from vis_embed.model.embedder import Embedder

    overrides = {key: value for key, value in (("prompt_format", args.prompt_format),
                                               ("max_pixels", args.max_pixels), ("device", args.device))
                 if value is not None}
    return Embedder.from_pretrained(args.model, adapter=args.adapter, **overrides)


def evaluate_model(model: str | Path, benchmark: str | Path, out: str | Path, *, adapter: str | Path | None = None,
                   show_progress: bool = True, **settings: Any) -> dict[str, Any]:
    """Evaluate ``model`` (+ ``adapter``) on a manifest; write OUT/results.json etc.; return the results.

    The function form of ``vis-embed eval`` (used by the quickstart); ``settings`` are
    EvalSettings fields (batch_size, datasets, max_queries, pictures, ...).
    """
    from vis_embed.evaluation.harness import EvalSettings, Harness, describe_encoder
    from vis_embed.model.embedder import Embedder

    specs, benchmark_fingerprint = load_specs(Path(benchmark))
    encoder = Embedder.from_pretrained(str(model), adapter=None if adapter is None else str(adapter))
    harness = Harness(encoder, Path(out), EvalSettings(show_progress=show_progress, **settings),
                      describe_encoder(encoder, str(model), None if adapter is None else str(adapter)))
    return harness.run(specs, benchmark_fingerprint)


def run(args: argparse.Namespace) -> int:
    from vis_embed.evaluation.harness import EvalSettings, Harness, describe_encoder
    from vis_embed.evaluation.report import comparison_table

    if args.batch_size <= 0 or (args.max_queries is not None and args.max_queries <= 0):
        raise ConfigError("--batch-size and --max-queries must be positive")
    specs, benchmark_fingerprint = load_specs(args.benchmark)
    settings = EvalSettings(
        batch_size=args.batch_size, max_queries=args.max_queries,
        datasets=[name.strip() for name in args.datasets.split(",") if name.strip()] if args.datasets else None,
        index=args.index, depth=args.depth, n_examples=args.examples, cache_dir=args.cache_dir,
        show_progress=not args.quiet, pictures=not args.no_pictures, reference=args.reference,
    )
    encoder = _load_encoder(args)
    harness = Harness(encoder, args.out, settings, describe_encoder(encoder, args.model, args.adapter))
    results = harness.run(specs, benchmark_fingerprint)
    print(comparison_table({harness.model_info.get("name") or "model": results["groups"]}))
    print(f"wrote {args.out / 'results.json'} and {args.out / 'results.md'}")
    return 0
