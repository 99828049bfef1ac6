"""The peer objectives: two-tier (NearID, Eq. 1-3), its margin variant and triplet hinge
(DreamSim), their designated negatives, the objective dispatcher, and GradCache = plain
back-propagation for each kind."""

from __future__ import annotations

import math
import typing

import pytest
import torch
import torch.nn.functional as F

from _training_standin import StandInEncoder, random_members
from vis_embed.training.backends import TorchBackend
from vis_embed.training.recipe import LOSS_KINDS, GradCacheConfig, OptimizerConfig
from vis_embed.training.gradcache import contrastive_step
from vis_embed.training.losses import (
    BatchLabels,
    Temperature,
    build_objective,
    designated_margin_loss,
    designated_negatives,
    info_nce_loss,
    triplet_hinge_loss,
    two_tier_loss,
    two_tier_margin_loss,
)
from vis_embed.training.lr_schedule import lr_lambda
from vis_embed.training.recipe import LossConfig
from vis_embed.errors import SettingsError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Two slots of four rows: an anchor and two hard negatives, then an anchor alone (slot 0);
# an anchor and one hard negative, then an anchor alone (slot 1).
ROLES = ["anchor", "hard_negative", "hard_negative", "anchor", "anchor", "hard_negative", "anchor", "anchor"]
SLOTS = [0, 0, 0, 0, 1, 1, 1, 1]


def _unit(rows: int, dim: int = 6, seed: int = 0) -> torch.Tensor:
    return F.normalize(torch.randn(rows, dim, generator=torch.Generator().manual_seed(seed)), dim=-1)


def test_designated_pairs_follow_their_anchor_in_its_slot_both_ways() -> None:
    designated = designated_negatives(ROLES, SLOTS)
    expected = {(0, 1), (0, 2), (4, 5)}
    pairs = {(i, j) for i, j in designated.nonzero().tolist()}
    assert pairs == expected | {(j, i) for i, j in expected}


def test_a_naive_schedule_has_no_designated_pairs() -> None:
    assert not designated_negatives(["anchor"] * 5, [0, 0, 1, 1, 1]).any()


def test_a_hard_negative_without_an_anchor_in_its_slot_is_left_out() -> None:
    designated = designated_negatives(["anchor", "hard_negative"], [0, 1])
    assert not designated.any()


def test_margin_tier_is_the_mean_hinge_over_designated_pairs() -> None:
    queries, candidates = _unit(8, seed=1), _unit(8, seed=2)
    designated = designated_negatives(ROLES, SLOTS)
    margin = 0.3
    scores = queries @ candidates.T
    by_hand = [max(0.0, margin - float(scores[i, i] - scores[i, j])) for i, j in designated.nonzero().tolist()]
    got = designated_margin_loss(queries, candidates, designated, margin)
    assert float(got) == pytest.approx(sum(by_hand) / len(by_hand), rel=1e-6)


def test_two_tier_margin_is_infonce_plus_weighted_margin_tier() -> None:
    queries, candidates = _unit(8, seed=3), _unit(8, seed=4)
    designated = designated_negatives(ROLES, SLOTS)
    identities = torch.arange(8)
    infonce = info_nce_loss(queries, candidates, 0.1, identities)
    tier = designated_margin_loss(queries, candidates, designated, 0.2)
    assert float(tier) > 0  # the case must exercise the second tier
    got = two_tier_margin_loss(queries, candidates, 0.1, designated, identities, weight=0.5, margin=0.2)
    assert float(got) == pytest.approx(float(infonce + 0.5 * tier), rel=1e-6)


def test_two_tier_without_designated_pairs_is_infonce() -> None:
    queries, candidates = _unit(5, seed=5), _unit(5, seed=6)
    none = torch.zeros(5, 5, dtype=torch.bool)
    assert float(two_tier_margin_loss(queries, candidates, 0.1, none, margin=0.5)) == \
        pytest.approx(float(info_nce_loss(queries, candidates, 0.1)), rel=1e-6)
    assert float(two_tier_loss(queries, candidates, none, temperature=0.1)) == \
        pytest.approx(float(info_nce_loss(queries, candidates, 0.1)), rel=1e-6)


# ----------------------------------------------------------------------------- NearID Eq. 1-3

def _nearid_by_the_paper(anchors, positives, lookalikes_of, alpha, tau):
    """NearID Eq. 1-3 written out per anchor in float64: anchors a_i, the global positive pool
    p_j, anchor i's own look-alikes r_ik (separate vectors, seen by anchor i only)."""
    a, p = anchors.double(), positives.double()
    disc, rank = [], []
    for i in range(len(a)):
        pool = [float(a[i] @ p[j]) / tau for j in range(len(p))]
        own = [float(a[i] @ r.double()) / tau for r in lookalikes_of[i]]
        disc.append(-(pool[i] - math.log(sum(math.exp(x) for x in pool + own))))
        if own:
            lse = math.log(sum(math.exp(x) for j, x in enumerate(pool) if j != i))
            rank.append(sum(math.log1p(math.exp(lse - x)) for x in own) / len(own))
    return sum(disc) / len(disc) + alpha * (sum(rank) / len(rank) if rank else 0.0)


@pytest.mark.parametrize("seed", range(5))
def test_two_tier_is_nearid_eq_1_to_3_on_random_logits(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    n, dim = 7, 5
    anchors = F.normalize(torch.randn(n, dim, generator=generator), dim=-1)
    positives = F.normalize(torch.randn(n, dim, generator=generator), dim=-1)
    counts = [int(c) for c in torch.randint(0, 4, (n,), generator=generator)]
    counts[0] = max(counts[0], 1)
    lookalikes_of = [F.normalize(torch.randn(c, dim, generator=generator), dim=-1) for c in counts]
    # our layout: the pool, then every anchor's look-alikes as extra columns marked as its own
    candidates = torch.cat([positives, *lookalikes_of])
    own = torch.zeros(n, len(candidates), dtype=torch.bool)
    column = n
    for i, c in enumerate(counts):
        own[i, column:column + c] = True
        column += c
    for alpha, tau in ((0.5, 0.07), (1.3, 0.2)):
        expected = _nearid_by_the_paper(anchors, positives, lookalikes_of, alpha, tau)
        got = two_tier_loss(anchors, candidates, own, alpha=alpha, temperature=tau)
        assert float(got) == pytest.approx(expected, abs=1e-6, rel=1e-6)


def test_two_tier_in_batch_lookalikes_rank_above_generic_negatives() -> None:
    """Scheduled batches: a look-alike is a batch member (its row's positive); it is counted once
    in the anchor's denominator and left out of LSE_i, the generic negatives."""
    queries, candidates = _unit(8, seed=21), _unit(8, seed=22)
    designated = designated_negatives(ROLES, SLOTS)
    tau, alpha = 0.07, 0.5
    s = (queries.double() @ candidates.double().T) / tau
    disc = float(torch.nn.functional.cross_entropy(s, torch.arange(8)))
    ranks = []
    for i in range(8):
        own = designated[i].nonzero().flatten().tolist()
        if own:
            generic = [j for j in range(8) if j != i and j not in own]
            lse = float(torch.logsumexp(s[i, generic], 0))
            ranks.append(sum(math.log1p(math.exp(lse - float(s[i, k]))) for k in own) / len(own))
    expected = disc + alpha * sum(ranks) / len(ranks)
    assert float(two_tier_loss(queries, candidates, designated)) == pytest.approx(expected, abs=1e-6)


def test_margin_tier_is_zero_when_the_positive_wins_by_the_margin() -> None:
    candidates = torch.eye(4)
    queries = candidates.clone()  # s_ii = 1, s_ij = 0
    designated = designated_negatives(["anchor", "hard_negative", "anchor", "hard_negative"], [0, 0, 0, 0])
    assert float(designated_margin_loss(queries, candidates, designated, 0.5)) == 0.0
    assert float(designated_margin_loss(queries, candidates, designated, 1.5)) == pytest.approx(0.5)


def _hinge_by_hand(queries, candidates, negatives_of, margin):
    losses = []
    for i, negatives in enumerate(negatives_of):
        if not negatives:
            continue
        d_pos = 1 - float(queries[i] @ candidates[i])
        losses.append(sum(max(0.0, d_pos - (1 - float(queries[i] @ candidates[j])) + margin)
                          for j in negatives) / len(negatives))
    return sum(losses) / len(losses)


def test_triplet_hinge_uses_designated_negatives_else_in_batch_ones() -> None:
    queries, candidates = _unit(8, seed=7), _unit(8, seed=8)
    designated = designated_negatives(ROLES, SLOTS)
    identities = torch.tensor([0, 1, 2, 3, 4, 5, 6, 3])  # row 7 shares row 3's identity
    negatives_of = []
    for i in range(8):
        mine = designated[i].nonzero().flatten().tolist()
        if not mine:
            mine = [j for j in range(8) if j != i and identities[j] != identities[i]]
        negatives_of.append(mine)
    assert 7 not in negatives_of[3] and 3 not in negatives_of[7]
    got = triplet_hinge_loss(queries, candidates, designated, identities, margin=0.2)
    assert float(got) == pytest.approx(_hinge_by_hand(queries, candidates, negatives_of, 0.2), rel=1e-6)


def test_triplet_hinge_without_designated_is_batch_all() -> None:
    queries, candidates = _unit(6, seed=9), _unit(6, seed=10)
    negatives_of = [[j for j in range(6) if j != i] for i in range(6)]
    assert float(triplet_hinge_loss(queries, candidates, margin=0.1)) == \
        pytest.approx(_hinge_by_hand(queries, candidates, negatives_of, 0.1), rel=1e-6)


def test_extra_candidates_are_in_batch_negatives_never_designated() -> None:
    queries, candidates = _unit(4, seed=11), _unit(6, seed=12)
    designated = designated_negatives(["anchor", "hard_negative", "anchor", "anchor"], [0, 0, 0, 0])
    negatives_of = [[1], [0], [0, 1, 3, 4, 5], [0, 1, 2, 4, 5]]
    got = triplet_hinge_loss(queries, candidates, designated, margin=0.3)
    assert float(got) == pytest.approx(_hinge_by_hand(queries, candidates, negatives_of, 0.3), rel=1e-6)
    tier = designated_margin_loss(queries, candidates, designated, 0.3)
    assert float(tier) == pytest.approx(float(designated_margin_loss(queries, candidates[:4], designated, 0.3)))


def test_objective_dispatches_each_kind_and_honours_the_identity_mask() -> None:
    queries, candidates = _unit(8, seed=13), _unit(8, seed=14)
    identities = torch.tensor([0, 1, 2, 3, 4, 5, 6, 3])
    labels = BatchLabels(identities, designated_negatives(ROLES, SLOTS))
    tau = Temperature(0.1, learnable=False)
    expected = {
        "infonce": info_nce_loss(queries, candidates, 0.1, identities),
        # NearID's fixed tau is the trainer's Temperature (loss.two_tier.temperature): the one tau
        "two_tier": two_tier_loss(queries, candidates, labels.designated, identities, alpha=0.5, temperature=0.1),
        "two_tier_margin": two_tier_margin_loss(queries, candidates, 0.1, labels.designated, identities,
                                                weight=2.0, margin=0.3),
        "triplet_hinge": triplet_hinge_loss(queries, candidates, labels.designated, identities, margin=0.3),
    }
    assert set(expected) == set(LOSS_KINDS)
    for kind, reference in expected.items():
        # the recipe's loss section, passed whole: each kind reads its own sub-section
        section = {"kind": kind, "two_tier_margin": {"weight": 2.0, "margin": 0.3}, "triplet_hinge": {"margin": 0.3}}
        objective = build_objective(LossConfig(**section), tau)
        assert float(objective(queries, candidates, labels)) == pytest.approx(float(reference), rel=1e-6), kind
        unmasked = build_objective(LossConfig(**section, identity_mask=False), tau)
        # rows 3 and 7 share an identity: dropping the mask changes every kind's value
        assert float(unmasked(queries, candidates, labels)) != pytest.approx(float(reference), rel=1e-6), kind
    assert LOSS_KINDS == typing.get_args(LossConfig.model_fields["kind"].annotation)  # one vocabulary
    with pytest.raises(SettingsError, match="kind"):  # refused where the section is built
        LossConfig(kind="cosent")


# ----------------------------------------------------------------------------- GradCache

BATCH = 8


def _one_step(kind: str, chunk_size: int, learnable_tau: bool = True):
    torch.manual_seed(0)
    model = StandInEncoder()
    tau = Temperature(0.05, learnable=learnable_tau)
    backend = TorchBackend(model, optimizer=OptimizerConfig(lr=1e-3, max_grad_norm=0.0), lr_schedule=lr_lambda(0, 10))
    # a large margin keeps every hinge active, so each pair contributes gradient
    # two_tier reads the trainer's temperature (learnable here), so its gradient is compared too
    objective = build_objective(LossConfig(kind=kind, two_tier_margin={"margin": 2.0}, triplet_hinge={"margin": 2.0}),
                                tau)
    labels = BatchLabels(torch.arange(BATCH), designated_negatives(ROLES, SLOTS))
    queries, candidates = random_members(BATCH, 1), random_members(BATCH, 2)
    result = contrastive_step(backend, model.collate, queries, candidates,
                              lambda q, c: objective(q, c, labels),
                              gradcache=GradCacheConfig(chunk_size=chunk_size, max_padding=1.0),
                              query_lengths=[x.length for x in queries],
                              candidate_lengths=[x.length for x in candidates])
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    tau_grad = tau.log_tau.grad
    return result, grads, None if tau_grad is None else tau_grad.clone()


@pytest.mark.parametrize("kind", ["two_tier", "two_tier_margin", "triplet_hinge"])
@pytest.mark.parametrize("chunk_size", [1, 3, BATCH])
def test_gradcache_gradients_equal_plain_back_propagation(kind: str, chunk_size: int) -> None:
    plain, plain_grads, plain_tau = _one_step(kind, 0)
    cached, cached_grads, cached_tau = _one_step(kind, chunk_size)
    assert math.isfinite(plain.loss) and plain.loss > 0
    assert cached.loss == pytest.approx(plain.loss, rel=1e-6)
    for name, reference in plain_grads.items():
        assert float(reference.norm()) > 0, name
        assert float((cached_grads[name] - reference).norm() / reference.norm()) <= 1e-4, name
    if kind in ("two_tier", "two_tier_margin"):
        assert float(cached_tau) == pytest.approx(float(plain_tau), rel=1e-4)
    else:  # the hinge has no temperature: tau gets no gradient on either path
        assert plain_tau is None and cached_tau is None
