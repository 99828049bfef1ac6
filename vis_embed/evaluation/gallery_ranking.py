"""One gallery query's ranked results when the gallery is searched to a limited depth.

A top-``depth`` search cuts the ranking; for P@1 and recall@k (k <= depth) to equal their
full-ranking values, the cut must not split a group of tied scores whose order the tie
policy decides (:func:`vis_embed.evaluation.metrics.truncated_relevance`).  The harness
fetches one result past the cut-off; when that still ties, the query is searched again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vis_embed.evaluation import metrics, search

# A score tie at the ranking's cut-off is resolved by fetching further results, up to this many:
# past it (a near-collapsed model on a huge gallery) the tied positives count as missed.
GALLERY_TIE_FETCH_LIMIT = 10_000


def gallery_order(ids: np.ndarray, scores: np.ndarray, excluded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Results without the query's excluded rows, in gallery order (the ``first`` tie policy's order)."""
    keep = (ids >= 0) & ~np.isin(ids, excluded)
    order = np.argsort(ids[keep], kind="stable")
    return ids[keep][order], scores[keep][order]


def results_past_ties(index: Any, query: np.ndarray, ids: np.ndarray, scores: np.ndarray, excluded: np.ndarray,
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
