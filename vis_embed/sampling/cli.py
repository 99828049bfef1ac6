"""``vis-embed schedule``: pre-generate the identity-aware batch schedule as Parquet."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="training data config YAML")
    parser.add_argument("--steps", type=int, required=True, help="number of optimizer steps (batches)")
    parser.add_argument("--global-batch-size", type=int, required=True, help="B: members per batch, all ranks")
    parser.add_argument("--interleave-batch-size", type=int, required=True,
                        help="M: members per slot; every slot comes from one sub-dataset (B = slots x M)")
    parser.add_argument("--hard-negatives", type=int, default=5,
                        help="k designated hard negatives placed in the anchor's slot (default 5; 0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="schedule Parquet file to write")
    parser.add_argument("--size-exponent", type=float, default=1.0,
                        help="dataset share ∝ weight x rows^EXP (1: weight x size, default; 0: weight only)")
    parser.add_argument("--small-datasets", choices=("error", "skip"), default="error",
                        help="a dataset with fewer than M usable identities: fail (default) or skip it "
                             "(listed in the report)")
    parser.add_argument("--strategy", choices=("identity_aware", "naive"), default="identity_aware",
                        help="identity_aware (VisME, default) or naive: one sub-dataset per batch, rows "
                             "drawn uniformly, no identity constraint (the ablation's baseline)")
    parser.add_argument("--report", default=None, help="report JSON (default: OUT.report.json)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from vis_embed.sampling.build import build_schedule

    build_schedule(args.data, args.out, steps=args.steps, global_batch_size=args.global_batch_size,
                   interleave_batch_size=args.interleave_batch_size, hard_negatives=args.hard_negatives,
                   seed=args.seed, size_exponent=args.size_exponent, small_datasets=args.small_datasets,
                   strategy=args.strategy,
                   report_path=args.report, show_progress=not args.no_progress, print_report=True)
    return 0
