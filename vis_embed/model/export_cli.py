"""``vis-embed export``: argument parsing only (the library half is :mod:`vis_embed.model.export`).

    vis-embed export MODEL [--adapter A] --format sentence-transformers --out DIR
        [--query-instruction TEXT] [--document-instruction TEXT]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vis_embed.model.defaults import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, DTYPE_NAMES
from vis_embed.model.export import DEFAULT_DOCUMENT_INSTRUCTION, DEFAULT_QUERY_INSTRUCTION, EXPORT_FORMATS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", default=None,
                        help="base model: hub id or checkpoint directory (default: the adapter's recorded base)")
    parser.add_argument("--adapter", type=Path, default=None,
                        help="LoRA adapter directory folded into the weights, or a projection-head "
                        "directory (adaptation: head) added as a Dense module")
    parser.add_argument("--format", choices=EXPORT_FORMATS, default="sentence-transformers",
                        help="output layout (sentence-transformers: also what `vllm serve` reads)")
    parser.add_argument("--out", required=True, type=Path, help="directory to write")
    parser.add_argument("--query-instruction", default=DEFAULT_QUERY_INSTRUCTION,
                        help=f"prompt 'query' (encode_query) (default: {DEFAULT_QUERY_INSTRUCTION!r})")
    parser.add_argument("--document-instruction", default=DEFAULT_DOCUMENT_INSTRUCTION,
                        help=f"prompt 'document' (encode_document) (default: {DEFAULT_DOCUMENT_INSTRUCTION!r})")
    parser.add_argument("--min-pixels", type=int, default=DEFAULT_MIN_PIXELS,
                        help=f"smallest image area in pixels (default: {DEFAULT_MIN_PIXELS})")
    parser.add_argument("--max-pixels", type=int, default=DEFAULT_MAX_PIXELS,
                        help=f"largest image area in pixels (default: {DEFAULT_MAX_PIXELS})")
    parser.add_argument("--dtype", choices=DTYPE_NAMES, default="auto",
                        help="dtype of the written weights (auto: the base checkpoint's)")


def run(args: argparse.Namespace) -> int:
    from vis_embed.errors import ConfigError
    from vis_embed.model.export import export_sentence_transformers

    if args.model is None and args.adapter is None:
        raise ConfigError("give MODEL, --adapter, or both")
    out = export_sentence_transformers(
        args.model, args.out, adapter=args.adapter, query_instruction=args.query_instruction or None,
        document_instruction=args.document_instruction or None, min_pixels=args.min_pixels,
        max_pixels=args.max_pixels, dtype=args.dtype)
    print(f"sentence-transformers model written to {out} "
          f"(SentenceTransformer({str(out)!r}); vllm serve {out} --runner pooling --convert embed)")
    return 0
