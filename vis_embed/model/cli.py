"""``vis-embed tiny-model`` and ``vis-embed encode``: argument parsing only.

    vis-embed tiny-model OUT_DIR [--arch qwen2-vl|qwen2.5-vl|qwen3-vl] [--seed N] [--preset tiny]
    vis-embed encode --model M --input items.jsonl --output emb.npy [--instruction TEXT]
                     [--workers N|auto] [--decode exact|fast] [--dry-run]

Only light modules are imported at module level (``--help`` must not pay for torch); each
command imports its library module (:mod:`vis_embed.model.files.tiny`,
:mod:`vis_embed.model.runtime.encode_file`) when it runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vis_embed.errors import ConfigError
from vis_embed.vectors.options import PRECISIONS, add_dim_argument, positive_int
from vis_embed.model.defaults import add_model_reference_arguments, COMPILE_HELP, add_preparation_arguments
from vis_embed.model.embedding_config import add_embedding_config_arguments, given_settings
from vis_embed.model.files.tiny import ARCHS, PRESETS, build_tiny_checkpoint


def add_tiny_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out_dir", type=Path, help="directory to write the checkpoint to")
    parser.add_argument("--arch", choices=ARCHS, default="qwen2-vl",
                        help="model family whose config, processor and chat template are built (default: qwen2-vl)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random weights: the same seed writes the same checkpoint (default: 0)")
    parser.add_argument("--preset", choices=PRESETS, default="tiny",
                        help="size; qwen2-vl-2b-shallow = 2B vocab and width, 4 layers; qwen2-vl-2b, "
                             "qwen2.5-vl-3b, qwen2.5-vl-7b = the published sizes (random weights)")


def run_tiny_model(args: argparse.Namespace) -> int:
    path = build_tiny_checkpoint(args.out_dir, arch=args.arch, seed=args.seed, preset=args.preset)
    print(f"wrote {args.arch} ({args.preset}) checkpoint to {path}")
    return 0


def add_model_loading_arguments(parser: argparse.ArgumentParser) -> None:
    """How to load the model for inference (encode, eval, serve, mine-negatives): the
    EmbeddingConfig flags, generated from the class (default: the value recorded with the model,
    else the built-in one; :func:`model_settings` collects them), plus device and --compile."""
    add_embedding_config_arguments(parser)
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: auto)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help=COMPILE_HELP)


def model_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of ``Embedder.from_pretrained`` that add_model_loading_arguments' flags gave."""
    return {**given_settings(args), "device": args.device, "compile": args.compile}


def add_encode_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_reference_arguments(parser)
    parser.add_argument("--input", required=True, type=Path, help="items JSONL (image?, text?)")
    parser.add_argument("--output", type=Path, default=None,
                        help="embeddings .npy to write (required unless --dry-run)")
    parser.add_argument("--instruction", default=None, help="prepended to every item's text")
    parser.add_argument("--batch-size", type=positive_int, default=16,
                        help="items per forward pass; the vectors do not depend on it (default: 16)")
    add_model_loading_arguments(parser)
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                        help="skip: write bad lines to OUTPUT.rejects.jsonl and encode the rest")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_preparation_arguments(parser)
    add_dim_argument(parser)
    parser.add_argument("--precision", choices=PRECISIONS, default="float32",
                        help="stored form (sentence-transformers' quantize_embeddings): float16; int8/uint8 with "
                             "per-dimension ranges saved as OUTPUT.ranges.npy; binary/ubinary packed sign bits "
                             "(default: float32)")
    parser.add_argument("--ranges", type=Path, default=None, metavar="RANGES.npy",
                        help="int8/uint8: quantize with these saved ranges (the gallery's OUTPUT.ranges.npy) "
                             "instead of calibrating on this output, so queries match the gallery")
    parser.add_argument("--dry-run", action="store_true",
                        help="load only the processor and prepare every item as a real encode would (in the "
                             "--workers processes); report bad items (with --on-error skip and --output: the "
                             "rejects file) and token-count statistics; write no embeddings")


def run_encode(args: argparse.Namespace) -> int:
    from vis_embed.distributed import get_rank, get_world_size  # torch: only when the command runs
    from vis_embed.embedding_cache import CacheStats
    from vis_embed.vectors.stored_form import StoredForm
    from vis_embed.model.runtime.encode_file import encode_jsonl

    if args.dry_run:
        return _dry_run(args)
    if args.output is None:
        raise ConfigError("encode needs --output (or --dry-run)")
    cache_stats = CacheStats()
    written = encode_jsonl(
        args.model, args.input, args.output, adapter=args.adapter, instruction=args.instruction,
        batch_size=args.batch_size, on_error=args.on_error, show_progress=not args.no_progress,
        cache_stats=cache_stats, workers=args.workers,
        storage=StoredForm(dim=args.dim, precision=args.precision, ranges_file=args.ranges), **model_settings(args))
    if get_world_size() > 1:  # under torchrun: what this rank did, then rank 0 alone reports the output
        print(cache_stats.summary(), file=sys.stderr)
    if get_rank() == 0:
        print(written.summary())
    return 0


def _dry_run(args: argparse.Namespace) -> int:
    import json

    from vis_embed.model.runtime.dry_run import dry_run_jsonl  # transformers: only when the command runs

    report = dry_run_jsonl(
        args.model, args.input, adapter=args.adapter, output=args.output, instruction=args.instruction,
        batch_size=args.batch_size, workers=args.workers, on_error=args.on_error, **given_settings(args))
    print(report.summary())
    print(json.dumps(report.statistics()))
    return 0
