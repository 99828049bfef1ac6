"""Reports: ``vis-embed report FILES...`` and the Markdown table written next to results.json.

``vis-embed report`` reads any mix of
- our ``results.json`` (groups already in percent), and
- VLM2Vec-style score files ``{"metadata", "metrics": {"image": {DATASET: {"hit@1", ...}}}}``
  (fractions; the MMEB taxonomy maps each dataset to its meta-task and split),
and prints the meta-task + IND/OOD/overall table side by side.  ``--json OUT`` writes
``{"models": {FILE_STEM: {GROUP: mean}}}`` (percent, unweighted means over datasets).
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vis_embed.errors import DataError
from vis_embed.evaluation.taxonomy import (GROUP_KEYS, MMEB_DATASETS, MMEB_META_TASKS, MVEB_META_TASKS,
                                           group_means, mmeb_entry)
from vis_embed.io import atomic_write_json, atomic_write_text

log = logging.getLogger(__name__)

REFERENCE_NAME = "visme_table1.csv"
REFERENCE_ENV = "VIS_EMBED_REFERENCE"


# ------------------------------------------------------------------ reading score files

def vlm2vec_groups(scores: dict[str, Any], path: str | Path = "<scores>") -> dict[str, float]:
    """Group means (percent) of a VLM2Vec score file's image datasets, by hit@1."""
    try:
        per_dataset = scores["metrics"]["image"]
    except (KeyError, TypeError):
        raise DataError("not a VLM2Vec score file (no metrics.image)", path=path) from None
    rows = []
    for dataset, values in per_dataset.items():
        if dataset not in MMEB_DATASETS:
            log.warning("%s: dataset %r is not one of MMEB's 36, ignored", path, dataset)
            continue
        if "hit@1" not in values:
            raise DataError("missing 'hit@1'", path=path, field=f"metrics.image.{dataset}")
        rows.append({**mmeb_entry(dataset), "score": 100.0 * float(values["hit@1"])})
    if not rows:
        raise DataError("no MMEB image dataset in this score file", path=path)
    return group_means(rows)


def load_groups(path: str | Path) -> dict[str, float]:
    """Group means (percent) of one results.json or VLM2Vec score file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError("file not found", path=path) from None
    except json.JSONDecodeError as exc:
        raise DataError(f"malformed JSON ({exc.msg} at line {exc.lineno})", path=path) from None
    if isinstance(data, dict) and isinstance(data.get("groups"), dict) and "datasets" in data:
        return {key: float(value) for key, value in data["groups"].items()}
    return vlm2vec_groups(data, path)


def comparison_table(models: dict[str, dict[str, float]]) -> str:
    """Plain-text table: one row per group, one column per model."""
    present = [key for key in GROUP_KEYS if any(key in groups for groups in models.values())]
    present += sorted({k for groups in models.values() for k in groups} - set(present))
    names = list(models)
    widths = [max(len(name), 6) + 2 for name in names]  # each column as wide as its name
    lines = ["group".ljust(9) + "".join(n.rjust(w) for n, w in zip(names, widths, strict=True))]
    for key in present:
        cells = "".join((f"{models[n][key]:.1f}" if key in models[n] else "-").rjust(w)
                        for n, w in zip(names, widths, strict=True))
        lines.append(key.ljust(9) + cells)
    return "\n".join(lines)


# ------------------------------------------------------------------ Markdown (Table 1 layout)

def find_reference(explicit: str | Path | None = None) -> Path | None:
    """``visme_table1.csv``: the given path, $VIS_EMBED_REFERENCE, or ``shared/reference/``
    beside the repository (searched from this package and from the working directory up)."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise DataError("reference table not found", path=path)
        return path
    if os.environ.get(REFERENCE_ENV):
        return find_reference(os.environ[REFERENCE_ENV])
    starts = [Path(__file__).resolve().parents[2], Path.cwd().resolve()]
    for start in starts:
        for folder in (start, *start.parents):
            candidate = folder / "shared" / "reference" / REFERENCE_NAME
            if candidate.is_file():
                return candidate
    return None


def read_reference(path: str | Path) -> list[dict[str, str]]:
    """Rows of the published table (``#`` lines are comments)."""
    with Path(path).open(encoding="utf-8") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#") and line.strip()))


TABLE1_COLUMNS: tuple[tuple[str, str], ...] = (
    *((key, key) for key in MMEB_META_TASKS), ("MMEB", "MMEB_avg"),
    *((key, key) for key in MVEB_META_TASKS), ("MVEB", "MVEB_avg"),
)


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "–"
    return f"{float(value):.1f}"


def markdown(results: dict[str, Any], reference_rows: Sequence[dict[str, str]] = ()) -> str:
    """Table 1 layout (published rows, then ours in bold), IND/OOD, then every dataset."""
    groups = results["groups"]
    model = results.get("model", {})
    ours = model.get("name") or "this model"
    if model.get("adapter"):
        ours += f" + {model['adapter']}"
    header = ["Model", "Backbone", *(label for label, _ in TABLE1_COLUMNS)]
    lines = ["## Precision@1 (%), Table 1 layout", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in reference_rows:
        lines.append("| " + " | ".join([row.get("model", ""), row.get("backbone", ""),
                                         *(_cell(row.get(col)) for _, col in TABLE1_COLUMNS)]) + " |")
    lines.append("| " + " | ".join([f"**{ours}**", "", *(f"**{_cell(groups.get(key))}**"
                                                             for key, _ in TABLE1_COLUMNS)]) + " |")
    lines += ["", "MMEB / MVEB = unweighted mean over datasets (not over meta-tasks).", ""]
    splits = [key for key in ("IND", "OOD", "overall") if key in groups]
    if splits:
        lines += ["| " + " | ".join(splits) + " |", "|" + "---|" * len(splits),
                  "| " + " | ".join(_cell(groups[k]) for k in splits) + " |", ""]
    lines += ["## Datasets", "", "| Dataset | Meta-task | Split | Queries | Primary | Score |", "|---|---|---|---|---|---|"]
    for name, entry in results["datasets"].items():
        primary = entry.get("primary", "P@1")
        lines.append(f"| {name} | {entry['meta_task']} | {entry.get('split') or '–'} | {entry['n_queries']} | "
                     f"{primary} | {_cell(entry['metrics'][primary])} |")
    return "\n".join(lines) + "\n"


def write_markdown(results: dict[str, Any], path: str | Path, reference: str | Path | None = None) -> Path:
    reference_path = find_reference(reference)
    if reference_path is None:
        log.warning("%s not found; results.md has no published rows (pass --reference)", REFERENCE_NAME)
    rows = read_reference(reference_path) if reference_path else []
    return atomic_write_text(path, markdown(results, rows))


# ------------------------------------------------------------------ CLI

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, help="results.json and/or VLM2Vec score JSON files")
    parser.add_argument("--json", type=Path, default=None, help="write {models: {FILE_STEM: {GROUP: mean}}}")


def run(args: argparse.Namespace) -> int:
    models: dict[str, dict[str, float]] = {}
    for path in args.files:
        stem = path.stem
        if stem in models:  # e.g. two results.json: fall back to the folder name, then the path
            stem = f"{path.parent.name}/{stem}" if f"{path.parent.name}/{stem}" not in models else str(path)
        models[stem] = load_groups(path)
    print(comparison_table(models))
    if args.json is not None:
        atomic_write_json(args.json, {"models": models})
    return 0
