"""What every benchmark layout shares: the prepared-dataset types, row and item helpers, and
the scoring boundary (:func:`scored_at_the_boundary`).

The boundary is one rule for every layout and index kind: a NaN or infinite vector is a
:class:`~vis_embed.errors.DataError` naming the dataset, file, row and field of its item, and
every vector is L2-normalised before scoring, so every score is a cosine and an encoder cannot
game a protocol with its vectors' norms.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vis_embed.data.benchmark import EvalDatasetSpec
from vis_embed.data.eval_options import DEFAULT_TIE_POLICY
from vis_embed.data.images import resolve_image
from vis_embed.data.items import Item, check_item
from vis_embed.data.records import ImageChecker, RowContext
from vis_embed.data.tables import read_table
from vis_embed.data.video import resolve_video
from vis_embed.errors import DataError
from vis_embed.evaluation import peer_metrics
from vis_embed.vectors.index_spec import AUTO, IndexSpec
from vis_embed.evaluation.trec_runs import TrecRun


@dataclass
class Example:
    """One query's top results, for retrieval grids."""

    query: Item
    results: list[tuple[Item, float, bool]]  # (item, score, is_positive), best first


@dataclass
class Outcome:
    metrics: dict[str, float]      # percent (counts stay counts)
    primary: str                   # metric the groups aggregate
    n_queries: int
    examples: list[Example] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    run: TrecRun | None = None     # the rankings and judgements, when ScoringOptions.save_runs


# Where an item of a side comes from, for errors: (file, [(line, field) of each item]).
Places = tuple[Path, list[tuple[int, str]]]


@dataclass
class PreparedDataset:
    sides: dict[str, tuple[str | None, list[Item]]]   # side -> (instruction, items)
    score: Callable[[dict[str, np.ndarray]], Outcome]
    data_files: list[Path]
    places: dict[str, Places] = field(default_factory=dict)  # side -> where each item is


@dataclass
class ScoringOptions:
    index: IndexSpec = field(default_factory=IndexSpec)  # the run's index, rescore included (EvalSettings.index_spec)
    index_requested: str = AUTO  # the name it was given (--index: auto, a kind or an alias), recorded
    depth: int | None = None
    n_examples: int = 3
    tie_policy: str = DEFAULT_TIE_POLICY  # candidates and gallery rankings
    save_runs: bool = False  # retrieval layouts keep their rankings for TREC run files


# ---------------------------------------------------------------- item helpers

def normalise_item(value: Any, root: Path, path: Path, line: int, field_name: str) -> Item:
    """The row's item (:func:`vis_embed.data.items.check_item`) with its image (or video)
    resolved against ``root`` and checked to exist; errors name the row."""
    if isinstance(value, str):  # a bare string is an image path: convenient for the peer layouts
        value = {"image": value}
    item = check_item(value, field_name, path=path, line=line)
    if "image" in item:
        item["image"] = resolve_image(item["image"], root)
        ImageChecker().check(item["image"], f"{field_name}.image", RowContext(path, line))
    if "video" in item:  # resolved against the root like an image
        resolved = resolve_video(item["video"], root)
        ImageChecker().check_video(resolved, f"{field_name}.video", RowContext(path, line))
        item["video"] = list(resolved) if isinstance(resolved, tuple) else resolved
    return item


def read_rows(spec: EvalDatasetSpec, role: str, max_rows: int | None = None) -> list[tuple[int, dict[str, Any]]]:
    """The file's rows (at most ``max_rows``); an empty file is an error naming dataset and file."""
    rows: list[tuple[int, dict[str, Any]]] = []
    for line, row in read_table(spec.file(role)):
        if max_rows is not None and len(rows) >= max_rows:
            break
        rows.append((line, row))
    if not rows:
        raise DataError(f"dataset {spec.name!r}: data file has no rows", path=spec.file(role))
    return rows


def index_of(spec: EvalDatasetSpec, options: ScoringOptions) -> tuple[IndexSpec, str]:
    """The index a dataset is searched with and the name it was asked for: its ``options.index``
    (:meth:`~vis_embed.data.eval_options.DatasetOptions.index_spec`) or the run's."""
    return spec.options.index_spec(options.index), spec.options.index or options.index_requested


def tie_policy_of(spec: EvalDatasetSpec, options: ScoringOptions) -> str:
    """The dataset's ``options.tie_policy`` or the run's (both validated when loaded)."""
    return spec.options.tie_policy or options.tie_policy


def require(row: Mapping[str, Any], key: str, path: Path, line: int) -> Any:
    if key not in row:
        raise DataError("missing required field", path=path, line=line, field=key)
    return row[key]


def clean(item: Item) -> Item:
    return {key: value for key, value in item.items() if value is not None}


def check_embedded(spec: EvalDatasetSpec, embeddings: np.ndarray, places: Places) -> None:
    """DataError naming the dataset, file, row and field of the first item the model embedded as
    NaN or infinity (``places[1][i]`` is item i's (line, field)): such a vector would otherwise
    score (or be dropped by an index)."""
    bad = np.flatnonzero(~np.isfinite(np.asarray(embeddings, dtype=np.float64)).all(axis=1))
    if len(bad):
        path, lines = places
        line, field_name = lines[int(bad[0])]
        raise DataError(f"the model embedded this item as NaN or infinite values (dataset {spec.name!r})",
                        path=path, line=line, field=field_name)


def scored_at_the_boundary(spec: EvalDatasetSpec, prepared: PreparedDataset) -> PreparedDataset:
    """``prepared`` whose score first checks every side (NaN -> DataError naming the row) and
    L2-normalises it: every layout scores unit vectors, whatever the encoder returned."""
    inner = prepared.score

    def score(embeddings: dict[str, np.ndarray]) -> Outcome:
        for side, values in embeddings.items():
            if side in prepared.places and len(values):
                check_embedded(spec, values, prepared.places[side])
        return inner({side: peer_metrics.unit_rows(values) if len(values) else np.asarray(values, dtype=np.float64)
                      for side, values in embeddings.items()})

    prepared.score = score
    return prepared
