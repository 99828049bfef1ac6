"""From a training data config to a schedule file: the adapter and the one-call builder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from vis_embed.errors import ConfigError
from vis_embed.io import atomic_write_json
from vis_embed.sampling.naive import format_naive_report, plan_naive_schedule
from vis_embed.sampling.report import format_report
from vis_embed.sampling.schedule_io import write_schedule
from vis_embed.sampling.scheduler import Schedule, ScheduleSettings, SubDataset, plan_schedule


def subdatasets_from_config(config: Any) -> list[SubDataset]:
    """In-memory scheduler input from a ``TrainDataConfig`` (vis_embed.data).

    Identity labels are the loader's ``identity_key`` ("namespace::identity"), already scoped,
    so they are compared in one common namespace; pairs rows without identity stay unique.
    """
    datasets = []
    for ds in config.datasets:
        arrays = ds.arrays()
        keys = np.asarray(arrays.identity_keys + [None], dtype=object)
        labels = keys[arrays.identity]  # code -1 picks the trailing None
        datasets.append(SubDataset(
            name=ds.name, kind=ds.kind, ids=arrays.ids,
            identities=None if ds.kind == "pairs" and (arrays.identity < 0).all() else labels,
            hard_negatives=(np.asarray(arrays.hard_negative_offsets, dtype=np.int64),
                            np.asarray(arrays.hard_negative_indices, dtype=np.int64)),
            weight=float(ds.weight), namespace=""))
    return datasets


def build_schedule(data: Any, out: str | Path, steps: int, global_batch_size: int,
                   interleave_batch_size: int | None = None, hard_negatives: int = 5, seed: int = 0,
                   size_exponent: float = 1.0, small_datasets: str = "error",
                   strategy: str = "identity_aware", report_path: str | Path | None = None, show_progress: bool = False,
                   print_report: bool = False) -> Schedule:
    """Schedule the datasets of ``data`` (a data config path or ``TrainDataConfig``) into ``out``.

    Writes the Parquet schedule and its report (``report_path``, default ``OUT.report.json``).
    """
    from vis_embed.data import load_train_config

    if interleave_batch_size is None:
        raise ConfigError("interleave_batch_size (M, members per slot) is required")
    config = load_train_config(data) if isinstance(data, (str, Path)) else data
    settings = ScheduleSettings(steps=int(steps), global_batch_size=int(global_batch_size),
                                interleave_batch_size=int(interleave_batch_size),
                                hard_negatives=int(hard_negatives), seed=int(seed),
                                size_exponent=float(size_exponent),
                                small_datasets=small_datasets,  # type: ignore[arg-type]
                                strategy=strategy)  # type: ignore[arg-type]
    planner = plan_naive_schedule if settings.strategy == "naive" else plan_schedule
    schedule = planner(subdatasets_from_config(config), settings, show_progress=show_progress)
    out = Path(out)
    write_schedule(schedule, out, data_fingerprint=config.fingerprint())
    report_path = Path(report_path) if report_path else out.with_name(out.name + ".report.json")
    atomic_write_json(report_path, schedule.report)
    if print_report:
        print(format_naive_report(schedule.report) if settings.strategy == "naive"
              else format_report(schedule.report))
        print(f"wrote {out} ({settings.steps} steps x {settings.global_batch_size}) and {report_path}")
    return schedule


def load_report(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
