"""The peer layouts (the identity-similarity papers' protocols): ``2afc``, ``nearid``, ``asym_recall``, ``pair_ap``,
``human_corr`` (row formats in docs/evaluation.md; the metrics in :mod:`peer_metrics`).

Their ``score`` functions get embeddings that passed :func:`layout_base.scored_at_the_boundary`
(finite, L2-normalised), so row-wise products are cosines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vis_embed.data.benchmark import EvalDatasetSpec
from vis_embed.data.items import Item
from vis_embed.errors import DataError
from vis_embed.evaluation import peer_metrics
from vis_embed.evaluation.layout_base import (Outcome, Places, PreparedDataset, ScoringOptions, normalise_item,
                                              read_rows, require)


def _pair_dataset(spec: EvalDatasetSpec, rows: list[tuple[int, dict[str, Any]]],
                  score: Callable[[dict[str, np.ndarray]], Outcome]) -> PreparedDataset:
    """Pools "a" (query instruction) and "b" (candidate instruction) of the pair-row protocols."""
    return PreparedDataset({"a": (spec.query_instruction, _item_column(spec, rows, "a")),
                            "b": (spec.candidate_instruction, _item_column(spec, rows, "b"))},
                           score, [spec.file("path")], _row_places(spec, rows, ("a", "b")))


def _row_places(spec: EvalDatasetSpec, rows: list[tuple[int, dict[str, Any]]],
                sides: tuple[str, ...]) -> dict[str, Places]:
    return {side: (spec.file("path"), [(line, side) for line, _row in rows]) for side in sides}


def _item_column(spec: EvalDatasetSpec, rows: list[tuple[int, dict[str, Any]]], key: str) -> list[Item]:
    path, root = spec.file("path"), spec.root_for("path")
    return [normalise_item(require(row, key, path, line), root, path, line, key) for line, row in rows]


def _float_column(spec: EvalDatasetSpec, rows: list[tuple[int, dict[str, Any]]], key: str) -> np.ndarray:
    values = []
    for line, row in rows:
        value = require(row, key, spec.file("path"), line)
        if not isinstance(value, (int, float)):  # bool is an int: true/false labels are fine
            raise DataError(f"expected a number, got {value!r}", path=spec.file("path"), line=line, field=key)
        if not np.isfinite(value):  # NaN would turn into a finite, wrong score
            raise DataError(f"expected a finite number, got {value!r}", path=spec.file("path"), line=line, field=key)
        values.append(float(value))
    return np.asarray(values)


def _rowwise_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("nd,nd->n", a.astype(np.float64), b.astype(np.float64))


def prepare_2afc(spec: EvalDatasetSpec, max_queries: int | None, options: ScoringOptions) -> PreparedDataset:
    """Rows ``{"id", "reference", "a", "b", "label"}``; label = share of humans choosing A."""
    rows = list(read_rows(spec, "path", max_queries))
    labels = _float_column(spec, rows, "label")
    if ((labels < 0) | (labels > 1)).any():
        bad = int(np.flatnonzero((labels < 0) | (labels > 1))[0])
        raise DataError("label must lie in [0, 1]", path=spec.file("path"), line=rows[bad][0], field="label")

    def score(emb: dict[str, np.ndarray]) -> Outcome:
        per_triplet = peer_metrics.two_afc_accuracy(_rowwise_cosine(emb["reference"], emb["a"]),
                                                 _rowwise_cosine(emb["reference"], emb["b"]), labels)
        low, high = peer_metrics.bootstrap_interval(per_triplet, seed=spec.options.get("seed", 0))
        return Outcome({"2AFC": 100 * float(per_triplet.mean()), "2AFC_CI95_low": 100 * low,
                        "2AFC_CI95_high": 100 * high}, "2AFC", len(rows))

    return PreparedDataset({"reference": (spec.query_instruction, _item_column(spec, rows, "reference")),
                            "a": (spec.candidate_instruction, _item_column(spec, rows, "a")),
                            "b": (spec.candidate_instruction, _item_column(spec, rows, "b"))},
                           score, [spec.file("path")], _row_places(spec, rows, ("reference", "a", "b")))


def prepare_nearid(spec: EvalDatasetSpec, max_queries: int | None, options: ScoringOptions) -> PreparedDataset:
    """Rows ``{"id", "views": [item, ...], "negatives": [item | null, ...]}`` (one per identity).

    ``negatives[i]`` is the near-identity negative n_i paired with view i (null: none).
    """
    path, root = spec.file("path"), spec.root_for("path")
    views: list[Item] = []
    negatives: list[Item] = []
    structure: list[tuple[int, int, np.ndarray]] = []  # (first view, n views, negative slot per view or -1)
    view_places: list[tuple[int, str]] = []            # (line, field) of each view, for errors
    negative_places: list[tuple[int, str]] = []
    for line, row in read_rows(spec, "path", max_queries):
        raw_views = require(row, "views", path, line)
        raw_negatives = row.get("negatives", [])
        if (not isinstance(raw_views, list) or not isinstance(raw_negatives, list)
                or len(raw_negatives) > len(raw_views)):
            raise DataError("'views' must be a list and 'negatives' a list no longer than it", path=path, line=line,
                            field="negatives")
        first = len(views)
        views += [normalise_item(v, root, path, line, f"views[{i}]") for i, v in enumerate(raw_views)]
        view_places += [(line, f"views[{i}]") for i in range(len(raw_views))]
        slots = np.full(len(raw_views), -1)
        for i, raw in enumerate(raw_negatives):
            if raw is not None:
                slots[i] = len(negatives)
                negatives.append(normalise_item(raw, root, path, line, f"negatives[{i}]"))
                negative_places.append((line, f"negatives[{i}]"))
        structure.append((first, len(raw_views), slots))

    def score(emb: dict[str, np.ndarray]) -> Outcome:
        margins = []
        for first, count, slots in structure:
            anchors = emb["anchor"][first:first + count]
            targets = emb["view"][first:first + count]
            paired = np.zeros_like(anchors)
            paired[slots >= 0] = emb["negative"][slots[slots >= 0]]
            margins.append(peer_metrics.nearid_margins(anchors, paired, slots >= 0, view_embeddings=targets))
        if not any(len(m) for m in margins):
            raise DataError(f"dataset {spec.name!r}: no identity has a valid margin (each needs >= 2 views "
                            f"and a negative)", path=path)
        result = peer_metrics.nearid_scores(margins)
        return Outcome({"SSR": 100 * result["SSR"], "pairwise_acc": 100 * result["pairwise_acc"],
                        "n_margins": result["n_margins"]}, "SSR", result["n_identities"])

    return PreparedDataset({"anchor": (spec.query_instruction, views), "view": (spec.candidate_instruction, views),
                            "negative": (spec.candidate_instruction, negatives)}, score, [path],
                           {"anchor": (path, view_places), "view": (path, view_places),
                            "negative": (path, negative_places)})


def prepare_asym_recall(spec: EvalDatasetSpec, max_queries: int | None, options: ScoringOptions) -> PreparedDataset:
    """Rows ``{"id", "a": item, "b": item}``: aligned pairs (e.g. two views of one identity)."""
    rows = list(read_rows(spec, "path", max_queries))
    ks = spec.options.ks or peer_metrics.ASYM_RECALL_KS

    def score(emb: dict[str, np.ndarray]) -> Outcome:
        result = peer_metrics.asymmetric_recall_at_k(emb["a"], emb["b"], ks=ks)
        return Outcome({k: 100 * v for k, v in result.items()}, f"R@{ks[0]}", len(rows))

    return _pair_dataset(spec, rows, score)


def prepare_pair_ap(spec: EvalDatasetSpec, max_queries: int | None, options: ScoringOptions) -> PreparedDataset:
    """Rows ``{"id", "a": item, "b": item, "label": 0 | 1}`` (1 = same identity)."""
    rows = list(read_rows(spec, "path", max_queries))
    labels = _float_column(spec, rows, "label")
    if not np.isin(labels, (0.0, 1.0)).all():
        bad = int(np.flatnonzero(~np.isin(labels, (0.0, 1.0)))[0])
        raise DataError("label must be 0 or 1", path=spec.file("path"), line=rows[bad][0], field="label")
    if not labels.any():
        raise DataError(f"dataset {spec.name!r}: no pair has label 1 (AP needs a 'same' pair)",
                        path=spec.file("path"), field="label")

    def score(emb: dict[str, np.ndarray]) -> Outcome:
        similarities = _rowwise_cosine(emb["a"], emb["b"])
        same = labels.astype(bool)
        # AP: ties at their expectation (the standard rule); AP_pessimistic: ties against the model
        return Outcome({"AP": 100 * peer_metrics.average_precision(similarities, same),
                        "AP_pessimistic": 100 * peer_metrics.pessimistic_average_precision(similarities, same),
                        "prevalence": 100 * float(same.mean())}, "AP", len(rows))

    return _pair_dataset(spec, rows, score)


def prepare_human_corr(spec: EvalDatasetSpec, max_queries: int | None, options: ScoringOptions) -> PreparedDataset:
    """Rows ``{"id", "a": item, "b": item, "score": float, "group"?: str}`` (human similarity)."""
    rows = list(read_rows(spec, "path", max_queries))
    human = _float_column(spec, rows, "score")
    groups = [str(row.get("group", "all")) for _line, row in rows]
    try:
        peer_metrics.check_group_sizes(groups)  # refused before encoding
    except ValueError as exc:
        raise DataError(str(exc), path=spec.file("path"), field="group") from None

    def score(emb: dict[str, np.ndarray]) -> Outcome:
        result = peer_metrics.correlation_with_humans(_rowwise_cosine(emb["a"], emb["b"]), human, groups)
        # undefined (every group constant) is null in results.json, not NaN (invalid JSON)
        percent = {key: None if np.isnan(result[key]) else 100 * result[key] for key in ("pearson", "spearman")}
        counts = {key: result[key] for key in ("n_groups", "n_constant_groups", "n_small_groups")}
        return Outcome({**percent, **counts},
                       "spearman", len(rows), extra={"constant_groups": result["constant_groups"]})

    return _pair_dataset(spec, rows, score)
