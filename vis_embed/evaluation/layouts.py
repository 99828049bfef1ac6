"""Benchmark layouts: how a manifest entry's rows become items to encode and metrics.

Every layout turns an :class:`~vis_embed.data.benchmark.EvalDatasetSpec` into a :class:`PreparedDataset`: named *sides*
(items + the instruction they are encoded with) and a ``score`` function mapping the
sides' embeddings to metrics.  The harness encodes each distinct (instruction, item) once,
whatever side or row it appears in.

Layouts (row formats are documented in docs/evaluation.md):
``candidates`` (MMEB: each query ranks its own candidate list, positive first),
``gallery`` (identity retrieval over a shared gallery with faiss), and the peer protocols
``2afc``, ``nearid``, ``asym_recall``, ``pair_ap``, ``human_corr``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vis_embed.data.benchmark import LAYOUTS, EvalDatasetSpec, load_candidates, load_gallery
from vis_embed.data.factorize import factorize
from vis_embed.data.images import resolve_image
from vis_embed.data.items import Item, check_item
from vis_embed.data.records import ImageChecker, RowContext
from vis_embed.data.tables import read_table
from vis_embed.errors import ConfigError, DataError
from vis_embed.evaluation import gallery_ranking, metrics, protocols, search
from vis_embed.evaluation.settings import DEFAULT_INDEX

GALLERY_FULL_RANKING_LIMIT = 10_000  # galleries up to this size are ranked completely
GALLERY_DEFAULT_DEPTH = 1_000        # otherwise the top-1000 are ranked (mAP@1000 etc.)


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


@dataclass
class PreparedDataset:
    sides: dict[str, tuple[str | None, list[Item]]]   # side -> (instruction, items)
    score: Callable[[dict[str, np.ndarray]], Outcome]
    data_files: list[Path]


@dataclass
class ScoringOptions:
    index: str = DEFAULT_INDEX
    depth: int | None = None
    n_examples: int = 3
    tie_policy: str = metrics.DEFAULT_TIE_POLICY  # candidates and gallery rankings


# ---------------------------------------------------------------- item helpers

def normalise_item(value: Any, root: Path, path: Path, line: int, field_name: str) -> Item:
    """The row's item (:func:`vis_embed.data.items.check_item`) with its image resolved
    against ``root`` and checked to exist; errors name the row."""
    if isinstance(value, str):  # a bare string is an image path: convenient for peer protocols
        value = {"image": value}
    item = check_item(value, field_name, path=path, line=line)
    if "image" in item:
        item["image"] = resolve_image(item["image"], root)
        ImageChecker().check(item["image"], f"{field_name}.image", RowContext(path, line))
    return item


def item_key(item: Item) -> str:
    """Identity of an item for de-duplication (same image path, text and extra keys)."""
    return repr(sorted((k, repr(v)) for k, v in item.items()))


def _rows(spec: EvalDatasetSpec, role: str, max_rows: int | None = None) -> Iterable[tuple[int, dict[str, Any]]]:
    for count, (line, row) in enumerate(read_table(spec.file(role))):
        if max_rows is not None and count >= max_rows:
            return
        yield line, row


def _tie_policy(spec: EvalDatasetSpec, options: ScoringOptions) -> str:
    """The dataset's ``options.tie_policy`` or the run's (both validated when loaded)."""
    return spec.options.tie_policy or options.tie_policy


def _require(row: Mapping[str, Any], key: str, path: Path, line: int) -> Any:
    if key not in row:
        raise DataError("missing required field", path=path, line=line, field=key)
    return row[key]


# ---------------------------------------------------------------- candidates

def _clean(item: Item) -> Item:
    return {key: value for key, value in item.items() if value is not None}


def prepare_candidates(spec: EvalDatasetSpec, max_queries: int | None, options: ScoringOptions) -> PreparedDataset:
    """MMEB-eval: ``{"id", "query": item, "candidates": [item, ...]}``, positive first.

    Rows are read and validated by :func:`vis_embed.data.load_candidates`.
    """
    tie_policy = _tie_policy(spec, options)
    rows = load_candidates(spec.file("path"), spec.root_for("path"))[:max_queries]
    queries = [_clean(row.query) for row in rows]
    pool: list[Item] = []
    pool_index: dict[str, int] = {}
    lists: list[np.ndarray] = []
    for row in rows:
        indices = []
        for raw in row.candidates:
            item = _clean(raw)
            key = item_key(item)
            if key not in pool_index:
                pool_index[key] = len(pool)
                pool.append(item)
            indices.append(pool_index[key])
        lists.append(np.asarray(indices))

    def score(embeddings: dict[str, np.ndarray]) -> Outcome:
        query_emb, pool_emb = embeddings["query"], embeddings["candidate"]
        per_query, examples = [], []
        for i, indices in enumerate(lists):
            scores = pool_emb[indices] @ query_emb[i]
            mask = np.zeros(len(indices), dtype=bool)
            mask[0] = True  # the positive is first
            per_query.append(metrics.query_metrics(metrics.ranked_relevance(scores, mask, tie_policy)))
            if i < options.n_examples:
                order = metrics.tie_order(scores, mask, tie_policy)[:5]
                examples.append(Example(queries[i], [(pool[indices[j]], float(scores[j]), bool(mask[j]))
                                                     for j in order]))
        return Outcome(metrics.summarize(per_query), "P@1", len(per_query), examples, {"tie_policy": tie_policy})

    return PreparedDataset({"query": (spec.query_instruction, queries),
                            "candidate": (spec.candidate_instruction, pool)}, score, [spec.file("path")])


# ---------------------------------------------------------------- gallery

def prepare_gallery(spec: EvalDatasetSpec, max_queries: int | None, options: ScoringOptions) -> PreparedDataset:
    """Identity retrieval: rows ``{"id", "image", "text"?, "identity"}`` in queries and gallery.

    Rows are read and validated by :func:`vis_embed.data.load_gallery`.  Positives of a query
    are gallery rows of its identity; a gallery row with the query's id or the same resolved
    image file is excluded for that query (a query never finds itself).
    """
    data = load_gallery(spec.file("queries"), spec.file("gallery"), spec.root_for("queries"))
    query_rows = data.queries[:max_queries]
    excluded = [np.asarray(e, dtype=np.int64) for e in data.excluded()[:max_queries]]
    queries = [_clean(row.item()) for row in query_rows]
    gallery = [_clean(row.item()) for row in data.gallery]
    codes, _identities = factorize([r.identity for r in data.gallery] + [r.identity for r in query_rows])
    gallery_codes, query_codes = codes[:len(data.gallery)], codes[len(data.gallery):]
    depth_option = spec.options.depth or options.depth
    tie_policy = _tie_policy(spec, options)
    index_kind = spec.options.index or options.index

    def score(embeddings: dict[str, np.ndarray]) -> Outcome:
        query_emb, gallery_emb = embeddings["query"], embeddings["gallery"]
        n_gallery = len(gallery)
        depth = int(depth_option) if depth_option else (
            n_gallery if n_gallery <= GALLERY_FULL_RANKING_LIMIT else GALLERY_DEFAULT_DEPTH)
        choice = search.resolve_index(index_kind, gallery_emb.shape[1])  # "auto": this machine's fastest
        index = search.build_index(gallery_emb, kind=choice.kind)
        # one result past the cut-off shows whether a score tie crosses it
        k_search = min(n_gallery, depth + 1 + max((len(e) for e in excluded), default=0))
        per_query, examples, skipped, unresolved_ties = [], [], 0, 0
        chunk = 1024  # bounds the (chunk x k_search) result matrices
        for start in range(0, len(queries), chunk):
            top_scores, top_ids = search.search(index, query_emb[start:start + chunk], k_search)
            for offset in range(top_ids.shape[0]):
                q = start + offset
                is_positive = gallery_codes == query_codes[q]
                is_positive[excluded[q]] = False
                n_positives = int(is_positive.sum())
                if n_positives == 0:  # load_gallery rejects these; kept for direct callers
                    skipped += 1
                    continue
                ids, scores, complete = gallery_ranking.results_past_ties(
                    index, query_emb[q], top_ids[offset], top_scores[offset], excluded[q], depth, n_gallery)
                relevance = metrics.truncated_relevance(scores, is_positive[ids], depth, complete, tie_policy)
                unresolved_ties += metrics.boundary_tie_unresolved(scores, depth, complete)
                per_query.append(metrics.query_metrics(relevance, n_positives=n_positives))
                if len(examples) < options.n_examples:
                    order = metrics.tie_order(scores, is_positive[ids], tie_policy)[:5]
                    examples.append(Example(queries[q], [(gallery[ids[j]], float(scores[j]),
                                                          bool(is_positive[ids[j]])) for j in order]))
        if not per_query:
            raise DataError("no query has a positive in the gallery", path=spec.file("queries"))
        return Outcome(metrics.summarize(per_query), "P@1", len(per_query), examples,
                       {"n_skipped_queries": skipped, "depth": depth, "n_gallery": n_gallery,
                        "index": choice.kind, "index_requested": index_kind, "index_reason": choice.reason,
                        "tie_policy": tie_policy,
                        "n_unresolved_boundary_ties": unresolved_ties})

    return PreparedDataset({"query": (spec.query_instruction, queries),
                            "gallery": (spec.candidate_instruction, gallery)}, score,
                           [spec.file("queries"), spec.file("gallery")])


# ---------------------------------------------------------------- peer protocols

def _pair_dataset(spec: EvalDatasetSpec, rows: list[tuple[int, dict[str, Any]]],
                  score: Callable[[dict[str, np.ndarray]], Outcome]) -> PreparedDataset:
    """Pools "a" (query instruction) and "b" (candidate instruction) of the pair-row protocols."""
    return PreparedDataset({"a": (spec.query_instruction, _item_column(spec, rows, "a")),
                            "b": (spec.candidate_instruction, _item_column(spec, rows, "b"))},
                           score, [spec.file("path")])


def _item_column(spec: EvalDatasetSpec, rows: list[tuple[int, dict[str, Any]]], key: str) -> list[Item]:
    path, root = spec.file("path"), spec.root_for("path")
    return [normalise_item(_require(row, key, path, line), root, path, line, key) for line, row in rows]


def _float_column(spec: EvalDatasetSpec, rows: list[tuple[int, dict[str, Any]]], key: str) -> np.ndarray:
    values = []
    for line, row in rows:
        value = _require(row, key, spec.file("path"), line)
        if not isinstance(value, (int, float)):  # bool is an int: true/false labels are fine
            raise DataError(f"expected a number, got {value!r}", path=spec.file("path"), line=line, field=key)
        if not np.isfinite(value):  # NaN would turn into a finite, wrong score
            raise DataError(f"expected a finite number, got {value!r}", path=spec.file("path"), line=line, field=key)
        values.append(float(value))
    return np.asarray(values)


def _check_embedded(spec: EvalDatasetSpec, embeddings: np.ndarray, places: list[tuple[int, str]]) -> None:
    """DataError naming the row and field of the first item the model embedded as NaN or infinity
    (``places[i]`` is item i's (line, field)): such a similarity would otherwise score."""
    bad = np.flatnonzero(~np.isfinite(embeddings).all(axis=1))
    if len(bad):
        line, field_name = places[int(bad[0])]
        raise DataError("the model embedded this item as NaN or infinite values", path=spec.file("path"),
                        line=line, field=field_name)


def _check_row_sides(spec: EvalDatasetSpec, rows: list[tuple[int, dict[str, Any]]],
                     emb: dict[str, np.ndarray]) -> None:
    for side, embeddings in emb.items():
        _check_embedded(spec, embeddings, [(line, side) for line, _row in rows])


def _rowwise_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("nd,nd->n", a.astype(np.float64), b.astype(np.float64))


def prepare_2afc(spec: EvalDatasetSpec, max_queries: int | None, options: ScoringOptions) -> PreparedDataset:
    """Rows ``{"id", "reference", "a", "b", "label"}``; label = share of humans choosing A."""
    rows = list(_rows(spec, "path", max_queries))
    labels = _float_column(spec, rows, "label")
    if ((labels < 0) | (labels > 1)).any():
        bad = int(np.flatnonzero((labels < 0) | (labels > 1))[0])
        raise DataError("label must lie in [0, 1]", path=spec.file("path"), line=rows[bad][0], field="label")

    def score(emb: dict[str, np.ndarray]) -> Outcome:
        _check_row_sides(spec, rows, emb)
        per_triplet = protocols.two_afc_accuracy(_rowwise_cosine(emb["reference"], emb["a"]),
                                                 _rowwise_cosine(emb["reference"], emb["b"]), labels)
        low, high = protocols.bootstrap_interval(per_triplet, seed=spec.options.get("seed", 0))
        return Outcome({"2AFC": 100 * float(per_triplet.mean()), "2AFC_CI95_low": 100 * low,
                        "2AFC_CI95_high": 100 * high}, "2AFC", len(rows))

    return PreparedDataset({"reference": (spec.query_instruction, _item_column(spec, rows, "reference")),
                            "a": (spec.candidate_instruction, _item_column(spec, rows, "a")),
                            "b": (spec.candidate_instruction, _item_column(spec, rows, "b"))},
                           score, [spec.file("path")])


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
    for line, row in _rows(spec, "path", max_queries):
        raw_views = _require(row, "views", path, line)
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
        for side, places in (("anchor", view_places), ("view", view_places), ("negative", negative_places)):
            _check_embedded(spec, emb[side], places)
        margins = []
        for first, count, slots in structure:
            anchors = emb["anchor"][first:first + count]
            targets = emb["view"][first:first + count]
            paired = np.zeros_like(anchors)
            paired[slots >= 0] = emb["negative"][slots[slots >= 0]]
            margins.append(protocols.nearid_margins(anchors, paired, slots >= 0, view_embeddings=targets))
        result = protocols.nearid_scores(margins)
        return Outcome({"SSR": 100 * result["SSR"], "pairwise_acc": 100 * result["pairwise_acc"],
                        "n_margins": result["n_margins"]}, "SSR", result["n_identities"])

    return PreparedDataset({"anchor": (spec.query_instruction, views), "view": (spec.candidate_instruction, views),
                            "negative": (spec.candidate_instruction, negatives)}, score, [path])


def prepare_asym_recall(spec: EvalDatasetSpec, max_queries: int | None, options: ScoringOptions) -> PreparedDataset:
    """Rows ``{"id", "a": item, "b": item}``: aligned pairs (e.g. two views of one identity)."""
    rows = list(_rows(spec, "path", max_queries))
    ks = spec.options.ks or protocols.ASYM_RECALL_KS

    def score(emb: dict[str, np.ndarray]) -> Outcome:
        _check_row_sides(spec, rows, emb)
        result = protocols.asymmetric_recall_at_k(emb["a"], emb["b"], ks=ks)
        return Outcome({k: 100 * v for k, v in result.items()}, f"R@{ks[0]}", len(rows))

    return _pair_dataset(spec, rows, score)


def prepare_pair_ap(spec: EvalDatasetSpec, max_queries: int | None, options: ScoringOptions) -> PreparedDataset:
    """Rows ``{"id", "a": item, "b": item, "label": 0 | 1}`` (1 = same identity)."""
    rows = list(_rows(spec, "path", max_queries))
    labels = _float_column(spec, rows, "label")
    if not np.isin(labels, (0.0, 1.0)).all():
        raise DataError("label must be 0 or 1", path=spec.file("path"), field="label")

    def score(emb: dict[str, np.ndarray]) -> Outcome:
        _check_row_sides(spec, rows, emb)
        ap = protocols.average_precision(_rowwise_cosine(emb["a"], emb["b"]), labels.astype(bool))
        return Outcome({"AP": 100 * ap}, "AP", len(rows))

    return _pair_dataset(spec, rows, score)


def prepare_human_corr(spec: EvalDatasetSpec, max_queries: int | None, options: ScoringOptions) -> PreparedDataset:
    """Rows ``{"id", "a": item, "b": item, "score": float, "group"?: str}`` (human similarity)."""
    rows = list(_rows(spec, "path", max_queries))
    human = _float_column(spec, rows, "score")
    groups = [str(row.get("group", "all")) for _line, row in rows]

    def score(emb: dict[str, np.ndarray]) -> Outcome:
        _check_row_sides(spec, rows, emb)
        result = protocols.correlation_with_humans(_rowwise_cosine(emb["a"], emb["b"]), human, groups)
        # undefined (every group constant) is null in results.json, not NaN (invalid JSON)
        percent = {key: None if np.isnan(result[key]) else 100 * result[key] for key in ("pearson", "spearman")}
        return Outcome({**percent, "n_groups": result["n_groups"], "n_constant_groups": result["n_constant_groups"]},
                       "spearman", len(rows), extra={"constant_groups": result["constant_groups"]})

    return _pair_dataset(spec, rows, score)


PREPARERS: dict[str, Callable[[EvalDatasetSpec, int | None, ScoringOptions], PreparedDataset]] = {
    "candidates": prepare_candidates, "gallery": prepare_gallery, "2afc": prepare_2afc,
    "nearid": prepare_nearid, "asym_recall": prepare_asym_recall, "pair_ap": prepare_pair_ap,
    "human_corr": prepare_human_corr,
}


def prepare(spec: EvalDatasetSpec, max_queries: int | None = None,
            options: ScoringOptions | None = None) -> PreparedDataset:
    if spec.layout not in PREPARERS:
        raise ConfigError(f"dataset {spec.name!r}: unknown layout {spec.layout!r}; expected one of {LAYOUTS}")
    return PREPARERS[spec.layout](spec, max_queries, options or ScoringOptions())
