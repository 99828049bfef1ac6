"""Ranking metrics against hand-computed cases: ties, multiple positives, empty galleries,
truncated lists and faiss vs brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vis_embed.data.eval_options import DEFAULT_TIE_POLICY, TIE_POLICIES
from vis_embed.evaluation import metrics
from vis_embed.gallery import search
from vis_embed.vectors.index_spec import IndexSpec


def test_single_positive_ranked_third() -> None:
    relevance = metrics.ranked_relevance(np.array([0.9, 0.5, 0.7]), np.array([False, True, False]))
    assert relevance.tolist() == [False, False, True]
    m = metrics.query_metrics(relevance)
    assert m["P@1"] == 0.0 and m["hit@1"] == 0.0 and m["hit@5"] == 1.0
    assert m["recall@1"] == 0.0 and m["recall@5"] == 1.0
    assert m["MRR"] == pytest.approx(1 / 3)
    assert m["mAP"] == pytest.approx(1 / 3)
    assert m["NDCG@5"] == pytest.approx(1 / math.log2(4))


def test_all_tied_scores_rank_the_positive_last() -> None:
    # A collapsed model (constant score) must not get credit because MMEB puts the positive first.
    m = metrics.query_metrics(metrics.ranked_relevance(np.zeros(4), np.array([True, False, False, False])))
    assert m["P@1"] == 0.0
    assert m["MRR"] == pytest.approx(1 / 4)
    assert m["hit@5"] == 1.0


def test_tie_with_one_negative_counts_against_the_positive() -> None:
    # negative 0.9 first, then a tie positive/negative at 0.8 -> positive is rank 3.
    relevance = metrics.ranked_relevance(np.array([0.8, 0.8, 0.9, 0.1]), np.array([True, False, False, False]))
    assert relevance.tolist() == [False, False, True, False]


def test_multiple_positives() -> None:
    relevance = metrics.ranked_relevance(np.array([0.9, 0.8, 0.7, 0.6]), np.array([True, False, True, False]))
    m = metrics.query_metrics(relevance)
    assert m["P@1"] == 1.0 and m["MRR"] == 1.0
    assert m["recall@1"] == 0.5 and m["recall@5"] == 1.0
    assert m["mAP"] == pytest.approx((1 / 1 + 2 / 3) / 2)
    assert m["NDCG@5"] == pytest.approx((1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3)))


def test_ties_between_positives_do_not_matter() -> None:
    tied = metrics.query_metrics(metrics.ranked_relevance(np.array([0.5, 0.5, 0.1]), np.array([True, True, False])))
    assert tied["mAP"] == 1.0 and tied["P@1"] == 1.0


def test_missed_positives_in_truncated_list_count_against_recall_and_map() -> None:
    m = metrics.query_metrics(np.array([True, False, False]), n_positives=2)
    assert m["recall@5"] == 0.5
    assert m["mAP"] == pytest.approx(0.5)
    assert m["NDCG@5"] == pytest.approx(1 / (1 + 1 / math.log2(3)))


def _full_ranking_values(scores: np.ndarray, positives: np.ndarray, ks: tuple[int, ...]) -> dict[str, float]:
    return metrics.query_metrics(metrics.ranked_relevance(scores, positives), ks=ks)


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_truncated_ranking_equals_full_ranking_at_every_depth(depth: int) -> None:
    # Gallery of 6: the positive at rank 2, another at rank 4; the list is cut at ``depth``
    # with one look-ahead result (what the gallery layout fetches).
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    positives = np.array([False, True, False, True, False, False])
    full = _full_ranking_values(scores, positives, ks=(1, 2, 3, 4))
    fetched = slice(0, depth + 1)
    relevance = metrics.truncated_relevance(scores[fetched], positives[fetched], depth, complete=False)
    assert len(relevance) == depth
    truncated = metrics.query_metrics(relevance, n_positives=2, ks=(1, 2, 3, 4))
    assert truncated["P@1"] == full["P@1"]
    for k in range(1, depth + 1):  # the item at rank depth (k == depth) counts
        assert truncated[f"recall@{k}"] == full[f"recall@{k}"], k


def test_depth_one_counts_the_top_result() -> None:
    relevance = metrics.truncated_relevance(np.array([0.9, 0.3]), np.array([True, False]), 1, complete=False)
    assert relevance.tolist() == [True]
    # the whole (eligible) gallery fetched: nothing unseen, the only result counts
    assert metrics.truncated_relevance(np.array([0.9]), np.array([True]), 1, complete=True).tolist() == [True]


def test_tie_across_the_cut_off() -> None:
    scores = np.array([0.9, 0.5, 0.5])
    positives = np.array([False, True, False])
    # the whole tie group was fetched: pessimistic order puts the tied negative first, so at
    # depth 2 the positive (full rank 3) is missed, exactly as in the full ranking
    assert metrics.truncated_relevance(scores, positives, 2, complete=False).tolist() == [False, False]
    assert not metrics.boundary_tie_unresolved(np.array([0.9, 0.5, 0.4]), 2, complete=False)
    # the tie reaches the last fetched result: unseen negatives may share it -> counted as missed
    assert metrics.boundary_tie_unresolved(scores[:2], 2, complete=False)
    assert metrics.truncated_relevance(scores[:2], positives[:2], 2, complete=False).tolist() == [False, False]
    # ... unless the list is every eligible item
    assert not metrics.boundary_tie_unresolved(scores[:2], 2, complete=True)
    assert metrics.truncated_relevance(scores[:2], positives[:2], 2, complete=True).tolist() == [False, True]


def test_tie_policies_differ_only_on_ties() -> None:
    tied, positive_first = np.array([0.4, 0.4, 0.4]), np.array([True, False, False])
    assert metrics.ranked_relevance(tied, positive_first, "pessimistic").tolist() == [False, False, True]
    # VLM2Vec's argmax: the first listed candidate wins a tie
    assert metrics.ranked_relevance(tied, positive_first, "first").tolist() == [True, False, False]
    assert int(np.argmax(tied)) == 0
    positive_last = np.array([False, False, True])
    assert metrics.ranked_relevance(tied, positive_last, "first").tolist() == [False, False, True]
    untied = np.array([0.2, 0.9, 0.5])
    for policy in TIE_POLICIES:
        assert metrics.ranked_relevance(untied, positive_first, policy).tolist() == [False, False, True]
    assert _dataset([tied], [positive_first], tie_policy="first")["P@1"] == 100.0
    assert _dataset([tied], [positive_first])["P@1"] == 0.0
    with pytest.raises(ValueError, match="unknown tie policy"):
        metrics.ranked_relevance(tied, positive_first, "optimistic")


def test_empty_gallery_and_no_positive_are_errors() -> None:
    with pytest.raises(ValueError, match="empty"):
        metrics.ranked_relevance(np.array([]), np.array([], dtype=bool))
    with pytest.raises(ValueError, match="empty gallery"):
        search.build_index(np.zeros((0, 8), dtype=np.float32), IndexSpec())
    with pytest.raises(ValueError, match="no positive"):
        metrics.query_metrics(np.array([False, False]))
    with pytest.raises(ValueError, match="NaN"):
        metrics.ranked_relevance(np.array([np.nan, 0.1]), np.array([True, False]))


def _dataset(scores: list[np.ndarray], positives: list[np.ndarray],
             tie_policy: str = DEFAULT_TIE_POLICY) -> dict[str, float]:
    """A dataset's metrics when every query ranks its own candidate list (as the layouts do)."""
    return metrics.summarize([metrics.query_metrics(metrics.ranked_relevance(s, p, tie_policy))
                              for s, p in zip(scores, positives, strict=True)])


def test_summarize_is_percent_mean_over_queries() -> None:
    result = _dataset(
        [np.array([0.9, 0.1]), np.array([0.1, 0.9]), np.array([0.3, 0.3])],
        [np.array([True, False])] * 3)
    assert result["P@1"] == pytest.approx(100 / 3)
    assert result["MRR"] == pytest.approx(100 * (1 + 0.5 + 0.5) / 3)


@pytest.mark.parametrize("n_gallery,k", [(1000, 10), (257, 300)])
def test_faiss_exact_equals_numpy_bruteforce(n_gallery: int, k: int) -> None:
    rng = np.random.default_rng(0)
    gallery = rng.standard_normal((n_gallery, 32)).astype(np.float32)
    gallery /= np.linalg.norm(gallery, axis=1, keepdims=True)
    queries = rng.standard_normal((50, 32)).astype(np.float32)
    exact = search.build_index(gallery, IndexSpec.named("exact"))
    faiss_scores, faiss_ids = search.search(exact, queries, k, batch_size=16)
    numpy_scores, numpy_ids = search.numpy_topk(queries, gallery, k, query_chunk=7, gallery_chunk=100)
    full = queries @ gallery.T
    expected_ids = np.argsort(-full, axis=1)[:, :min(k, n_gallery)]
    assert np.array_equal(faiss_ids, expected_ids)
    assert np.array_equal(numpy_ids, expected_ids)
    np.testing.assert_allclose(faiss_scores, numpy_scores, rtol=1e-5, atol=1e-5)


def test_ivf_probing_every_list_is_exact() -> None:
    rng = np.random.default_rng(1)
    gallery = rng.standard_normal((2000, 16)).astype(np.float32)
    queries = rng.standard_normal((20, 16)).astype(np.float32)
    index = search.build_index(gallery, IndexSpec.named("ivf", nlist=8, nprobe=8))
    _, ids = search.search(index, queries, 5)
    _, exact_ids = search.numpy_topk(queries, gallery, 5)
    assert np.array_equal(ids, exact_ids)
    with pytest.raises(ValueError, match="unknown index"):
        IndexSpec.named("hnsw")
