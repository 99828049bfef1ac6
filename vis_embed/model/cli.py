"""``vis-embed tiny-model`` and ``vis-embed encode``: argument parsing only.

    vis-embed tiny-model OUT_DIR [--arch qwen2-vl|qwen2.5-vl|qwen3-vl] [--seed N] [--preset tiny]
    vis-embed encode --model M --input items.jsonl --output emb.npy [--instruction TEXT]
                     [--workers N|auto] [--decode exact|fast] [--dry-run]

Only light modules are imported at module level (``--help`` must not pay for torch); each
command imports its library module (:mod:`vis_embed.model.tiny`,
:mod:`vis_embed.model.encode_cli`) when it runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vis_embed.errors import ConfigError
from vis_embed.model.defaults import COMPILE_HELP, DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, add_preparation_arguments
from vis_embed.model.prompts import PROMPT_FORMATS
from vis_embed.model.tiny import ARCHS, PRESETS, build_tiny_checkpoint


def add_tiny_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out_dir", type=Path, help="directory to write the checkpoint to")
    parser.add_argument("--arch", choices=ARCHS, default="qwen2-vl",
                        help="model family whose config, processor and chat template are built (default: qwen2-vl)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random weights: the same seed writes the same checkpoint (default: 0)")
    parser.add_argument("--preset", choices=PRESETS, default="tiny",
                        help="size; qwen2-vl-2b-shallow = 2B vocab and width, 4 layers")


def run_tiny_model(args: argparse.Namespace) -> int:
    path = build_tiny_checkpoint(args.out_dir, arch=args.arch, seed=args.seed, preset=args.preset)
    print(f"wrote {args.arch} ({args.preset}) checkpoint to {path}")
    return 0


def add_model_loading_arguments(parser: argparse.ArgumentParser) -> None:
    """How to load the model for inference: pixel budget, device, dtype, prompt format
    (``encode`` and ``serve``; the values go to ``Embedder.from_pretrained``)."""
    parser.add_argument("--max-pixels", type=int, default=DEFAULT_MAX_PIXELS,
                        help=f"largest image area in pixels before resizing (default: {DEFAULT_MAX_PIXELS})")
    parser.add_argument("--min-pixels", type=int, default=DEFAULT_MIN_PIXELS,
                        help=f"smallest image area in pixels (default: {DEFAULT_MIN_PIXELS})")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: auto)")
    parser.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: bf16 on CUDA)")
    parser.add_argument("--prompt-format", choices=PROMPT_FORMATS, default="chat",
                        help="prompt template: chat (Qwen chat messages) or vlm2vec (default: chat)")
    parser.add_argument("--compile", action="store_true", help=COMPILE_HELP)


def add_encode_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="hub id or local checkpoint directory")
    parser.add_argument("--input", required=True, type=Path, help="items JSONL (image?, text?)")
    parser.add_argument("--output", type=Path, default=None,
                        help="embeddings .npy to write (required unless --dry-run)")
    parser.add_argument("--adapter", type=Path, default=None, help="peft LoRA adapter directory")
    parser.add_argument("--instruction", default=None, help="prepended to every item's text")
    parser.add_argument("--batch-size", type=int, default=16,
                        help="items per forward pass; the vectors do not depend on it (default: 16)")
    add_model_loading_arguments(parser)
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                        help="skip: write bad lines to OUTPUT.rejects.jsonl and encode the rest")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_preparation_arguments(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="load only the processor and prepare every item as a real encode would (in the "
                             "--workers processes); report bad items (with --on-error skip and --output: the "
                             "rejects file) and token-count statistics; write no embeddings")


def run_encode(args: argparse.Namespace) -> int:
    from vis_embed.distributed import get_rank, get_world_size  # torch: only when the command runs
    from vis_embed.embedding_cache import CacheStats
    from vis_embed.model.encode_cli import encode_jsonl

    if args.dry_run:
        return _dry_run(args)
    if args.output is None:
        raise ConfigError("encode needs --output (or --dry-run)")
    cache_stats = CacheStats()
    written = encode_jsonl(
        args.model, args.input, args.output, adapter=args.adapter, instruction=args.instruction,
        batch_size=args.batch_size, min_pixels=args.min_pixels, max_pixels=args.max_pixels, device=args.device,
        dtype=args.dtype, prompt_format=args.prompt_format, compile=args.compile, on_error=args.on_error,
        show_progress=not args.no_progress, cache_stats=cache_stats, decode=args.decode or "exact",
        workers=args.workers)
    if get_world_size() > 1:  # under torchrun: what this rank did, then rank 0 alone reports the output
        print(cache_stats.summary(), file=sys.stderr)
    if get_rank() == 0:
        print(written.summary())
    return 0


def _dry_run(args: argparse.Namespace) -> int:
    import json

    from vis_embed.model.dry_run_cli import dry_run_jsonl  # transformers: only when the command runs

    report = dry_run_jsonl(
        args.model, args.input, output=args.output, instruction=args.instruction, batch_size=args.batch_size,
        min_pixels=args.min_pixels, max_pixels=args.max_pixels, prompt_format=args.prompt_format,
        decode=args.decode or "exact", workers=args.workers, on_error=args.on_error)
    print(report.summary())
    print(json.dumps(report.statistics()))
    return 0
