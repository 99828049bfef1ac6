"""The training objective a recipe's ``loss:`` section names, as one callable per step.

The trainer builds it once (:func:`build_objective`) and calls it with the global batch's
embeddings and :class:`BatchLabels` (what the schedule says about the rows); GradCache only
sees ``(queries, candidates) -> loss``, so every kind works with it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from vis_embed.training.losses.infonce import info_nce_loss
from vis_embed.training.losses.triplet_hinge import triplet_hinge_loss
from vis_embed.training.losses.two_tier import NEARID_ALPHA, two_tier_loss
from vis_embed.training.losses.two_tier_margin import two_tier_margin_loss

LOSS_KINDS = ("infonce", "two_tier", "two_tier_margin", "triplet_hinge")


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


def build_objective(kind: str, temperature: Callable[[], Tensor], *, identity_mask: bool = True,
                    two_tier_alpha: float = NEARID_ALPHA, two_tier_weight: float = 1.0, two_tier_margin: float = 0.1,
                    hinge_margin: float = 0.05) -> Objective:
    """``(queries, candidates, labels) -> scalar loss`` for ``kind`` (one of :data:`LOSS_KINDS`).

    ``temperature`` is called on every evaluation (a learnable tau changes between steps);
    ``two_tier`` (NearID) uses it too: the trainer's Temperature holds NearID's fixed tau
    (``loss.two_tier.temperature``), so the logged tau is the one the loss used;
    ``two_tier_weight`` / ``two_tier_margin`` are the ``two_tier_margin`` variant's;
    ``identity_mask=False`` drops the mask of same-identity candidates (the paper's baseline).
    """
    def mask(labels: BatchLabels) -> Tensor | None:
        return labels.labels if identity_mask else None

    if kind == "infonce":
        return lambda q, c, labels: info_nce_loss(q, c, temperature(), mask(labels))
    if kind == "two_tier":
        return lambda q, c, labels: two_tier_loss(q, c, labels.designated, mask(labels), alpha=two_tier_alpha,
                                                  temperature=temperature())
    if kind == "two_tier_margin":
        return lambda q, c, labels: two_tier_margin_loss(q, c, temperature(), labels.designated, mask(labels),
                                                         weight=two_tier_weight, margin=two_tier_margin)
    if kind == "triplet_hinge":
        return lambda q, c, labels: triplet_hinge_loss(q, c, labels.designated, mask(labels),
                                                       margin=hinge_margin)
    raise ValueError(f"unknown loss kind {kind!r} (known: {', '.join(LOSS_KINDS)})")
