"""Ranking metrics for retrieval-style evaluation (Precision@1, hit/recall@k, MRR, mAP, NDCG@k,
ndcg_linear@k).

Relevance is a boolean per result, or a graded gain (a qrels grade; boolean = gain 1).  With
``rel_i`` the gain of the result at rank ``i`` and ``R`` the query's relevant documents (gain > 0):

- ``P@1`` = ``hit@1`` = [rel_1 > 0];  ``hit@k`` = [some rel_i > 0, i <= k];
  ``recall@k`` = |relevant in the top k| / |R|;  ``MRR`` = 1 / (rank of the first relevant);
- ``NDCG@k``: binary gains (every relevant document gains 1);
- ``ndcg_linear@k`` = DCG@k / IDCG@k, DCG@k = sum_{i<=k} rel_i / log2(i + 1), IDCG@k the DCG of
  the query's judged gains sorted best first (from the qrels, not from the ranking): linear
  gains, as VLM2Vec's ``ndcg_linear`` (MMEB-V2's visdoc score) and trec_eval / ir_measures'
  ``nDCG@k``.  With binary relevance it equals ``NDCG@k``.

Tie policies (how candidates with exactly the same score are ordered):

- ``pessimistic`` (default): a negative tied with a positive is ranked first.  A model that
  outputs a constant score therefore gets P@1 = 0, not 1 -- peers that sort stably with the
  positive first (MMEB's layout puts it at index 0) silently reward collapsed embeddings.
- ``first``: ties keep the candidates' listed order, as ``argmax`` does in VLM2Vec's MMEB
  scorer (the first index wins).  Reproduces published MMEB numbers exactly, including the
  credit a collapsed model gets there.

Ties between two positives do not change any metric under either policy.  For truncated
rankings (top-``depth`` gallery search) see :func:`truncated_relevance`.

All per-query values are fractions in [0, 1]; :func:`summarize` averages them over queries
and reports percentages, which is what ``results.json`` stores.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vis_embed.data.eval_options import DEFAULT_TIE_POLICY, check_tie_policy

DEFAULT_KS: tuple[int, ...] = (1, 5, 10)
# The primary metrics of the ranking layouts, the ones group means aggregate: P@1 (= hit@1;
# candidates, gallery) and ndcg_linear@5 (qrels: MMEB-V2's visual-document score); the peer
# protocols' primaries (2AFC, SSR, AP, ...) are other quantities, never mixed into a group.
RANKING_PRIMARIES: frozenset[str] = frozenset({"P@1", "hit@1", "ndcg_linear@5"})
NDCG_KS: tuple[int, ...] = (5, 10)


def tie_order(scores: np.ndarray, is_positive: np.ndarray, tie_policy: str = DEFAULT_TIE_POLICY) -> np.ndarray:
    """Indices sorting candidates by score (descending), ties ordered by ``tie_policy``.

    ``is_positive`` may hold graded gains: ``pessimistic`` then puts the lower gain first."""
    scores = np.asarray(scores, dtype=np.float64)
    is_positive = np.asarray(is_positive)
    is_positive = is_positive.astype(np.float64 if is_positive.dtype.kind == "f" else bool)
    check_tie_policy(tie_policy)
    if scores.shape != is_positive.shape or scores.ndim != 1:
        raise ValueError(f"scores {scores.shape} and is_positive {is_positive.shape} must be equal 1-D shapes")
    if not np.isfinite(scores).all():
        first = int(np.flatnonzero(~np.isfinite(scores))[0])
        raise ValueError(f"scores contain NaN or infinite values (candidate {first})")
    if tie_policy == "first":
        return np.argsort(-scores, kind="stable")
    # lexsort: the LAST key is the primary one.
    return np.lexsort((is_positive.astype(np.float64), -scores))


def pessimistic_order(scores: np.ndarray, is_positive: np.ndarray) -> np.ndarray:
    """Indices sorting candidates by score (descending), negatives before positives on ties."""
    return tie_order(scores, is_positive, "pessimistic")


def ranked_relevance(scores: np.ndarray, is_positive: np.ndarray,
                     tie_policy: str = DEFAULT_TIE_POLICY) -> np.ndarray:
    """Relevance of the ranked list (rank 1 first) under ``tie_policy``: boolean, or the
    gains when ``is_positive`` holds floats."""
    if len(scores) == 0:
        raise ValueError("empty candidate list / gallery: nothing to rank")
    is_positive = np.asarray(is_positive)
    if is_positive.dtype.kind != "f":
        is_positive = is_positive.astype(bool)
    return is_positive[tie_order(scores, is_positive, tie_policy)]


def dcg(gains: np.ndarray, k: int) -> float:
    """sum_{i<=k} gain_i / log2(i + 1) of a ranked list of gains (linear gains)."""
    top = np.asarray(gains, dtype=np.float64)[:k]
    return float((top / np.log2(np.arange(2, len(top) + 2))).sum())


def query_metrics(relevance: np.ndarray, n_positives: int | None = None,
                  ks: Sequence[int] = DEFAULT_KS, ndcg_ks: Sequence[int] = NDCG_KS,
                  ideal_gains: Sequence[float] | None = None) -> dict[str, float]:
    """Metrics of one query from its ranked relevance list (fractions).

    ``relevance`` is boolean or the ranked results' gains (qrels grades; > 0 is relevant).
    ``n_positives`` is the number of relevant items in the whole collection; it defaults to
    the positives present in ``relevance`` and must be given when the list is truncated
    (recall, mAP and NDCG normalise by it, so missed positives count against the model).
    ``ideal_gains`` are the query's judged gains (> 0) for ``ndcg_linear@k``'s ideal DCG;
    default: ``n_positives`` gains of 1.
    """
    ranked_gains = np.asarray(relevance, dtype=np.float64)
    relevance = ranked_gains > 0
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
        out[f"NDCG@{k}"] = dcg(relevance, k) / dcg(np.ones(total), k)
    ideal = np.sort(np.asarray(ideal_gains if ideal_gains is not None else np.ones(total), dtype=np.float64))[::-1]
    for k in ndcg_ks:
        out[f"ndcg_linear@{k}"] = dcg(ranked_gains, k) / dcg(ideal, k)
    return out


def summarize(per_query: Sequence[dict[str, float]]) -> dict[str, float]:
    """Mean of each metric over queries, in percent."""
    if not per_query:
        raise ValueError("no queries to summarize")
    keys = list(per_query[0])
    return {key: 100.0 * float(np.mean([row[key] for row in per_query])) for key in keys}


def truncated_relevance(scores: np.ndarray, is_positive: np.ndarray, depth: int, complete: bool,
                        tie_policy: str = DEFAULT_TIE_POLICY) -> np.ndarray:
    """Ranked relevance, cut at ``depth``, of the best results of a larger ranking (e.g. faiss).

    ``scores`` / ``is_positive`` are the fetched results: the best ``len(scores)`` items of
    the whole collection, listed in collection order for the ``first`` policy.  ``complete``
    says they are every eligible item.  The result equals the first ``depth`` entries of the
    full ranking -- so P@1 and recall@k for any k <= depth are the full-ranking values --
    whenever the fetched list reaches past the items tied with the score at rank ``depth``
    (fetch at least ``depth + 1`` results).  Only when that tie group may continue into the
    unseen items (an incomplete list whose lowest score is the score at rank ``depth``) are
    the positives tied with it counted as missed: unseen negatives could rank before them.
    """
    if depth <= 0:
        raise ValueError(f"depth must be positive, got {depth}")
    scores = np.asarray(scores, dtype=np.float64)
    is_positive = np.asarray(is_positive)
    if is_positive.dtype.kind != "f":  # booleans stay booleans; gains (floats) stay gains
        is_positive = is_positive.astype(bool)
    if len(scores) == 0:
        return np.zeros(0, dtype=is_positive.dtype)
    order = tie_order(scores, is_positive, tie_policy)[:depth]
    relevance = is_positive[order].copy()
    if not complete:
        relevance = np.where(scores[order] > scores.min(), relevance, 0).astype(is_positive.dtype)
    return relevance


def boundary_tie_unresolved(scores: np.ndarray, depth: int, complete: bool) -> bool:
    """Whether the items tied with the score at rank ``depth`` may continue past the fetched list."""
    if complete or len(scores) == 0:
        return False
    top = np.sort(np.asarray(scores, dtype=np.float64))[::-1]
    return bool(top[min(depth, len(top)) - 1] == top[-1])
