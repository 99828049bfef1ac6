"""MMEB-V2 rows of VLM2Vec score files and of results.json: the image, video and visdoc columns.

A VLM2Vec score file (``experiments/public/all_scores``, the peers shipped in
:mod:`vis_embed.resources`) holds ``metrics.image`` / ``metrics.video`` / ``metrics.visdoc``,
one dict of metrics (fractions) per task.  As VLM2Vec's ``report_score_v2.py``: image and video
tasks score ``hit@1``, visdoc tasks ``ndcg_linear@5``; a modality is the mean of its tasks and
MMEB-V2 the mean over every task present (78 when complete: 36 + 18 + 24), each with the number
of tasks it covers.  Only the 78 names of :data:`vis_embed.data.taxonomy.MMEB_V2_TASKS` count
(the files also hold e.g. ``MomentSeeker_1k8``, not one of the 78: left out and named in the log).
``report_score_v2.py`` writes ``"FILE_N/A"`` / ``"DIR_N/A"`` in place of the metrics of a task
it found no score file (or no modality folder) for: such a task was not run and is absent (no
row; listed in ``left_out`` as "not run" and logged); any other value that is not a metrics
dict is an error.  One task held under both names (``ViDoSeek-page`` and
``ViDoSeek-page-fixed``) is an error too: one file is one row per task.

Data version: VLM2Vec re-released the ViDoSeek-page and MMLongBench-page sets ("page-fixed",
``VLM2Vec/*-page-fixed``), which changed visdoc numbers.  A file says which it holds by
``metadata.data_version``, or by task names ending in ``-page-fixed``; a published score file
with the original names and no such field is taken to be the first release (the shipped peers
are: their ViDoSeek-page scores are those of the original set).  A page-fixed file that kept the
old names and says nothing cannot be told apart by its names, which is why our own outputs
state the version rather than leave it to the names: ``vis-embed prep mmeb-v2`` reads the
page-fixed sets under the old names (as VLM2Vec's eval does), and records each task's sources in
its folder's ``manifest.json``.  :func:`prepared_data_version` reads them for a run:
results.json's ``data_version`` and the combined score file's ``metadata.data_version`` are
``page-fixed`` when every re-released task of the run came from a page-fixed source, else
``unknown`` (no manifest, another source, or neither task run); never ``original``.  A folder
of per-task score files states nothing either: it is ``unknown`` unless its names say page-fixed.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from pathlib import Path
from typing import Any

from vis_embed.data.benchmark import EvalDatasetSpec
from vis_embed.data.taxonomy import (MMEB_META_TASKS, MMEB_V2, MMEB_V2_TASKS, VIDEO_META_TASKS, VISDOC_META_TASKS,
                                     group_counts, group_means)
from vis_embed.errors import DataError
from vis_embed.io import read_json_object
from vis_embed.prep.mmeb_v2 import MANIFEST as PREP_MANIFEST

log = logging.getLogger(__name__)

PRIMARY_BY_MODALITY: dict[str, str] = {"image": "hit@1", "video": "hit@1", "visdoc": "ndcg_linear@5"}
# the paper's column order: each modality's meta-tasks, then the modality, then the overall
MMEB_V2_GROUP_KEYS: tuple[str, ...] = (*MMEB_META_TASKS, "Image", *VIDEO_META_TASKS, "Video",
                                       *VISDOC_META_TASKS, "VisDoc", MMEB_V2)
PAGE_FIXED_SUFFIX = "-page-fixed"
PAGE_FIXED = "page-fixed"
ORIGINAL = "original"  # ViDoSeek-page / MMLongBench-page as first released
UNKNOWN = "unknown"  # nothing states which release the data is
RE_RELEASED: frozenset[str] = frozenset({"ViDoSeek-page", "MMLongBench-page"})  # the tasks page-fixed replaces
# What VLM2Vec's report_score_v2.py writes in place of a task's metrics when it found no score
# file for it (FILE_N/A) or no folder for its modality (DIR_N/A): a task not run, not a malformed
# one.  Its other strings (JSON_ERROR, READ_ERROR) are broken files and stay errors.
NOT_RUN: frozenset[str] = frozenset({"FILE_N/A", "DIR_N/A"})
NOT_RUN_MARK = " (not run: "  # in a left_out entry: "image/ImageNet-1K (not run: FILE_N/A)"


def score_value(values: Any, metric: str, path: str | Path, field: str) -> float:
    """``values[metric]`` of a score file, a finite number (a fraction); a missing, non-numeric or
    NaN / infinite one is a DataError naming the file and ``field`` (it would print as ``nan`` in
    every group mean it joins, or stop the report with a traceback)."""
    value = values.get(metric) if isinstance(values, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        reason = f"missing {metric!r}" if value is None else f"{metric!r} must be a finite number, got {value!r:.40}"
        raise DataError(reason, path=path, field=field)
    return float(value)


def is_not_run(values: Any) -> bool:
    """Whether a task's entry is report_score_v2's placeholder for a task that was not run."""
    return isinstance(values, str) and values in NOT_RUN


def held_tasks(metrics: dict[str, Any], modality: str) -> dict[str, Any]:
    """``metrics[modality]`` without the tasks marked as not run ({} when it holds none)."""
    tasks = metrics.get(modality)
    return {name: values for name, values in tasks.items() if not is_not_run(values)} if isinstance(tasks, dict) else {}


def data_version(scores: dict[str, Any], unstated: str = ORIGINAL) -> str | None:
    """Which visdoc data a score file's numbers come from (None: it holds no visdoc task);
    ``unstated``: what original names without a declaration mean (a published file: the first
    release; a folder of per-task files: unknown, VLM2Vec's eval reads the fixed sets under them)."""
    declared = (scores.get("metadata") or {}).get("data_version")
    if declared:
        return str(declared)
    visdoc = held_tasks(scores.get("metrics") or {}, "visdoc")
    if any(name.endswith(PAGE_FIXED_SUFFIX) for name in visdoc):
        return PAGE_FIXED
    return unstated if visdoc else None


def _task_name(name: str) -> str:
    """A page-fixed set's task (``ViDoSeek-page-fixed``) is the task it replaces."""
    return name.removesuffix("-fixed") if name.endswith(PAGE_FIXED_SUFFIX) else name


def _prepared_version(spec: EvalDatasetSpec) -> str:
    """PAGE_FIXED when the manifest.json that prep wrote beside the task's files (one folder per
    task) names a page-fixed source; UNKNOWN otherwise (not prepared by us, or another source)."""
    first = next(iter(spec.files.values()), None)
    manifest = read_json_object(first.parent / PREP_MANIFEST) if first is not None else None
    sources = (manifest or {}).get("sources")
    repos = [str(source.get("repo")) for source in sources if isinstance(source, dict)] \
        if isinstance(sources, list) else []
    return PAGE_FIXED if any(repo.endswith(PAGE_FIXED_SUFFIX) for repo in repos) else UNKNOWN


def prepared_data_version(specs: list[EvalDatasetSpec]) -> str | None:
    """The data version of a run over ``specs`` (None: no MMEB-V2 visdoc task): PAGE_FIXED when
    each re-released task it holds was prepared from a page-fixed set, else UNKNOWN."""
    visdoc = [spec for spec in specs if spec.benchmark == MMEB_V2 and spec.modality == "visdoc"]
    if not visdoc:
        return None
    versions = {_prepared_version(spec) for spec in visdoc if _task_name(spec.name) in RE_RELEASED}
    return PAGE_FIXED if versions == {PAGE_FIXED} else UNKNOWN


def mmeb_v2_rows(scores: dict[str, Any], path: str | Path = "<scores>",
                 left_out: list[str] | None = None) -> list[dict[str, Any]]:
    """One group_means row (benchmark MMEB-V2, score in percent) per MMEB-V2 task the file holds;
    the names of other tasks, and of those marked as not run, are appended to ``left_out``."""
    metrics = scores.get("metrics") if isinstance(scores, dict) else None
    if not isinstance(metrics, dict):
        raise DataError("not a VLM2Vec score file (no metrics)", path=path)
    rows, not_run = [], []
    for modality, tasks in MMEB_V2_TASKS.items():
        seen: dict[str, str] = {}  # task -> the key it was read under
        for name, values in (metrics.get(modality) or {}).items():
            if is_not_run(values):  # absent, as if the file did not name it: no row, no error
                not_run.append(f"{modality}/{name}{NOT_RUN_MARK}{values})")
                continue
            task = _task_name(name)
            if task not in tasks:
                log.debug("%s: %s task %r is not one of MMEB-V2's 78, left out", path, modality, name)
                if left_out is not None:
                    left_out.append(f"{modality}/{name}")
                continue
            if task in seen:  # both releases of one task: which one the row is cannot be told
                raise DataError(f"task {task!r} is held twice, as {seen[task]!r} and {name!r} (one file, one "
                                "version of a task)", path=path, field=f"metrics.{modality}.{name}")
            seen[task] = name
            score = score_value(values, PRIMARY_BY_MODALITY[modality], path, f"metrics.{modality}.{name}")
            rows.append({"meta_task": tasks[task], "modality": modality, "benchmark": MMEB_V2, "score": 100.0 * score})
    if not_run:
        log.info("%s: %d tasks not run (VLM2Vec's N/A placeholders), left out: %s", path, len(not_run),
                 ", ".join(not_run))
        if left_out is not None:
            left_out.extend(not_run)
    return rows


def mmeb_v2_summary(data: dict[str, Any], path: str | Path = "<scores>") -> dict[str, Any] | None:
    """``{"groups", "counts", "data_version", "left_out"}`` (MMEB-V2 keys only; left_out: the file's
    tasks that are not among the 78 or were not run) of a score file or results.json;
    None when it holds no video or visdoc task (an image-only file is an MMEB row, not MMEB-V2)."""
    if isinstance(data.get("groups"), dict) and "datasets" in data:  # our results.json
        groups = {key: float(value) for key, value in data["groups"].items() if key in MMEB_V2_GROUP_KEYS}
        if MMEB_V2 not in groups:
            return None
        counts = {key: int(value) for key, value in (data.get("counts") or {}).items() if key in groups}
        return {"groups": groups, "counts": counts, "data_version": data.get("data_version"), "left_out": []}
    metrics = data.get("metrics") or {}
    if not (held_tasks(metrics, "video") or held_tasks(metrics, "visdoc")):  # placeholders hold no task
        return None
    left_out: list[str] = []
    rows = mmeb_v2_rows(data, path, left_out)
    means, counts = group_means(rows), group_counts(rows)  # "overall" (= MMEB-V2 here) left out
    return {"groups": {key: means[key] for key in MMEB_V2_GROUP_KEYS if key in means},
            "counts": {key: counts[key] for key in MMEB_V2_GROUP_KEYS if key in counts},
            "data_version": data_version(data), "left_out": left_out}


Groups = dict[str, float]


def with_mmeb_v2(rows: dict[str, Groups], summaries: dict[str, dict[str, Any]]) -> dict[str, Groups]:
    """Each row's groups with its MMEB-V2 columns added (the ones it does not already have)."""
    return {name: {**{key: value for key, value in summaries.get(name, {}).get("groups", {}).items()
                      if key not in groups}, **groups} for name, groups in rows.items()}


def mmeb_v2_notes(summaries: dict[str, dict[str, Any]]) -> str:
    """One line per MMEB-V2 row: the tasks each column covers and the data version."""
    lines = ["MMEB-V2 columns (hit@1 for image and video, ndcg_linear@5 for visdoc; means over tasks):"]
    for name, summary in summaries.items():
        counts = summary["counts"]
        covered = ", ".join(f"{key} {counts[key]}" for key in ("Image", "Video", "VisDoc", MMEB_V2) if key in counts)
        left_out = f"; left out: {_left_out_text(summary['left_out'])}" if summary.get("left_out") else ""
        lines.append(f"- {name}: tasks {covered}; data: {summary.get('data_version') or 'unknown'}{left_out}")
    return "\n".join(lines)


def _left_out_text(left_out: list[str]) -> str:
    """The tasks left out, by name -- but those not run counted per modality: a video-only report
    holds 60 placeholders, a line of names nobody reads (results JSON keeps every name)."""
    not_run = Counter(entry.split("/", 1)[0] for entry in left_out if NOT_RUN_MARK in entry)
    named = [entry for entry in left_out if NOT_RUN_MARK not in entry]
    return ", ".join(named + [f"{count} {modality} tasks not run" for modality, count in not_run.items()])
