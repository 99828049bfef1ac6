"""``vis-embed schedule``: pre-generate the identity-aware batch schedule as Parquet.

Every scheduling flag is a :class:`~vis_embed.sampling.settings.ScheduleSettings` field
(``--interleave-batch-size`` is ``interleave_batch_size``), generated from it
(:func:`vis_embed.config.add_model_arguments`): defaults, choices, help and the flag named by
an error come from that one declaration.
"""

from __future__ import annotations

import argparse

from vis_embed.config import add_model_arguments, from_arguments
from vis_embed.sampling.settings import ScheduleSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="training data config YAML")
    add_model_arguments(parser, ScheduleSettings,
                        only=("steps", "global_batch_size", "interleave_batch_size", "hard_negatives", "seed"))
    parser.add_argument("--out", required=True, help="schedule Parquet file to write")
    add_model_arguments(parser, ScheduleSettings, only=("size_exponent", "small_datasets", "strategy"))
    parser.add_argument("--report", default=None, help="report JSON (default: OUT.report.json)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from vis_embed.sampling.build import build_schedule, describe_schedule, schedule_report_path

    settings = from_arguments(ScheduleSettings, args)  # errors name the flag
    schedule = build_schedule(args.data, args.out, settings, report_path=args.report,
                              show_progress=not args.no_progress)
    print(describe_schedule(schedule, settings))
    print(f"wrote {args.out} and {schedule_report_path(args.out, args.report)}")
    return 0
