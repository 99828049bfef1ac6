"""Reports: the Markdown of ``vis-embed report FILES...`` and the results.md next to results.json.

``vis-embed report`` reads any mix of
- our ``results.json`` (groups already in percent), and
- VLM2Vec-style score files ``{"metadata", "metrics": {"image": {DATASET: {"hit@1", ...}}}}``
  (fractions; the MMEB taxonomy maps each dataset to its meta-task and split), and
- folders of VLM2Vec per-dataset ``DATASET_score.json`` files (``OUT/mmeb_scores`` written by
  ``vis-embed eval``, or VLM2Vec's own eval output; see :mod:`vis_embed.evaluation.mmeb_scores`),
and prints a Markdown table in the paper's Table 1 layout: the published rows (shipped in
:mod:`vis_embed.resources`), then one bold row per file.  ``--json OUT`` writes
``{"models": {FILE_STEM: {GROUP: mean}}}`` (percent, unweighted means over datasets), and
``"mmeb_v2"`` (:func:`load_mmeb_v2`) for the files holding video or visdoc tasks.
"""

from __future__ import annotations

import csv
import io
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vis_embed import resources
from vis_embed.errors import DataError
from vis_embed.data.results_file import ResultsFile, ResultsModel
from vis_embed.data.taxonomy import (BENCHMARK_SPLIT_KEYS, GROUP_KEYS, MMEB_DATASETS, MMEB_META_TASKS,
                                     MVEB_META_TASKS, POOLED_SPLIT_KEYS, SPLITS, group_means, mmeb_entry)
from vis_embed.evaluation.mmeb_scores import read_score_folder
from vis_embed.evaluation.mmeb_v2_scores import MMEB_V2_GROUP_KEYS, held_tasks, mmeb_v2_summary, score_value
from vis_embed.io import atomic_write_text, read_json_value, read_text

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+; annotations only
    from importlib.resources.abc import Traversable

log = logging.getLogger(__name__)

REFERENCE_ENV = "VIS_EMBED_REFERENCE"


# ------------------------------------------------------------------ reading score files

def vlm2vec_groups(scores: dict[str, Any], path: str | Path = "<scores>") -> dict[str, float]:
    """Group means (percent) of a VLM2Vec score file's image datasets, by hit@1."""
    metrics = scores.get("metrics") if isinstance(scores, dict) else None
    if not isinstance(metrics, dict) or not isinstance(metrics.get("image", {}), dict):
        raise DataError("not a VLM2Vec score file (no metrics.image)", path=path)
    # report_score_v2's FILE_N/A / DIR_N/A placeholders: tasks not run (listed by mmeb_v2_summary)
    per_dataset = held_tasks(metrics, "image")
    if not per_dataset and (held_tasks(metrics, "video") or held_tasks(metrics, "visdoc")):
        return {}  # MMEB-V2 video / visdoc only: no MMEB (image) groups; its MMEB-V2 columns are mmeb_v2_summary's
    if "image" not in metrics:
        raise DataError("not a VLM2Vec score file (no metrics.image)", path=path)
    rows = []
    for dataset, values in per_dataset.items():
        if dataset not in MMEB_DATASETS:
            log.warning("%s: dataset %r is not one of MMEB's 36, ignored", path, dataset)
            continue
        score = score_value(values, "hit@1", path, f"metrics.image.{dataset}")
        rows.append({**mmeb_entry(dataset), "score": 100.0 * score})
    if not rows:
        raise DataError("no MMEB image dataset in this score file", path=path)
    return group_means(rows)


def _read_scores(path: Path | Traversable) -> Any:
    if isinstance(path, Path) and path.is_dir():  # a folder of VLM2Vec per-dataset score files
        return read_score_folder(path)
    try:
        return read_json_value(path)
    except FileNotFoundError:
        raise DataError("file not found", path=path) from None


def load_mmeb_v2(path: str | Path | Traversable) -> dict[str, Any] | None:
    """The MMEB-V2 summary (:func:`vis_embed.evaluation.mmeb_v2_scores.mmeb_v2_summary`) of one
    results.json or VLM2Vec score file; None when it holds no video or visdoc task."""
    path = Path(path) if isinstance(path, str) else path
    data = _read_scores(path)
    return mmeb_v2_summary(data, path) if isinstance(data, dict) else None


def load_groups(path: str | Path | Traversable) -> dict[str, float]:
    """Group means (percent) of one results.json or VLM2Vec score file (a path or a packaged file)."""
    path = Path(path) if isinstance(path, str) else path
    data = _read_scores(path)
    if isinstance(data, dict) and isinstance(data.get("groups"), dict) and "datasets" in data:
        return dict(ResultsFile.of(data, path).groups)  # a group that is not a number: DataError naming it
    return vlm2vec_groups(data, path)


# ------------------------------------------------------------------ Markdown (Table 1 layout)

def find_reference(explicit: str | Path | None = None) -> Path | Traversable:
    """The published table: the given path, else ``$VIS_EMBED_REFERENCE``, else the copy
    shipped in the package (:mod:`vis_embed.resources`)."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise DataError("reference table not found", path=path)
        return path
    if os.environ.get(REFERENCE_ENV):
        return find_reference(os.environ[REFERENCE_ENV])
    return resources.reference_table()


def read_reference(path: Path | Traversable) -> list[dict[str, str]]:
    """Rows of the published table (``#`` lines are comments)."""
    text = read_text(path)  # a BOM (Excel's "CSV UTF-8") is not a column name; not UTF-8: FILE:LINE
    return list(csv.DictReader(line for line in io.StringIO(text) if not line.startswith("#") and line.strip()))


TABLE1_COLUMNS: tuple[tuple[str, str], ...] = (
    *((key, key) for key in MMEB_META_TASKS), ("MMEB", "MMEB_avg"),
    *((key, key) for key in MVEB_META_TASKS), ("MVEB", "MVEB_avg"),
)


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "–"
    return f"{float(value):.1f}"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def models_table(models: dict[str, dict[str, float]], reference_rows: Sequence[dict[str, str]] = (),
                 extra_columns: Sequence[str] | None = None, peers: dict[str, dict[str, float]] | None = None) -> str:
    """Markdown in the paper's Table 1 layout: the published rows, ``peers``, then each model in bold.

    ``models`` and ``peers`` map a row name to its group means (percent).  Columns: Table 1's
    (MMEB and MVEB meta-tasks and averages), then ``extra_columns`` (default: every other group
    that a row has, e.g. IND / OOD / overall).  A missing cell is "–".
    """
    peers = peers or {}
    table1 = [label for label, _ in TABLE1_COLUMNS]
    if extra_columns is None:
        present = {key for groups in (*models.values(), *peers.values()) for key in groups}
        extra_columns = [key for key in GROUP_KEYS if key in present and key not in table1]
        extra_columns += sorted(present - set(GROUP_KEYS))
    header = ["Model", "Backbone", *table1, *extra_columns]
    lines = [_row(header), "|" + "---|" * len(header)]
    for row in reference_rows:
        lines.append(_row([row.get("model", ""), row.get("backbone", ""),
                           *(_cell(row.get(column)) for _, column in TABLE1_COLUMNS), *("–" for _ in extra_columns)]))
    for name, groups in peers.items():
        lines.append(_row([name, "", *(_cell(groups.get(key)) for key in (*table1, *extra_columns))]))
    for name, groups in models.items():
        lines.append(_row([f"**{name}**", "", *(f"**{_cell(groups.get(key))}**" for key in (*table1, *extra_columns))]))
    return "\n".join(lines)


def model_label(model: ResultsModel | dict[str, Any]) -> str:
    """``NAME + ADAPTER`` of a results.json ``model`` block (just NAME without an adapter)."""
    return (model if isinstance(model, ResultsModel) else ResultsModel.model_validate(model)).label


TIE_POLICY_NOTES = {
    "pessimistic": "pessimistic (a negative tied with the positive ranks first; the project's default)",
    "first": "first (listed order wins, as argmax in VLM2Vec's MMEB scorer)",
}


def markdown(results: ResultsFile | dict[str, Any], reference_rows: Sequence[dict[str, str]] = ()) -> str:
    """Table 1 layout (published rows, then ours in bold), IND/OOD, then every dataset."""
    results = ResultsFile.of(results)
    groups = results.groups
    ours = results.model.label
    lines = ["## Precision@1 (%), Table 1 layout", "", models_table({ours: groups}, reference_rows, extra_columns=())]
    lines += ["", "MMEB / MVEB = unweighted mean over datasets (not over meta-tasks).", ""]
    tie_policy = results.tie_policy  # files written before the option: pessimistic
    lines += [f"Tied scores: {TIE_POLICY_NOTES.get(tie_policy, tie_policy)}.", ""]
    # per benchmark first (the papers' figures); a pooled split only under its _pooled label
    splits = [key for key in (*BENCHMARK_SPLIT_KEYS, *SPLITS, *POOLED_SPLIT_KEYS, "overall") if key in groups]
    if splits:
        lines += ["| " + " | ".join(splits) + " |", "|" + "---|" * len(splits),
                  "| " + " | ".join(_cell(groups[k]) for k in splits) + " |", ""]
    v2_keys = [key for key in MMEB_V2_GROUP_KEYS if key in groups]
    if v2_keys:  # MMEB-V2: its groups with the number of tasks each covers
        counts = results.counts
        lines += ["## MMEB-V2 (hit@1 for image and video, ndcg_linear@5 for visdoc; %)", "",
                  "| " + " | ".join(f"{key} ({counts[key]})" if key in counts else key for key in v2_keys) + " |",
                  "|" + "---|" * len(v2_keys), "| " + " | ".join(_cell(groups[key]) for key in v2_keys) + " |", ""]
        if results.protocol:
            lines += [f"Protocol: {results.protocol.name} ({results.protocol.description}).", ""]
    lines += ["## Datasets", "", "| Dataset | Meta-task | Split | Queries | Primary | Score |",
              "|---|---|---|---|---|---|"]
    for name, entry in results.datasets.items():
        primary = entry.primary_metric
        lines.append(f"| {name} | {entry.meta_task} | {entry.split or '–'} | {entry.n_queries} | "
                     f"{primary} | {_cell(entry.metrics[primary])} |")
    return "\n".join(lines) + "\n"


def write_markdown(results: ResultsFile | dict[str, Any], path: str | Path,
                   reference: str | Path | None = None) -> Path:
    return atomic_write_text(path, markdown(results, read_reference(find_reference(reference))))


def load_models(paths: Sequence[Path]) -> dict[str, dict[str, float]]:
    """``{column name: group means}`` of each file; the name is the file stem, made unique
    with the folder name (two ``results.json``) and then the whole path."""
    models: dict[str, dict[str, float]] = {}
    for path in paths:
        name = path.stem
        if name in models:
            name = f"{path.parent.name}/{name}" if f"{path.parent.name}/{name}" not in models else str(path)
        models[name] = load_groups(path)
    return models
