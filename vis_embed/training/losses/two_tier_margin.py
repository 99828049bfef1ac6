r"""Two-tier margin loss: InfoNCE plus a margin tier over designated near-identity distractors.

This is NOT NearID's objective (that is :mod:`~vis_embed.training.losses.two_tier`, ``loss.kind:
two_tier``): it is the project's earlier variant, which ``two_tier`` named until it became
NearID's loss, kept as ``loss.kind: two_tier_margin`` because the earlier figures of the
objectives comparison were made with it.

With L2-normalised query and candidate embeddings :math:`q_i, c_j`, cosine similarities
:math:`s_{ij} = q_i^\top c_j` and :math:`\mathcal{D}_i` the designated hard negatives of row i
(:func:`~vis_embed.training.losses.designated.designated_negatives`):

.. math::

    \mathcal{L} = \mathcal{L}_{\text{InfoNCE}}
        + w \cdot \frac{1}{|\mathcal{P}|} \sum_{(i, j) \in \mathcal{P}}
          \max\bigl(0,\; m - (s_{ii} - s_{ij})\bigr),
    \qquad \mathcal{P} = \{(i, j) : j \in \mathcal{D}_i\}

Tier 1 (InfoNCE, :mod:`~vis_embed.training.losses.infonce`, identity mask included) separates
identities over the whole batch; tier 2 asks the positive to beat every *designated* look-alike
by at least the cosine margin ``m`` -- a look-alike usually sits among the highest in-batch
scores, where the softmax already pushes, but InfoNCE stops pushing once it is merely below
the positive; the margin keeps a gap.  A batch without designated pairs (a naive schedule,
``hard_negatives: 0``) gets tier 1 only.

When to use: to reproduce the figures made with the earlier variant; for NearID use ``two_tier``.
Recipe: ``loss: {kind: two_tier_margin, two_tier_margin: {weight: 1.0, margin: 0.1}}``.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from vis_embed.training.losses.designated import pad_columns
from vis_embed.training.losses.infonce import info_nce_loss


def designated_margin_loss(query_embeddings: Tensor, candidate_embeddings: Tensor, designated: Tensor,
                           margin: float) -> Tensor:
    """Tier 2 alone: mean ``max(0, margin - (s_ii - s_ij))`` over designated pairs (i, j); 0 when none.

    ``candidate_embeddings`` may have more rows than the queries (extra negatives after the N
    positives); ``designated`` is (N, N) over the positives.
    """
    scores = query_embeddings.float() @ candidate_embeddings.float().T
    positives = scores.diagonal()[:, None]
    pairs = pad_columns(designated.to(scores.device), scores.shape[1])
    if not bool(pairs.any()):
        return scores.sum() * 0.0  # zero, but part of the graph (GradCache expects a gradient)
    return F.relu(margin - (positives - scores))[pairs].mean()


def two_tier_margin_loss(query_embeddings: Tensor, candidate_embeddings: Tensor, temperature: Tensor | float,
                  designated: Tensor | None, labels: Tensor | None = None, *,
                  weight: float = 1.0, margin: float = 0.1) -> Tensor:
    """InfoNCE (``labels`` masks duplicates as in :func:`info_nce_loss`) + ``weight`` x tier 2."""
    first_tier = info_nce_loss(query_embeddings, candidate_embeddings, temperature, labels)
    if designated is None or weight == 0:
        return first_tier
    second_tier = designated_margin_loss(query_embeddings, candidate_embeddings, designated, margin)
    return first_tier + weight * second_tier.to(first_tier.dtype)


__all__ = ["designated_margin_loss", "two_tier_margin_loss"]
