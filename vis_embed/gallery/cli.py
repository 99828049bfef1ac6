"""``vis-embed index`` and ``vis-embed search``: argument parsing only.

    vis-embed index --embeddings EMB.npy --out DIR [--kind auto|flat|binary|int8|ivf-pq] [--memory GB]
    vis-embed search --model M [--adapter A] --index DIR --input queries.jsonl --k 10 --output hits.jsonl

faiss, numpy and torch are imported when a command runs, not for ``--help``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vis_embed.vectors.index_spec import STORE_KINDS
from vis_embed.gallery.options import ALLOW_ANY_MODEL_HELP, add_rescore_argument, seed_int
from vis_embed.vectors.options import positive_int
from vis_embed.model.cli import add_model_loading_arguments, model_settings
from vis_embed.model.defaults import add_model_reference_arguments, add_preparation_arguments


def add_index_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--embeddings", required=True, type=Path,
                        help="float vectors written by vis-embed encode (with its EMB.ids.json beside)")
    parser.add_argument("--out", required=True, type=Path,
                        help="index directory to write (replaced atomically; an existing --out must be an index "
                             "directory or empty, and must not hold --embeddings)")
    parser.add_argument("--kind", choices=STORE_KINDS, default="auto",
                        help="the kinds of eval's --index that persist: flat (exact float32), int8 (8-bit codes), "
                             "binary (sign bits, Hamming), ivf-pq "
                             "(inverted lists of product-quantized codes) or auto (default: flat for galleries "
                             "up to 262144 rows that fit --memory, else binary, else ivf-pq; recorded in "
                             "index.json); quantized kinds re-rank a 4 x k shortlist with the floats on disk")
    parser.add_argument("--memory", type=float, default=None, metavar="GB",
                        help="memory budget of the searched codes (default: half this machine's memory)")
    parser.add_argument("--seed", type=seed_int, default=0, help="ivf-pq training seed (default: 0)")


def run_index(args: argparse.Namespace) -> int:
    from vis_embed.gallery.store import write_index

    settings = write_index(args.embeddings, args.out, kind=args.kind, memory_gb=args.memory, seed=args.seed)
    print(f"wrote a {settings.kind} index of {settings.rows} x {settings.dim} "
          f"({settings.bytes_per_vector} B a vector; {settings.kind_reason}) to {args.out}")
    return 0


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_reference_arguments(parser, "the model (Hub id or checkpoint) that encoded the gallery")
    parser.add_argument("--index", required=True, type=Path, help="index directory written by vis-embed index")
    parser.add_argument("--input", required=True, type=Path, help="queries JSONL (items: image?, text?, id?)")
    parser.add_argument("--output", required=True, type=Path, help="hits JSONL to write")
    parser.add_argument("--k", type=positive_int, default=10, help="hits per query (default: 10)")
    parser.add_argument("--instruction", default=None,
                        help="query instruction (default: the model's recorded query_instruction)")
    add_rescore_argument(parser)
    parser.add_argument("--allow-any-model", action="store_true", help=ALLOW_ANY_MODEL_HELP)
    parser.add_argument("--batch-size", type=positive_int, default=16, help="queries per forward pass (default: 16)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_model_loading_arguments(parser)
    add_preparation_arguments(parser)


def run_search(args: argparse.Namespace) -> int:
    from vis_embed.gallery.search_file import search_jsonl

    count = search_jsonl(args.model, args.index, args.input, args.output, k=args.k, adapter=args.adapter,
                         instruction=args.instruction, batch_size=args.batch_size, rescore=args.rescore,
                         allow_any_model=args.allow_any_model,
                         show_progress=not args.no_progress, workers=args.workers, **model_settings(args))
    print(json.dumps({"queries": count, "output": str(args.output)}))
    return 0
