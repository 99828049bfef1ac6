"""From a training data config to a schedule file: the adapter and the one-call builder."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vis_embed.data.factorize import factorize
from vis_embed.io import atomic_write_json
from vis_embed.sampling.naive import format_naive_report, plan_naive_schedule
from vis_embed.sampling.report import format_report
from vis_embed.sampling.schedule_io import write_schedule
from vis_embed.sampling.scheduler import plan_schedule
from vis_embed.sampling.settings import ScheduleSettings
from vis_embed.sampling.types import Schedule, SubDataset

if TYPE_CHECKING:  # the loader imports images and tables: only when building from a path
    from vis_embed.data.train import TrainDataConfig

log = logging.getLogger(__name__)


def subdatasets_from_config(config: TrainDataConfig) -> list[SubDataset]:
    """In-memory scheduler input from a ``TrainDataConfig`` (vis_embed.data).

    The loader has already encoded each dataset's identities as int codes into its
    ``identity_keys`` ("namespace::identity", already scoped).  Those keys are merged across
    datasets once, over the distinct keys only, into one code space in first-seen order (so
    every dataset is compared in one common namespace); the rows keep int codes throughout.
    Pairs rows without identity (code -1) stay unique.
    """
    arrays = [ds.arrays() for ds in config.datasets]
    key_code, names = _merge_identity_keys([a.identity_keys for a in arrays])
    datasets, first_key = [], 0
    for ds, a in zip(config.datasets, arrays):
        codes = np.full(len(a.identity), -1, dtype=np.int64)
        labelled = a.identity >= 0
        codes[labelled] = key_code[first_key + a.identity[labelled]]
        first_key += len(a.identity_keys)
        unlabelled_pairs = ds.kind == "pairs" and not labelled.any()
        datasets.append(SubDataset(
            name=ds.name, kind=ds.kind, ids=a.ids,
            identities=None if unlabelled_pairs else codes,
            identity_names=None if unlabelled_pairs else names,
            hard_negatives=(np.asarray(a.hard_negative_offsets, dtype=np.int64),
                            np.asarray(a.hard_negative_indices, dtype=np.int64)),
            weight=float(ds.weight), namespace=""))
    return datasets


def _merge_identity_keys(keys_per_dataset: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Global code of every (dataset, local code) key, in first-seen order, and the code -> key table.

    First-seen order (not sorted order) keeps the identity numbering, and so the schedule,
    what it has always been for the same data and seed.
    """
    codes, distinct = factorize([key for keys in keys_per_dataset for key in keys])
    return codes, np.array(distinct, dtype=object)


def member_labels(config: TrainDataConfig, schedule: Schedule) -> np.ndarray:
    """The loss-label code of every member's positive: the codes the loader computed once
    (``TrainDataset.labels``), looked up by (dataset, positive row); int64, schedule order."""
    labels = [config.dataset(name).labels for name in schedule.dataset_names]
    offsets = np.concatenate([[0], np.cumsum([len(codes) for codes in labels])]).astype(np.int64)
    every = np.concatenate(labels).astype(np.int64) if labels else np.zeros(0, dtype=np.int64)
    return every[offsets[:-1][schedule.dataset.astype(np.int64)] + schedule.positive_row]


def build_schedule(data: str | Path | TrainDataConfig, out: str | Path, settings: ScheduleSettings | None = None,
                   *, report_path: str | Path | None = None, show_progress: bool = False,
                   log_report: bool = False, **setting_values: Any) -> Schedule:
    """Schedule the datasets of ``data`` (a data config path or ``TrainDataConfig``) into ``out``.

    The settings are a :class:`ScheduleSettings` or its fields as keyword arguments
    (``steps=``, ``global_batch_size=``, ``interleave_batch_size=``, ``hard_negatives=`` ...,
    with that class's defaults).  Writes the Parquet schedule and its report (``report_path``,
    default ``OUT.report.json``).
    """
    from vis_embed.data import load_train_config

    if settings is None:
        settings = ScheduleSettings(**setting_values)
    elif setting_values:
        settings = ScheduleSettings(**{**settings.to_json(), **setting_values})
    config = load_train_config(data) if isinstance(data, (str, Path)) else data
    planner = plan_naive_schedule if settings.strategy == "naive" else plan_schedule
    schedule = planner(subdatasets_from_config(config), settings, show_progress=show_progress)
    schedule.label = member_labels(config, schedule)
    out = Path(out)
    write_schedule(schedule, out, data_fingerprint=config.fingerprint())
    report_path = schedule_report_path(out, report_path)
    atomic_write_json(report_path, schedule.report)
    if log_report:
        log.info("%s\n%s", describe_schedule(schedule, settings), f"wrote {out} and {report_path}")
    return schedule


def schedule_report_path(out: str | Path, report_path: str | Path | None = None) -> Path:
    """Where the schedule's report goes: ``report_path``, else ``OUT.report.json``."""
    out = Path(out)
    return Path(report_path) if report_path else out.with_name(out.name + ".report.json")


def describe_schedule(schedule: Schedule, settings: ScheduleSettings) -> str:
    """The schedule's report as text (what ``vis-embed schedule`` prints)."""
    report = format_naive_report(schedule.report) if settings.strategy == "naive" else format_report(schedule.report)
    return f"{report}\n({settings.steps} steps x {settings.global_batch_size} members)"
