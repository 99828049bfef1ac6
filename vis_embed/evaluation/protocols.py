"""Peer protocols of identity-similarity research, as small functions over similarities.

Each function takes cosine similarities (or embeddings) and labels and returns fractions;
the harness converts them to percent.  Row layouts that feed them from a manifest are
documented in docs/evaluation.md (layouts ``2afc``, ``nearid``, ``asym_recall``,
``pair_ap``, ``human_corr``).

- :func:`two_afc_accuracy` -- DreamSim / NIGHTS 2AFC: which of A, B is closer to the
  reference?  Soft human labels; model ties score 0.5; bootstrap 95% interval.
- :func:`nearid_margins`, :func:`nearid_scores` -- NearID directed margins
  delta = s(p_i, p_j) - s(p_i, n_i); Sample Success Rate and pairwise accuracy.
- :func:`asymmetric_recall_at_k` -- TLL: a pair counts if found in either direction.
- :func:`average_precision` -- AP of same/different pair scores (pessimistic ties).
- :func:`correlation_with_humans` -- Pearson / Spearman, Fisher-z averaged across groups.

A collapsed model (every item embedded as the same vector) must never score above chance:
ties are resolved against the model everywhere (a zero NearID margin fails, a 2AFC tie
scores 0.5, tied ranks are pessimistic) and a constant group has no correlation (NaN,
counted).  Non-finite similarities or labels are errors naming the item, never a score.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vis_embed.evaluation.metrics import pessimistic_order

# TLL reports asymmetric recall at these k.
ASYM_RECALL_KS: tuple[int, ...] = (1, 5, 20)


def check_finite(values: np.ndarray, what: str, item: str = "item") -> None:
    """Raise ValueError naming the first ``item`` (row index) of ``values`` that is NaN or infinite."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return
    bad = ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)
    if bad.any():
        raise ValueError(f"{what} of {item} {int(np.flatnonzero(bad)[0])} is NaN or infinite")


def two_afc_accuracy(sim_a: np.ndarray, sim_b: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per-triplet 2AFC agreement with humans, in [0, 1].

    ``labels[i]`` is the fraction of humans who judged A closer to the reference (1 = all
    chose A, 0 = all chose B; hard labels are the special case 0/1).  The model picks A when
    ``sim_a > sim_b`` and scores ``labels``; picks B and scores ``1 - labels``; on an exact
    tie it scores 0.5 whatever the label (a coin flip in expectation).
    """
    sim_a, sim_b, labels = (np.asarray(x, dtype=np.float64) for x in (sim_a, sim_b, labels))
    if not (sim_a.shape == sim_b.shape == labels.shape):
        raise ValueError("sim_a, sim_b and labels must have the same shape")
    for values, what in ((sim_a, "similarity to A"), (sim_b, "similarity to B"), (labels, "label")):
        check_finite(values, what, "triplet")
    if ((labels < 0) | (labels > 1)).any():
        raise ValueError("2AFC labels must lie in [0, 1]")
    return np.where(sim_a > sim_b, labels, np.where(sim_a < sim_b, 1.0 - labels, 0.5))


def bootstrap_interval(values: np.ndarray, n_resamples: int = 1000, confidence: float = 0.95,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (resampling items)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise ValueError("cannot bootstrap an empty sample")
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, 100):  # blocks keep memory at 100 x N
        count = min(100, n_resamples - start)
        means[start:start + count] = values[rng.integers(0, values.size, size=(count, values.size))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def nearid_margins(anchor_embeddings: np.ndarray, negative_embeddings: np.ndarray,
                   negative_valid: np.ndarray, view_embeddings: np.ndarray | None = None) -> np.ndarray:
    """Directed margins of one identity: ``delta[i, j] = s(p_i, p_j) - s(p_i, n_i)``.

    ``anchor_embeddings`` (V, D) are the identity's views p_1..p_V, ``negative_embeddings``
    (V, D) the near-identity negative n_i paired with each view and ``negative_valid`` (V,)
    whether view i has one.  ``view_embeddings`` are the views encoded as targets when the
    anchor side uses a different instruction (default: the anchors themselves).  Returns the
    valid margins (i != j and n_i present) as a flat array.

    Each margin is one product p_i . (p_j - n_i), not the difference of two separately
    rounded similarities: when p_j and n_i are the same vector the margin is exactly 0 (and
    fails), instead of +-1e-16 that would count as a success for a collapsed model.
    """
    anchors = np.asarray(anchor_embeddings, dtype=np.float64)
    targets = anchors if view_embeddings is None else np.asarray(view_embeddings, dtype=np.float64)
    negatives = np.asarray(negative_embeddings, dtype=np.float64)
    valid = np.asarray(negative_valid, dtype=bool)
    for values, what in ((anchors, "anchor embedding"), (targets, "view embedding")):
        check_finite(values, what, "view")
    check_finite(negatives[valid], "negative embedding", "paired negative")
    differences = targets[None, :, :] - negatives[:, None, :]        # (p_j - n_i) for every (i, j)
    margins = np.einsum("id,ijd->ij", anchors, differences)
    mask = valid[:, None] & ~np.eye(len(anchors), dtype=bool)
    return margins[mask]


def nearid_scores(margins_per_identity: Sequence[np.ndarray]) -> dict[str, float]:
    """Sample Success Rate and pairwise accuracy (fractions) from per-identity margins.

    SSR: share of identities (with at least one valid margin) whose margins are ALL > 0.
    Pairwise accuracy: share of all margins > 0 (micro average).  A zero margin fails.
    """
    scored = [np.asarray(m) for m in margins_per_identity if len(m)]
    if not scored:
        raise ValueError("no identity has a valid margin (need >= 2 views and a negative)")
    all_margins = np.concatenate(scored)
    return {
        "SSR": float(np.mean([bool((m > 0).all()) for m in scored])),
        "pairwise_acc": float((all_margins > 0).mean()),
        "n_identities": len(scored),
        "n_margins": int(all_margins.size),
    }


def asymmetric_recall_at_k(a_embeddings: np.ndarray, b_embeddings: np.ndarray,
                           ks: Sequence[int] = ASYM_RECALL_KS) -> dict[str, float]:
    """TLL asymmetric Recall@k over aligned pairs (a_i, b_i).

    Pair i counts at k if b_i is among a_i's top-k over all b, OR a_i is among b_i's top-k
    over all a.  Ranks use the pessimistic tie policy of :mod:`metrics` (a collapsed model
    ranks every partner last: R@k = 0 for k < number of pairs).
    """
    a = np.asarray(a_embeddings, dtype=np.float64)
    b = np.asarray(b_embeddings, dtype=np.float64)
    if a.shape != b.shape or len(a) == 0:
        raise ValueError("a and b must be non-empty with equal shapes (aligned pairs)")
    check_finite(a, "embedding a", "pair")
    check_finite(b, "embedding b", "pair")
    similarity = a @ b.T
    diagonal = np.diag(similarity)
    # Pessimistic rank: every other item scoring >= the partner's score comes first.
    rank_a_to_b = (similarity >= diagonal[:, None]).sum(axis=1)  # counts the partner itself
    rank_b_to_a = (similarity >= diagonal[None, :]).sum(axis=0)
    best_rank = np.minimum(rank_a_to_b, rank_b_to_a)
    return {f"R@{k}": float((best_rank <= k).mean()) for k in ks}


def average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    """AP of same (1) / different (0) pairs ranked by score; ties put different pairs first."""
    check_finite(np.asarray(scores), "similarity", "pair")
    check_finite(np.asarray(labels), "label", "pair")
    labels = np.asarray(labels, dtype=bool)
    if not labels.any():
        raise ValueError("average precision needs at least one 'same' pair")
    relevance = labels[pessimistic_order(np.asarray(scores), labels)]
    ranks = np.flatnonzero(relevance) + 1
    return float((np.arange(1, len(ranks) + 1) / ranks).mean())


def _ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean rank), as Spearman's rho requires."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), dtype=np.float64)
    sorted_values = values[order]
    boundaries = np.flatnonzero(np.diff(sorted_values)) + 1
    for group in np.split(np.arange(len(values)), boundaries):
        ranks[order[group]] = group.mean() + 1.0
    return ranks


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r; NaN when either variable is constant (the correlation is undefined)."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x)
    y = np.asarray(y, dtype=np.float64) - np.mean(y)
    denominator = np.sqrt((x * x).sum() * (y * y).sum())
    if denominator == 0:
        return float("nan")
    return float((x * y).sum() / denominator)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    return pearson(_ranks(np.asarray(x, dtype=np.float64)), _ranks(np.asarray(y, dtype=np.float64)))


def fisher_z_mean(correlations: Sequence[float]) -> float:
    """Average correlations in Fisher-z space: tanh(mean(arctanh(r))); NaN when there are none.

    Averaging r directly is biased towards 0 because r is bounded; z is ~normal.
    """
    if len(correlations) == 0:
        return float("nan")
    r = np.clip(np.asarray(correlations, dtype=np.float64), -0.9999999, 0.9999999)
    return float(np.tanh(np.arctanh(r).mean()))


def correlation_with_humans(model_scores: np.ndarray, human_scores: np.ndarray,
                            groups: Sequence[str] | None = None) -> dict[str, float | list[str]]:
    """Pearson and Spearman between model similarities and human scores.

    With ``groups`` (e.g. one per annotation set or category) each group's correlation is
    computed separately and the groups are combined by an unweighted Fisher-z mean; groups
    with fewer than 3 pairs are skipped.  A group where the model (or the humans) give one
    constant score has no correlation: it is left out of the mean, counted in
    ``n_constant_groups`` and named in ``constant_groups``; when every group is constant the
    correlations are NaN.  The run is never stopped by it.
    """
    model_scores = np.asarray(model_scores, dtype=np.float64)
    human_scores = np.asarray(human_scores, dtype=np.float64)
    if model_scores.shape != human_scores.shape:
        raise ValueError("model and human scores must align")
    check_finite(model_scores, "model similarity", "pair")
    check_finite(human_scores, "human score", "pair")
    group_labels = np.asarray(["all"] * len(model_scores) if groups is None else list(groups))
    pearsons, spearmans, constant = [], [], []
    for name in dict.fromkeys(group_labels.tolist()):
        members = group_labels == name
        if members.sum() < 3:
            continue
        r = pearson(model_scores[members], human_scores[members])
        if np.isnan(r):
            constant.append(str(name))
            continue
        pearsons.append(r)
        spearmans.append(spearman(model_scores[members], human_scores[members]))
    if not pearsons and not constant:
        raise ValueError("need at least one group with >= 3 scored pairs")
    return {"pearson": fisher_z_mean(pearsons), "spearman": fisher_z_mean(spearmans),
            "n_groups": len(pearsons), "n_constant_groups": len(constant), "constant_groups": constant}
