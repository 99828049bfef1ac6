"""``vis-embed mine-negatives``: the command line of :mod:`vis_embed.mining.hard_negatives`.

The library module holds the method (and says what the flags mean); this one only maps
flags onto it and writes the outputs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vis_embed.config import finite_float
from vis_embed.model.cli import add_model_loading_arguments, model_settings
from vis_embed.model.defaults import add_model_reference_arguments, add_preparation_arguments
from vis_embed.errors import ConfigError
from vis_embed.mining.hard_negatives import SIMILARITIES, check_threshold, load_mining_dataset, mine_dataset
from vis_embed.vectors.options import positive_int


def cosine_threshold(text: str) -> float:
    """argparse type of ``--min-positive-similarity``: a finite number the library's rule
    (:func:`~vis_embed.mining.hard_negatives.check_threshold`) takes; exit 2 naming the flag otherwise."""
    value = finite_float(text)
    try:
        return check_threshold(value, name="the threshold")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_reference_arguments(parser)
    parser.add_argument("--data", required=True, help="data config YAML (with --dataset) or one .jsonl/.parquet")
    parser.add_argument("--dataset", default=None, help="sub-dataset of the data config to mine")
    parser.add_argument("--group-by", default=None,
                        help="record field (dotted path, e.g. query.text) negatives must share; default: none")
    parser.add_argument("--k", type=positive_int, default=5, help="hard negatives per record (default 5)")
    parser.add_argument("--similarity", choices=SIMILARITIES, default="candidate",
                        help="rank the group's other records by candidate<->candidate similarity (default, "
                             "the paper's: generated images closest to the record's) or by the record's "
                             "query against their candidates")
    parser.add_argument("--out", required=True, help="output data file (.jsonl or .parquet)")
    parser.add_argument("--min-positive-similarity", type=cosine_threshold, default=None,
                        help="query-positive cosine (from -1 to 1) below which a record is a noisy positive")
    parser.add_argument("--noisy", choices=("flag", "remove"), default="flag",
                        help="noisy positives: flag them (noisy_positive: true) or remove them")
    parser.add_argument("--batch-size", type=positive_int, default=16, help="items per forward pass (default: 16)")
    add_model_loading_arguments(parser)  # --device, --prompt-format, --max-pixels, --max-length, ...
    parser.add_argument("--report", default=None, help="report JSON (default: OUT.mining.json)")
    add_preparation_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from vis_embed.data.tables import write_table
    from vis_embed.io import atomic_write_json
    from vis_embed.model.runtime.embedder import Embedder

    dataset = load_mining_dataset(args.data, args.dataset)
    encoder = Embedder.from_pretrained(args.model, adapter=args.adapter, workers=args.workers, **model_settings(args))
    rows, result = mine_dataset(dataset, encoder, k=args.k, group_by=args.group_by,
                                min_positive_similarity=args.min_positive_similarity,
                                remove_noisy=args.noisy == "remove", batch_size=args.batch_size,
                                show_progress=True, similarity=args.similarity)
    write_table(args.out, rows)
    report_path = Path(args.report) if args.report else Path(args.out).with_name(Path(args.out).name + ".mining.json")
    atomic_write_json(report_path, result.report)
    report = result.report
    print(f"{report['dataset']}: {report['records']} records, {report['records_with_k']} with {args.k} hard "
          f"negatives, {report['records_with_fewer']} with fewer, {report['positive_similarity']['below_threshold']} "
          f"noisy positives ({'removed' if args.noisy == 'remove' else 'flagged'}; {report['removed']} rows removed)")
    if args.group_by is not None:
        print(f"{report['records_without_group']} records without {args.group_by!r} (they get and give no "
              "hard negatives)")
    print(f"wrote {args.out} and {report_path}")
    return 0
