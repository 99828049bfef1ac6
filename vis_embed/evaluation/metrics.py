"""Ranking metrics for retrieval-style evaluation (Precision@1, hit/recall@k, MRR, mAP, NDCG@k).

Tie policy (pessimistic): when a positive and a negative candidate have exactly the same
score, the negative is ranked first.  A model that outputs a constant score therefore gets
P@1 = 0, not 1 -- peers that sort stably with the positive first (MMEB's layout puts it at
index 0) silently reward collapsed embeddings.  Ties between two positives do not change any
metric.  For truncated rankings (top-``depth`` gallery search) a positive whose score equals
the score at the cut-off is counted as missed, because unseen negatives may share that score.

All per-query values are fractions in [0, 1]; :func:`summarize` averages them over queries
and reports percentages, which is what ``results.json`` stores.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DEFAULT_KS: tuple[int, ...] = (1, 5, 10)
NDCG_KS: tuple[int, ...] = (5, 10)


def pessimistic_order(scores: np.ndarray, is_positive: np.ndarray) -> np.ndarray:
    """Indices sorting candidates by score (descending), negatives before positives on ties."""
    scores = np.asarray(scores, dtype=np.float64)
    is_positive = np.asarray(is_positive, dtype=bool)
    if scores.shape != is_positive.shape or scores.ndim != 1:
        raise ValueError(f"scores {scores.shape} and is_positive {is_positive.shape} must be equal 1-D shapes")
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN")
    # lexsort: the LAST key is the primary one.
    return np.lexsort((is_positive.astype(np.int8), -scores))


def ranked_relevance(scores: np.ndarray, is_positive: np.ndarray) -> np.ndarray:
    """Boolean relevance of the ranked list (rank 1 first) under the pessimistic tie policy."""
    if len(scores) == 0:
        raise ValueError("empty candidate list / gallery: nothing to rank")
    is_positive = np.asarray(is_positive, dtype=bool)
    return is_positive[pessimistic_order(scores, is_positive)]


def query_metrics(relevance: np.ndarray, n_positives: int | None = None,
                  ks: Sequence[int] = DEFAULT_KS, ndcg_ks: Sequence[int] = NDCG_KS) -> dict[str, float]:
    """Metrics of one query from its ranked relevance list (fractions).

    ``n_positives`` is the number of relevant items in the whole collection; it defaults to
    the positives present in ``relevance`` and must be given when the list is truncated
    (recall, mAP and NDCG normalise by it, so missed positives count against the model).
    """
    relevance = np.asarray(relevance, dtype=bool)
    found = int(relevance.sum())
    total = found if n_positives is None else int(n_positives)
    if total <= 0:
        raise ValueError("query has no positive candidate")
    if found > total:
        raise ValueError(f"ranked list holds {found} positives but n_positives={total}")
    ranks = np.flatnonzero(relevance) + 1  # 1-based ranks of the positives found
    cumulative_hits = np.arange(1, found + 1)
    out: dict[str, float] = {"P@1": float(relevance[:1].sum())}
    for k in ks:
        hits_at_k = int(relevance[:k].sum())
        out[f"hit@{k}"] = float(hits_at_k > 0)
        out[f"recall@{k}"] = hits_at_k / total
    out["MRR"] = float(1.0 / ranks[0]) if found else 0.0
    out["mAP"] = float((cumulative_hits / ranks).sum() / total)
    for k in ndcg_ks:
        gains = 1.0 / np.log2(ranks[ranks <= k] + 1.0)
        ideal = 1.0 / np.log2(np.arange(1, min(k, total) + 1) + 1.0)
        out[f"NDCG@{k}"] = float(gains.sum() / ideal.sum())
    return out


def summarize(per_query: Sequence[dict[str, float]]) -> dict[str, float]:
    """Mean of each metric over queries, in percent."""
    if not per_query:
        raise ValueError("no queries to summarize")
    keys = list(per_query[0])
    return {key: 100.0 * float(np.mean([row[key] for row in per_query])) for key in keys}


def candidate_list_metrics(scores: Sequence[np.ndarray], positives: Sequence[np.ndarray],
                           ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """Dataset metrics (percent) when every query ranks its own candidate list.

    ``scores[i]`` holds query i's candidate scores and ``positives[i]`` a boolean mask of the
    same length (MMEB: only the first candidate is positive).
    """
    if len(scores) == 0:
        raise ValueError("dataset has no queries")
    per_query = [query_metrics(ranked_relevance(s, p), ks=ks) for s, p in zip(scores, positives, strict=True)]
    return summarize(per_query)


def truncated_relevance(scores: np.ndarray, is_positive: np.ndarray, truncated: bool) -> np.ndarray:
    """Ranked relevance of a top-``depth`` result list (e.g. from faiss).

    The list is re-ordered pessimistically; when ``truncated`` (more eligible items exist
    than were returned) positives tied with the last returned score are marked missed.
    """
    if len(scores) == 0:
        return np.zeros(0, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    is_positive = np.asarray(is_positive, dtype=bool)
    order = pessimistic_order(scores, is_positive)
    relevance = is_positive[order].copy()
    if truncated:
        relevance &= scores[order] > scores[order][-1]
    return relevance
