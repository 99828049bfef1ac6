"""Peer protocols against hand-computed values (2AFC, NearID, asymmetric recall, AP, correlations)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from vis_embed.evaluation import peer_metrics


def test_2afc_soft_labels_and_ties() -> None:
    # picks A (label 0.8 -> 0.8), picks B (label 0.3 -> 0.7), tie (-> 0.5 whatever the label)
    per_triplet = peer_metrics.two_afc_accuracy(np.array([0.9, 0.1, 0.4]), np.array([0.2, 0.6, 0.4]),
                                             np.array([0.8, 0.3, 1.0]))
    np.testing.assert_allclose(per_triplet, [0.8, 0.7, 0.5])
    with pytest.raises(ValueError):
        peer_metrics.two_afc_accuracy(np.array([1.0]), np.array([0.0]), np.array([1.5]))


def test_bootstrap_interval_brackets_the_mean_and_shrinks_with_data() -> None:
    rng = np.random.default_rng(0)
    small = rng.random(50)
    large = rng.random(5000)
    low, high = peer_metrics.bootstrap_interval(small, seed=1)
    assert low < small.mean() < high
    large_low, large_high = peer_metrics.bootstrap_interval(large, seed=1)
    assert large_high - large_low < (high - low) / 3
    assert peer_metrics.bootstrap_interval(small, seed=1) == (low, high)  # seeded: reproducible


def test_nearid_margins_memory_stays_linear_in_the_views() -> None:
    """An identity's margins need (V, D) working memory, not V x V x D: 300 views at width 256
    (1.2 MB of vectors) took 184 MB, and 1,000 views at width 1536 12 GB."""
    import tracemalloc

    rng = np.random.default_rng(0)
    views, negatives = rng.standard_normal((300, 256)), rng.standard_normal((300, 256))
    expected = np.array([[views[i] / np.linalg.norm(views[i]) @ (views[j] / np.linalg.norm(views[j])
                          - negatives[i] / np.linalg.norm(negatives[i])) for j in range(300) if j != i]
                         for i in range(300)]).ravel()
    tracemalloc.start()
    try:
        margins = peer_metrics.nearid_margins(views, negatives, np.ones(300, bool))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * views.nbytes  # inputs, unit copies, the (V, V) margins: ~ 10x
    np.testing.assert_allclose(margins, expected, atol=1e-12)


def test_nearid_margins_ssr_and_pairwise_accuracy() -> None:
    e = np.eye(3)
    # identity 1: views p0=e0, p1=e0 ; negatives n0 = e1 (s=0), n1 = e0 (s=1: as close as the view)
    margins_1 = peer_metrics.nearid_margins(np.stack([e[0], e[0]]), np.stack([e[1], e[0]]), np.array([True, True]))
    np.testing.assert_allclose(sorted(margins_1), [0.0, 1.0])  # delta01 = 1 - 0, delta10 = 1 - 1
    # identity 2: three views, only view 0 has a negative -> 2 valid margins, both positive
    views = np.stack([e[2], e[2], e[2]])
    negatives = np.stack([e[0], np.zeros(3), np.zeros(3)])
    margins_2 = peer_metrics.nearid_margins(views, negatives, np.array([True, False, False]))
    np.testing.assert_allclose(margins_2, [1.0, 1.0])
    result = peer_metrics.nearid_scores([margins_1, margins_2, np.array([])])
    assert result["SSR"] == pytest.approx(0.5)  # identity 1 fails on its zero margin
    assert result["pairwise_acc"] == pytest.approx(3 / 4)
    assert result["n_identities"] == 2


def test_asymmetric_recall_counts_either_direction() -> None:
    a = np.array([[1.0, 0.0], [0.8, 0.6]])
    b = np.array([[0.6, 0.8], [1.0, 0.0]])
    # a0 -> b: best is b1 (1.0) not b0 (0.6); b0 -> a: a1 (0.96) beats a0 (0.6) -> pair 0 fails both ways.
    # a1 -> b: b0 0.96 > b1 0.8 -> fail; b1 -> a: a0 1.0 > a1 0.8 -> fail.
    assert peer_metrics.asymmetric_recall_at_k(a, b, ks=(1,))["R@1"] == 0.0
    b2 = np.array([[0.6, 0.8], [0.0, 1.0]])
    # pair 1: a1 -> b: b0 (0.96) > b1 (0.6) fails, but b1 -> a: a1 (0.6) > a0 (0.0) succeeds.
    # pair 0: a0 -> b: b0 (0.6) > b1 (0.0) succeeds.
    # each direction on its own: a->b finds pair 0 only, b->a pair 1 only (b0 -> a: a1 0.96 > a0 0.6)
    assert peer_metrics.asymmetric_recall_at_k(a, b2, ks=(1, 2)) == {
        "R@1": 1.0, "R@2": 1.0, "R@1 a->b": 0.5, "R@2 a->b": 1.0, "R@1 b->a": 0.5, "R@2 b->a": 1.0}
    a3 = np.array([[1.0, 0.0], [1.0, 0.0]])
    b3 = np.array([[1.0, 0.0], [1.0, 0.0]])
    assert peer_metrics.asymmetric_recall_at_k(a3, b3, ks=(1,))["R@1"] == 0.0  # full tie: pessimistic


def test_average_precision_hand_computed_with_tie() -> None:
    scores = np.array([0.9, 0.8, 0.8, 0.1])
    labels = np.array([1, 1, 0, 1])
    # the tie's two orders, equally likely: 1,1,0,1 -> (1 + 1 + 3/4) / 3; 1,0,1,1 -> (1 + 2/3 + 3/4) / 3
    both_orders = ((1 + 1 + 3 / 4) / 3 + (1 + 2 / 3 + 3 / 4) / 3) / 2
    assert peer_metrics.average_precision(scores, labels) == pytest.approx(both_orders, abs=1e-12)
    # pessimistic order: 0.9(1), 0.8(0), 0.8(1), 0.1(1) -> AP = (1/1 + 2/3 + 3/4) / 3
    assert peer_metrics.pessimistic_average_precision(scores, labels) == pytest.approx((1 + 2 / 3 + 3 / 4) / 3)


def test_correlations_match_scipy_and_fisher_z_average() -> None:
    rng = np.random.default_rng(0)
    human = rng.random(40)
    model = human + 0.3 * rng.random(40)
    model[5] = model[6]  # a tie for Spearman's average ranks
    single = peer_metrics.correlation_with_humans(model, human)
    assert single["pearson"] == pytest.approx(stats.pearsonr(model, human)[0], abs=1e-6)
    assert single["spearman"] == pytest.approx(stats.spearmanr(model, human)[0], abs=1e-6)
    groups = ["x"] * 20 + ["y"] * 20
    grouped = peer_metrics.correlation_with_humans(model, human, groups)
    r_x = stats.pearsonr(model[:20], human[:20])[0]
    r_y = stats.pearsonr(model[20:], human[20:])[0]
    assert grouped["pearson"] == pytest.approx(np.tanh((np.arctanh(r_x) + np.arctanh(r_y)) / 2), abs=1e-6)
    assert grouped["n_groups"] == 2


def test_groups_are_weighted_by_their_pairs_and_a_tiny_one_cannot_dominate() -> None:
    # Fisher z over n pairs has variance 1 / (n - 3): the groups' z are averaged with weights
    # n - 3.  Unweighted, 4 pairs in perfect order (z clipped near 8.4) beside 200 random pairs
    # (rho ~ 0) gave 0.9995; 3-pair groups carry no weight at all and are skipped and counted.
    rng = np.random.default_rng(0)
    model = np.r_[[0.1, 0.2, 0.3, 0.4], rng.random(200), [0.1, 0.2, 0.3]]
    human = np.r_[[1.0, 2.0, 3.0, 4.0], rng.random(200), [1.0, 2.0, 3.0]]
    groups = ["tiny"] * 4 + ["big"] * 200 + ["three"] * 3
    result = peer_metrics.correlation_with_humans(model, human, groups)
    z_big = np.arctanh(stats.spearmanr(model[4:204], human[4:204])[0])
    expected = np.tanh((1 * np.arctanh(0.9999999) + 197 * z_big) / 198)
    assert result["spearman"] == pytest.approx(expected, abs=1e-9)
    assert abs(result["spearman"]) < 0.1
    assert result["n_groups"] == 2 and result["n_small_groups"] == 1


def test_nearid_margin_of_identical_vectors_is_exactly_zero() -> None:
    # Target and negative are the same vector: two separately rounded similarities used to
    # differ by ~1e-16 and count as successes; one product p . (t - n) gives exactly 0.
    rng = np.random.default_rng(0)
    for _ in range(20):
        views = rng.standard_normal((4, 33))
        views /= np.linalg.norm(views, axis=1, keepdims=True)
        collapsed = np.repeat(views[:1], 4, axis=0)
        margins = peer_metrics.nearid_margins(views, collapsed, np.ones(4, bool), view_embeddings=collapsed)
        assert (margins == 0).all()
        assert peer_metrics.nearid_scores([margins]) | {"n_margins": 0} == {
            "SSR": 0.0, "pairwise_acc": 0.0, "n_identities": 1, "n_margins": 0}


def test_non_finite_inputs_are_errors_naming_the_item() -> None:
    with pytest.raises(ValueError, match="similarity to A of triplet 1"):
        peer_metrics.two_afc_accuracy(np.array([0.2, np.nan]), np.array([0.1, 0.1]), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="label of triplet 0"):
        peer_metrics.two_afc_accuracy(np.array([0.2]), np.array([0.1]), np.array([np.nan]))
    a = np.eye(3)
    b = a.copy()
    b[2, 0] = np.inf
    with pytest.raises(ValueError, match="embedding b of pair 2"):
        peer_metrics.asymmetric_recall_at_k(a, b)
    with pytest.raises(ValueError, match="human score of pair 1"):
        peer_metrics.correlation_with_humans(np.arange(4.0), np.array([1.0, np.nan, 2.0, 3.0]))
    with pytest.raises(ValueError, match="negative embedding"):
        peer_metrics.nearid_margins(a, np.full((3, 3), np.nan), np.ones(3, bool))


def test_constant_group_is_nan_counted_and_left_out() -> None:
    model = np.array([0.3, 0.3, 0.3, 0.3, 0.1, 0.5, 0.9, 1.0])
    human = np.array([1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0])
    result = peer_metrics.correlation_with_humans(model, human, ["flat"] * 4 + ["ok"] * 4)
    assert result["n_groups"] == 1 and result["n_constant_groups"] == 1 and result["constant_groups"] == ["flat"]
    assert result["spearman"] == pytest.approx(1.0)
    assert np.isnan(peer_metrics.pearson(model[:4], human[:4]))
    everything_flat = peer_metrics.correlation_with_humans(np.zeros(4), np.arange(4.0))
    assert np.isnan(everything_flat["spearman"]) and everything_flat["n_constant_groups"] == 1


def test_asymmetric_recall_defaults_to_tll_ks() -> None:
    # 1, 3, 5: the k of the public code that defines the metric on TLL; 20: ours, kept
    assert set(peer_metrics.asymmetric_recall_at_k(np.eye(3), np.eye(3))) == {
        f"R@{k}{direction}" for k in (1, 3, 5, 20) for direction in ("", " a->b", " b->a")}


@pytest.mark.parametrize("seed", range(4))
def test_asymmetric_recall_is_the_published_codes_either_direction_rule_where_nothing_ties(seed: int) -> None:
    """Without ties, R@k is what VieVie31/visual-similarity's utils.py computes: M = -cosine(left,
    right); pair i is found if i is in argsort(M)[i][:k] or in argsort(M.T)[i][:k]; the mean."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(40, 8)), rng.normal(size=(40, 8))
    b[:20] += 1.5 * a[:20]  # half the pairs resemble each other
    unit_a = a / np.linalg.norm(a, axis=1, keepdims=True)
    unit_b = b / np.linalg.norm(b, axis=1, keepdims=True)
    distance = -(unit_a @ unit_b.T)
    left_to_right, right_to_left = distance.argsort(1), distance.T.argsort(1)
    got = peer_metrics.asymmetric_recall_at_k(a, b, ks=(1, 3, 5))
    for k in (1, 3, 5):
        found_left = np.array([i in left_to_right[i][:k] for i in range(40)])
        found_right = np.array([i in right_to_left[i][:k] for i in range(40)])
        assert got[f"R@{k}"] == pytest.approx((found_left | found_right).mean())
        assert got[f"R@{k} a->b"] == pytest.approx(found_left.mean())
        assert got[f"R@{k} b->a"] == pytest.approx(found_right.mean())
