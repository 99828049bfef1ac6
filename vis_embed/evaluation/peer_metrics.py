"""Peer metrics of identity-similarity research (their protocols), as small functions over similarities.

Each function takes cosine similarities (or embeddings) and labels and returns fractions;
the harness converts them to percent.  Row layouts that feed them from a manifest are
documented in docs/evaluation.md (layouts ``2afc``, ``nearid``, ``asym_recall``,
``pair_ap``, ``human_corr``).

- :func:`two_afc_accuracy` -- DreamSim / NIGHTS 2AFC: which of A, B is closer to the
  reference?  Soft human labels; model ties score 0.5; bootstrap 95% interval.
- :func:`nearid_margins`, :func:`nearid_scores` -- NearID directed margins
  delta = s(p_i, p_j) - s(p_i, n_i); Sample Success Rate and pairwise accuracy.
- :func:`asymmetric_recall_at_k` -- TLL: a pair counts if found in either direction (and each
  direction on its own).
- :func:`average_precision` -- AP of same/different pair scores; ties by the expected-rank
  rule (McSherry & Najork 2008), :func:`pessimistic_average_precision` beside it.
- :func:`correlation_with_humans` -- Pearson / Spearman, Fisher-z averaged across groups.

A collapsed model (every item embedded as the same vector) must never score above chance:
ties are resolved against the model or at their expectation everywhere (a zero NearID margin
fails, a 2AFC tie scores 0.5, tied ranks are pessimistic, tied AP is the expected AP over the
tie's orders = the prevalence for one big tie) and a constant group -- detected by its range,
``max - min <= tolerance``, not by an exactly zero variance that rounding hides -- has no
correlation (left out, counted).  Non-finite similarities or labels are errors naming the
item, never a score.  Every function that takes embeddings L2-normalises them first
(:func:`unit_rows`): the protocols are defined on cosine similarities, so a vector's norm
cannot change a score.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from vis_embed.evaluation.metrics import pessimistic_order

# k of the asymmetric recall: 1, 3, 5 are those of the public code that defines it on TLL
# (Risser-Maroix, Kurtz & Lomenie, ICIP 2021 / arXiv 2206.01417: github.com/VieVie31/visual-similarity,
# utils.py, aR@1/3/5); 20 is this toolkit's own (kept: results carry it).  The original TLL paper's
# retrieval protocol was not verified (docs/evaluation.md).
ASYM_RECALL_KS: tuple[int, ...] = (1, 3, 5, 20)
# A group whose values span at most this (relative to their magnitude, at least 1) is constant:
# n copies of one cosine differ by a few ulps after a mean, which must not read as a correlation.
CONSTANT_TOLERANCE = 1e-9
# A correlation's Fisher z over n pairs has variance 1 / (n - 3): a group of 3 pairs or fewer
# carries no weight (and a random model scores |r| = 1 on 3 pairs a third of the time).
MIN_GROUP_PAIRS = 4


def unit_rows(embeddings: np.ndarray) -> np.ndarray:
    """``embeddings`` (N, D) as float64 rows of norm 1, so inner products are cosines.

    A zero row stays zero (its cosine with anything is 0, never a NaN that would read as a
    broken model); NaN / infinite rows stay non-finite for the callers' row-naming checks.
    """
    values = np.asarray(embeddings, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"embeddings must be a (N, D) matrix, got shape {values.shape}")
    with np.errstate(invalid="ignore", over="ignore"):
        norms = np.linalg.norm(values, axis=1, keepdims=True)
        return np.divide(values, norms, out=np.zeros_like(values), where=norms > 0) \
            + np.where(np.isfinite(norms), 0.0, np.nan)


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
    anchors = unit_rows(anchor_embeddings)
    targets = anchors if view_embeddings is None else unit_rows(view_embeddings)
    negatives = unit_rows(negative_embeddings)
    valid = np.asarray(negative_valid, dtype=bool)
    for values, what in ((anchors, "anchor embedding"), (targets, "view embedding")):
        check_finite(values, what, "view")
    check_finite(negatives[valid], "negative embedding", "paired negative")
    # row i: p_i . (p_j - n_i) for every j; one (V, D) difference at a time, not all V x V x D at once
    # (an identity of 1,000 views at width 1536 was 12 GB)
    margins = np.stack([(targets - negatives[i]) @ anchors[i] for i in range(len(anchors))]) \
        if len(anchors) else np.zeros((0, 0))
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

    ``R@k``: pair i counts at k if b_i is among a_i's top-k over all b, OR a_i is among b_i's
    top-k over all a (the rule of the public code that names the metric: ``(sens1 | sens2).mean()``).
    Each direction is also reported on its own (``R@k a->b``, ``R@k b->a``): the resemblance is
    not symmetric, and a reader comparing with a paper that ranks one side only needs that number.
    Ranks use the pessimistic tie policy of :mod:`metrics` (a collapsed model ranks every partner
    last: R@k = 0 for k < number of pairs); that code's argsort breaks ties by position, which
    differs only where scores tie exactly.
    """
    a = np.asarray(a_embeddings, dtype=np.float64)
    b = np.asarray(b_embeddings, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape or len(a) == 0:
        raise ValueError("a and b must be non-empty with equal shapes (aligned pairs)")
    check_finite(a, "embedding a", "pair")
    check_finite(b, "embedding b", "pair")
    similarity = unit_rows(a) @ unit_rows(b).T
    diagonal = np.diag(similarity)
    # Pessimistic rank: every other item scoring >= the partner's score comes first.
    rank_a_to_b = (similarity >= diagonal[:, None]).sum(axis=1)  # counts the partner itself
    rank_b_to_a = (similarity >= diagonal[None, :]).sum(axis=0)
    best_rank = np.minimum(rank_a_to_b, rank_b_to_a)
    recalls = {f"R@{k}": float((best_rank <= k).mean()) for k in ks}
    for direction, ranks in (("a->b", rank_a_to_b), ("b->a", rank_b_to_a)):
        recalls.update({f"R@{k} {direction}": float((ranks <= k).mean()) for k in ks})
    return recalls


def _check_pair_scores(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    check_finite(np.asarray(scores), "similarity", "pair")
    check_finite(np.asarray(labels), "label", "pair")
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=bool)
    if scores.shape != labels.shape or scores.ndim != 1:
        raise ValueError("scores and labels must be 1-D and aligned")
    if not labels.any():
        raise ValueError("average precision needs at least one 'same' pair")
    return scores, labels


def average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    r"""AP of same (1) / different (0) pairs ranked by score, ties by the expected-rank rule.

    Tied pairs are in every order with equal probability and AP is its expectation (McSherry
    & Najork, ECIR 2008).  A tie group after ``s`` pairs, ``R_b`` of them same, holding ``n``
    pairs of which ``r`` are same, contributes (a same pair at position p of the group has
    ``(p - 1)(r - 1)/(n - 1)`` other same pairs before it, in expectation)

    .. math::

        \frac{r}{n} \sum_{p=1}^{n} \frac{R_b + 1 + (p - 1)\frac{r - 1}{n - 1}}{s + p}

    and AP is the sum over groups divided by the number of same pairs.  Without ties this is
    ordinary AP; one big tie (a collapsed model) gives the prevalence + O(log n / n).
    """
    scores, labels = _check_pair_scores(scores, labels)
    order = np.argsort(-scores, kind="stable")
    sorted_scores, sorted_labels = scores[order], labels[order]
    boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
    total, seen, same_before = 0.0, 0, 0
    for group in np.split(sorted_labels, boundaries):
        n, r = len(group), int(group.sum())
        if r:
            p = np.arange(1, n + 1, dtype=np.float64)
            others_before = (p - 1) * ((r - 1) / (n - 1) if n > 1 else 0.0)
            total += r / n * float(((same_before + 1 + others_before) / (seen + p)).sum())
        seen, same_before = seen + n, same_before + r
    return total / int(labels.sum())


def pessimistic_average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    """AP with every tie resolved against the model (different pairs first): a lower bound."""
    scores, labels = _check_pair_scores(scores, labels)
    relevance = labels[pessimistic_order(scores, labels)]
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


def is_constant(values: np.ndarray, tolerance: float = CONSTANT_TOLERANCE) -> bool:
    """Whether ``values`` span at most ``tolerance`` x max(1, their largest magnitude)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return True
    return float(values.max() - values.min()) <= tolerance * max(1.0, float(np.abs(values).max()))


def fisher_z_mean(correlations: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """Average correlations in Fisher-z space: tanh(weighted mean(arctanh(r))); NaN when there are none.

    Averaging r directly is biased towards 0 because r is bounded; z is ~normal, with variance
    1 / (n - 3) for n pairs: ``weights`` n - 3 make it the inverse-variance (meta-analytic) mean.
    """
    if len(correlations) == 0:
        return float("nan")
    r = np.clip(np.asarray(correlations, dtype=np.float64), -0.9999999, 0.9999999)
    return float(np.tanh(np.average(np.arctanh(r), weights=weights)))


def check_group_sizes(groups: Sequence[str]) -> None:
    """ValueError unless some group has :data:`MIN_GROUP_PAIRS` pairs: no correlation could be
    scored (checked by the layout before encoding, and by :func:`correlation_with_humans`)."""
    if max(Counter(groups).values(), default=0) < MIN_GROUP_PAIRS:
        raise ValueError(f"no group has {MIN_GROUP_PAIRS} or more pairs (a correlation needs them)")


def correlation_with_humans(model_scores: np.ndarray, human_scores: np.ndarray,
                            groups: Sequence[str] | None = None) -> dict[str, float | list[str]]:
    """Pearson and Spearman between model similarities and human scores.

    With ``groups`` (e.g. one per annotation set or category) each group's correlation is
    computed separately and the groups are combined by a Fisher-z mean weighted by n - 3 (each
    group's z by its inverse variance: a group of 4 pairs that happens to rank perfectly must not
    outweigh one of 200); groups with fewer than :data:`MIN_GROUP_PAIRS` pairs are skipped and
    counted in ``n_small_groups``.  A group where the model (or the humans) give one
    constant score (:func:`is_constant`: range within :data:`CONSTANT_TOLERANCE`; rounding
    makes copies of one cosine differ by ulps) has no correlation: it is left out of the
    mean, counted in ``n_constant_groups`` and named in ``constant_groups``; when every group
    is constant the correlations are NaN.  The run is never stopped by it.
    """
    model_scores = np.asarray(model_scores, dtype=np.float64)
    human_scores = np.asarray(human_scores, dtype=np.float64)
    if model_scores.shape != human_scores.shape:
        raise ValueError("model and human scores must align")
    check_finite(model_scores, "model similarity", "pair")
    check_finite(human_scores, "human score", "pair")
    group_labels = np.asarray(["all"] * len(model_scores) if groups is None else list(groups))
    check_group_sizes(group_labels.tolist())
    pearsons, spearmans, weights, constant, small = [], [], [], [], 0
    for name in dict.fromkeys(group_labels.tolist()):
        members = group_labels == name
        if members.sum() < MIN_GROUP_PAIRS:
            small += 1
            continue
        model, human = model_scores[members], human_scores[members]
        r, rho = pearson(model, human), spearman(model, human)
        if is_constant(model) or is_constant(human) or np.isnan(r) or np.isnan(rho):
            constant.append(str(name))
            continue
        pearsons.append(r)
        spearmans.append(rho)
        weights.append(float(members.sum()) - 3)
    return {"pearson": fisher_z_mean(pearsons, weights), "spearman": fisher_z_mean(spearmans, weights),
            "n_groups": len(pearsons), "n_constant_groups": len(constant), "constant_groups": constant,
            "n_small_groups": small}
