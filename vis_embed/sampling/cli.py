"""``vis-embed schedule``: pre-generate the identity-aware batch schedule as Parquet.

Every scheduling flag is a :class:`~vis_embed.sampling.settings.ScheduleSettings` field
(``--interleave-batch-size`` is ``interleave_batch_size``): defaults, choices and help come
from that one declaration, and the settings' errors, which name settings, are given the
flag spelling here.
"""

from __future__ import annotations

import argparse
import typing
from typing import Any

from vis_embed.errors import ConfigError
from vis_embed.sampling.settings import ScheduleSettings

# settings that have no default in ScheduleSettings are required flags
_SETTING_TYPES: dict[str, type] = {"steps": int, "global_batch_size": int, "interleave_batch_size": int,
                                   "hard_negatives": int, "seed": int, "size_exponent": float}
_CHOICE_SETTINGS = ("small_datasets", "strategy")


def flag(setting: str) -> str:
    """The command-line spelling of a setting: ``interleave_batch_size`` -> ``--interleave-batch-size``."""
    return "--" + setting.replace("_", "-")


def _add_setting(parser: argparse.ArgumentParser, setting: str) -> None:
    info = ScheduleSettings.model_fields[setting]
    options: dict[str, Any] = {"help": info.description}
    if info.is_required():
        options["required"] = True
    else:
        options["default"] = info.default
    if setting in _CHOICE_SETTINGS:
        options["choices"] = typing.get_args(info.annotation)
    else:
        options["type"] = _SETTING_TYPES[setting]
    parser.add_argument(flag(setting), dest=setting, **options)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="training data config YAML")
    for setting in ("steps", "global_batch_size", "interleave_batch_size", "hard_negatives", "seed"):
        _add_setting(parser, setting)
    parser.add_argument("--out", required=True, help="schedule Parquet file to write")
    for setting in ("size_exponent", "small_datasets", "strategy"):
        _add_setting(parser, setting)
    parser.add_argument("--report", default=None, help="report JSON (default: OUT.report.json)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from vis_embed.sampling.build import build_schedule, describe_schedule, schedule_report_path

    values = {name: getattr(args, name) for name in ScheduleSettings.model_fields}
    try:
        settings = ScheduleSettings(**values)
        schedule = build_schedule(args.data, args.out, settings, report_path=args.report,
                                  show_progress=not args.no_progress)
    except ConfigError as exc:
        # the message names settings; say which flags those are
        mentioned = [name for name in values if name in str(exc)]
        if not mentioned:
            raise
        raise ConfigError(f"{exc} (flags: {', '.join(f'{flag(name)} is {name}' for name in mentioned)})") from None
    print(describe_schedule(schedule, settings))
    print(f"wrote {args.out} and {schedule_report_path(args.out, args.report)}")
    return 0
