"""One gallery query's ranked results when the gallery is searched to a limited depth.

A top-``depth`` search cuts the ranking; for P@1 and recall@k (k <= depth) to equal their
full-ranking values, the cut must not split a group of tied scores whose order the tie
policy decides (:func:`vis_embed.evaluation.metrics.truncated_relevance`).  The harness
fetches one result past the cut-off; when that still ties, the query is searched again.
:class:`GlobalRanking` is the one global ranking of the layouts that search a shared gallery or
corpus (``gallery``, ``qrels``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vis_embed.evaluation import metrics
from vis_embed.gallery import search
from vis_embed.gallery.search import SearchIndex
from vis_embed.gallery.index_choice import IndexChoice, resolve_index
from vis_embed.vectors.index_spec import IndexSpec

# A score tie at the ranking's cut-off is resolved by fetching further results, up to this many:
# past it (a near-collapsed model on a huge gallery) the tied positives count as missed.
GALLERY_TIE_FETCH_LIMIT = 10_000


def gallery_order(ids: np.ndarray, scores: np.ndarray, excluded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Results without the query's excluded rows, in gallery order (the ``first`` tie policy's order)."""
    keep = (ids >= 0) & ~np.isin(ids, excluded)
    order = np.argsort(ids[keep], kind="stable")
    return ids[keep][order], scores[keep][order]


def results_past_ties(index: SearchIndex, query: np.ndarray, ids: np.ndarray, scores: np.ndarray, excluded: np.ndarray,
                      depth: int, n_gallery: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """One query's results and whether they are every eligible row.

    When the score at rank ``depth`` ties with the last fetched score, the tie may continue
    into unfetched rows; the query is searched again with twice the results (up to
    GALLERY_TIE_FETCH_LIMIT) so the cut-off falls where the full ranking puts it.
    """
    eligible = n_gallery - len(excluded)
    fetched = len(ids)
    ids, scores = gallery_order(ids, scores, excluded)
    limit = min(n_gallery, GALLERY_TIE_FETCH_LIMIT)
    while metrics.boundary_tie_unresolved(scores, depth, len(ids) >= eligible) and fetched < limit:
        fetched = min(limit, 2 * fetched)
        more_scores, more_ids = search.search(index, query[None, :], fetched)
        ids, scores = gallery_order(more_ids[0], more_scores[0], excluded)
    return ids, scores, len(ids) >= eligible


# galleries / corpora up to this size are ranked completely; larger ones to GALLERY_DEFAULT_DEPTH
GALLERY_FULL_RANKING_LIMIT = 10_000
GALLERY_DEFAULT_DEPTH = 1_000


def ranking_depth(depth: int | None, n_gallery: int) -> int:
    """The depth a global ranking is cut at: ``depth`` when set, else the whole gallery up to
    GALLERY_FULL_RANKING_LIMIT, else GALLERY_DEFAULT_DEPTH (mAP@1000 etc.)."""
    if depth:
        return int(depth)
    return n_gallery if n_gallery <= GALLERY_FULL_RANKING_LIMIT else GALLERY_DEFAULT_DEPTH


@dataclass
class GlobalRanking:
    """Every query ranked over one shared gallery or corpus (gallery and qrels layouts): the index
    the run chose, and for each query its results past ties at the cut-off (:func:`results_past_ties`)."""

    index: SearchIndex
    choice: IndexChoice  # the spec built (canonical) and why
    depth: int
    n_gallery: int

    @classmethod
    def build(cls, gallery: np.ndarray, index: IndexSpec, depth: int | None) -> GlobalRanking:
        # "auto": this machine's fastest exact kind (no memory budget: metrics stay exact)
        choice = resolve_index(index, gallery.shape[1], len(gallery))
        built = search.build_index(gallery, choice.spec)
        return cls(built, choice, ranking_depth(depth, len(gallery)), len(gallery))

    def results(self, queries: np.ndarray, excluded: Sequence[np.ndarray] | None = None,
                chunk: int = 1024) -> Iterator[tuple[int, np.ndarray, np.ndarray, bool]]:
        """``(query number, ids, scores, complete)`` per query, ids in gallery order; ``excluded[q]``
        are gallery rows query q never sees (none by default)."""
        none = np.zeros(0, dtype=np.int64)
        widest = max((len(e) for e in excluded), default=0) if excluded is not None else 0
        # one result past the cut-off shows whether a score tie crosses it
        k_search = min(self.n_gallery, self.depth + 1 + widest)
        for start in range(0, len(queries), chunk):  # bounds the (chunk x k_search) result matrices
            top_scores, top_ids = search.search(self.index, queries[start:start + chunk], k_search)
            for offset in range(top_ids.shape[0]):
                q = start + offset
                skip = excluded[q] if excluded is not None else none
                ids, scores, complete = results_past_ties(self.index, queries[q], top_ids[offset],
                                                          top_scores[offset], skip, self.depth, self.n_gallery)
                yield q, ids, scores, complete

    def extras(self, requested: str, dim: int) -> dict[str, Any]:
        """What results.json records about the ranking: depth, sizes, the index's canonical kind
        (``index``), the name it was asked for (``index_requested``: ``auto``, a kind or an alias),
        why, and the whole spec built (``index_spec``: precision, device, ivf parameters)."""
        spec = self.choice.spec
        return {"depth": self.depth, "n_gallery": self.n_gallery, "index": spec.kind,
                "index_requested": requested, "index_reason": self.choice.reason, "index_spec": spec.recorded(),
                "dim": int(dim), "bytes_per_vector": spec.bytes_per_vector,
                **({"rescore": spec.rescore} if spec.takes_rescore else {})}
