"""The training objective a recipe's ``loss:`` section names, as one callable per step.

The trainer builds it once from the recipe's ``loss:`` section, passed whole
(:func:`build_objective`), and calls it with the global batch's
embeddings and :class:`BatchLabels` (what the schedule says about the rows); GradCache only
sees ``(queries, candidates) -> loss``, so every kind works with it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from vis_embed.training.losses.infonce import info_nce_loss
from vis_embed.training.losses.triplet_hinge import triplet_hinge_loss
from vis_embed.training.losses.two_tier import two_tier_loss
from vis_embed.training.losses.two_tier_margin import two_tier_margin_loss
from vis_embed.training.recipe import LossConfig


@dataclass(frozen=True)
class BatchLabels:
    """Per-row facts of one global batch, in slot order.

    ``labels``: (N,) int64 loss-label codes (the schedule's ``label`` column: identity or,
    without one, the positive's content, encoded once by the data loader; -1: unknown);
    ``designated``: (N, N) bool designated-hard-negative pairs
    (:func:`~vis_embed.training.losses.designated.designated_negatives`), None when unknown.
    """

    labels: Tensor
    designated: Tensor | None = None


Objective = Callable[[Tensor, Tensor, BatchLabels], Tensor]


def build_objective(loss: LossConfig, temperature: Callable[[], Tensor]) -> Objective:
    """``(queries, candidates, labels) -> scalar loss`` for ``loss.kind`` with that kind's options
    (``loss.two_tier``, ``loss.two_tier_margin``, ``loss.triplet_hinge``, bounds checked where the
    section was built).

    ``temperature`` is called on every evaluation (a learnable tau changes between steps);
    ``two_tier`` (NearID) uses it too: the trainer's Temperature holds NearID's fixed tau
    (``loss.two_tier.temperature``), so the logged tau is the one the loss used;
    ``loss.identity_mask: false`` drops the mask of same-identity candidates (the paper's baseline).
    """
    def mask(labels: BatchLabels) -> Tensor | None:
        return labels.labels if loss.identity_mask else None

    tier, margin, hinge = loss.two_tier, loss.two_tier_margin, loss.triplet_hinge
    objectives: dict[str, Objective] = {
        "infonce": lambda q, c, labels: info_nce_loss(q, c, temperature(), mask(labels)),
        "two_tier": lambda q, c, labels: two_tier_loss(q, c, labels.designated, mask(labels), alpha=tier.alpha,
                                                       temperature=temperature()),
        "two_tier_margin": lambda q, c, labels: two_tier_margin_loss(
            q, c, temperature(), labels.designated, mask(labels), weight=margin.weight, margin=margin.margin),
        "triplet_hinge": lambda q, c, labels: triplet_hinge_loss(q, c, labels.designated, mask(labels),
                                                                 margin=hinge.margin),
    }
    return objectives[loss.kind]
