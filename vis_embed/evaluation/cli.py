"""``vis-embed eval`` and ``vis-embed report``: argument parsing only.

    vis-embed eval --model Qwen/Qwen2-VL-2B-Instruct --adapter runs/visme/adapter \\
        --benchmark eval/mmeb.yaml --out results/visme-2b [--datasets ImageNet-1K,CIRR]
    vis-embed report results/visme-2b/results.json peer_scores.json [--json table.json]

``eval`` writes OUT/results.json, OUT/results.md (Table 1 layout with the published rows),
OUT/plots/<meta-task>.png, OUT/grids/<dataset>.png, and OUT/datasets/ + OUT/cache/ that
make a re-run resume where it stopped.  The library halves are
:mod:`vis_embed.evaluation.api` and :mod:`vis_embed.evaluation.report`.

Only light modules are imported at module level: ``vis-embed eval --help`` must not pay
for torch; the commands import the library when they run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vis_embed.config import add_model_arguments, from_arguments
from vis_embed.errors import ConfigError
from vis_embed import resources
from vis_embed.evaluation.mmeb_v2_scores import mmeb_v2_notes, with_mmeb_v2
from vis_embed.evaluation.report import (find_reference, load_groups, load_mmeb_v2, load_models, models_table,
                                         read_reference)
from vis_embed.evaluation.settings import EvalSettings
from vis_embed.io import atomic_write_json
from vis_embed.model.cli import add_model_loading_arguments, model_settings
from vis_embed.model.defaults import add_model_reference_arguments, add_preparation_arguments


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_reference_arguments(parser)
    parser.add_argument("--benchmark", required=True, type=Path, help="benchmark manifest YAML")
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    # --batch-size, --max-queries, --datasets, --index, --rescore, --dim, --depth, --examples, --tie-policy,
    # --cache-dir, --quiet, --no-pictures, --reference: generated from EvalSettings' fields
    add_model_arguments(parser, EvalSettings)
    add_model_loading_arguments(parser)  # --prompt-format, --max-pixels, --max-length, --dtype, --device, ...
    add_preparation_arguments(parser)


def _load_encoder(args: argparse.Namespace) -> Any:
    """The model, with the run's protocol (``args.protocol``, resolved against the manifest's)
    filling the EmbeddingConfig values no flag gave."""
    from vis_embed.evaluation import api  # torch, transformers: only when the command runs
    from vis_embed.model.runtime.embedder import load_embedder

    return load_embedder(args.model, args.adapter, workers=args.workers,
                         **api.protocol_settings(getattr(args, "protocol", None), model_settings(args)))


def run_eval(args: argparse.Namespace) -> int:
    from vis_embed.distributed import get_world_size, torchrun_group  # torch, transformers: only when the command runs
    from vis_embed.embedding_cache import CacheStats
    from vis_embed.evaluation import api

    settings = from_arguments(EvalSettings, args)  # before any model is loaded; errors name the flag
    specs, benchmark_fingerprint, manifest_protocol = api.load_benchmark_specs(args.benchmark)
    settings = settings.model_copy(update={"protocol": settings.protocol or manifest_protocol})  # the flag wins
    args.protocol = settings.protocol
    cache_stats = CacheStats()
    with torchrun_group():  # under torchrun: every rank encodes a share, rank 0 scores
        encoder = _load_encoder(args)
        results = api.evaluate_encoder(encoder, specs, benchmark_fingerprint, args.out, settings,
                                       model_name=args.model, adapter=args.adapter, cache_stats=cache_stats)
    if get_world_size() > 1:  # under torchrun: what this rank encoded and reused
        print(cache_stats.summary(), file=sys.stderr)
    if results is None:  # a rank other than 0
        return 0
    print(models_table({results["model"].get("name") or "model": results["groups"]}))
    print(f"wrote {args.out / 'results.json'} and {args.out / 'results.md'}")
    return 0


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", type=Path,
                        help="results.json, VLM2Vec score JSON files and/or folders of DATASET_score.json "
                             "(e.g. OUT/mmeb_scores; none: the published rows only)")
    parser.add_argument("--peers", action="store_true",
                        help="add the MMEB score files of peer models shipped with vis_embed (GME, VLM2Vec, ...)")
    parser.add_argument("--reference", type=Path, default=None,
                        help="published table CSV (default: the paper's Table 1, shipped with vis_embed)")
    parser.add_argument("--no-reference", action="store_true", help="leave the published rows out")
    parser.add_argument("--json", type=Path, default=None,
                        help="write {models: {FILE_STEM: {GROUP: mean}}, mmeb_v2: {FILE_STEM: {groups, counts, "
                             "data_version, left_out}}} (the files and the --peers; mmeb_v2 for those holding video "
                             "or visdoc tasks; left_out: their tasks that are not among MMEB-V2's 78)")


def run_report(args: argparse.Namespace) -> int:
    models = load_models(args.files)
    peer_files = {entry.name.removesuffix(".json"): entry for entry in resources.mmeb_score_files()} \
        if args.peers else {}
    peers = {name: load_groups(entry) for name, entry in peer_files.items()}
    reference_rows = [] if args.no_reference else read_reference(find_reference(args.reference))
    if not (models or peers or reference_rows):
        raise ConfigError("nothing to report: give result files, --peers, or drop --no-reference")
    # MMEB-V2 (image, video, visdoc) of every file that holds video or visdoc tasks: extra columns
    sources = {**peer_files, **dict(zip(models, args.files))}
    mmeb_v2 = {name: summary for name, source in sources.items() if (summary := load_mmeb_v2(source)) is not None}
    print(models_table(with_mmeb_v2(models, mmeb_v2), reference_rows, peers=with_mmeb_v2(peers, mmeb_v2)))
    if mmeb_v2:
        print("\n" + mmeb_v2_notes(mmeb_v2))
    if args.json is not None:
        atomic_write_json(args.json, {"models": {**peers, **models}, **({"mmeb_v2": mmeb_v2} if mmeb_v2 else {})})
    return 0
