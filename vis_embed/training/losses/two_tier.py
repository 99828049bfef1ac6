r"""Two-tier loss of NearID (Sec. 3.2, Eq. 1-3): discrimination plus a ranking tier that puts
an anchor's own look-alikes *above* generic negatives.

With L2-normalised anchors (queries) :math:`a_i`, candidates :math:`c_j`, logits
:math:`l_{ij} = a_i^\top c_j / \tau` (``tau`` fixed, default 0.07), the global positive pool
:math:`P = \{c_1, \dots, c_N\}` (column i is anchor i's positive) and :math:`R_i` anchor i's
look-alikes (designated near-identity negatives :math:`r_{ik}`):

.. math::

    \mathcal{L} = \mathcal{L}_{\text{disc}} + \alpha\, \mathcal{L}_{\text{rank}}
    \qquad (\alpha = 0.5)

    \mathcal{L}_{\text{disc}} = -\frac{1}{N} \sum_i \log
        \frac{\exp l_{ii}}{\sum_{j \in P} \exp l_{ij} + \sum_{k \in R_i} \exp l(a_i, r_{ik})}

    \mathcal{L}_{\text{rank}} = \operatorname{mean}_{i:\,R_i \neq \emptyset}\;
        \operatorname{mean}_{k \in R_i} \operatorname{softplus}\bigl(\mathrm{LSE}_i - l(a_i, r_{ik})\bigr),
    \qquad \mathrm{LSE}_i = \log \sum_{j \in G_i} \exp l_{ij}

:math:`G_i` are the anchor's generic batch negatives: every candidate column except its
positive and its look-alikes.  Other positive views stay in the denominator of
:math:`\mathcal{L}_{\text{disc}}` (no margin anywhere): the first tier separates identities,
the second asks each look-alike to score above the soft maximum of the generic negatives --
look-alikes must rank between the positive and everything else.

Columns, as this project lays out a batch: the first N are the positive pool; extra columns
after them (a pairs row's explicit negatives, or look-alikes given as separate vectors) are
in every anchor's denominator unless ``lookalikes`` marks them as some anchors' look-alikes,
in which case they are in only those anchors' denominators (NearID: an anchor sees its own
look-alikes, not another anchor's).  A look-alike that is a positive-pool column (the
scheduler's hard-negative rows, :func:`~vis_embed.training.losses.designated.designated_negatives`)
is counted once, as the pool member it is.  ``labels`` (``loss.identity_mask``) removes
same-identity duplicates (j != i) from every sum; the identity-aware scheduler never puts two
members of one identity in a batch, so on its batches the mask changes nothing and the loss is
Eq. 1-3 exactly (``identity_mask: false`` makes it literal on any batch).

When to use: identity data whose failure mode is near-duplicates of *other* identities and a
schedule with designated hard negatives (``sampling.hard_negatives > 0``); without look-alikes
the ranking tier is 0 and the loss is InfoNCE at ``tau``.  Recipe: ``loss: {kind: two_tier,
two_tier: {alpha: 0.5, temperature: 0.07}}`` (``temperature: null`` uses the recipe's
``temperature:`` section, learnable or not).  The margin variant this name meant earlier is
``two_tier_margin`` (:mod:`~vis_embed.training.losses.two_tier_margin`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from vis_embed.training.losses.designated import pad_columns
from vis_embed.training.losses.infonce import false_negative_mask

NEARID_ALPHA = 0.5
NEARID_TEMPERATURE = 0.07


def two_tier_loss(query_embeddings: Tensor, candidate_embeddings: Tensor, lookalikes: Tensor | None,
                  labels: Tensor | None = None, *, alpha: float = NEARID_ALPHA,
                  temperature: Tensor | float = NEARID_TEMPERATURE) -> Tensor:
    """NearID's L = L_disc + alpha * L_rank (module docstring), computed in float32.

    ``lookalikes``: (N, N) over the positive pool or (N, C) over every candidate column, True
    where the column is a look-alike of anchor i (None or all False: no ranking tier).
    """
    rows, columns = query_embeddings.shape[0], candidate_embeddings.shape[0]
    if rows > columns or query_embeddings.shape[1:] != candidate_embeddings.shape[1:]:
        raise ValueError(f"queries {tuple(query_embeddings.shape)} and candidates "
                         f"{tuple(candidate_embeddings.shape)}: need one candidate per query (+ extras) "
                         f"of the same width")
    logits = query_embeddings.float() @ candidate_embeddings.float().T / temperature
    device = logits.device
    own = torch.zeros(rows, columns, dtype=torch.bool, device=device) if lookalikes is None \
        else pad_columns(lookalikes.to(device).bool(), columns)
    own = own & ~torch.eye(rows, columns, dtype=torch.bool, device=device)  # a positive is never a look-alike
    # an extra column that is someone's look-alike belongs to its anchors' denominators only
    extra = torch.arange(columns, device=device) >= rows
    foreign = (extra & own.any(dim=0))[None, :] & ~own
    excluded = foreign if labels is None else false_negative_mask(labels.to(device), columns) | foreign
    disc_logits = logits.masked_fill(excluded, float("-inf"))
    first_tier = F.cross_entropy(disc_logits, torch.arange(rows, device=device))
    has_lookalikes = own.any(dim=1)
    if alpha == 0 or not bool(has_lookalikes.any()):
        return first_tier + logits.sum() * 0.0  # part of the graph either way (GradCache)
    generic = ~(excluded | own | torch.eye(rows, columns, dtype=torch.bool, device=device))
    # an anchor with no generic negative has LSE = -inf, softplus(-inf) = 0: its terms are 0
    # (computed on a finite stand-in so no NaN gradient flows back)
    no_generic = ~generic.any(dim=1, keepdim=True)
    lse = torch.logsumexp(logits.masked_fill(~generic, float("-inf")).masked_fill(no_generic, 0.0),
                          dim=1, keepdim=True)
    per_pair = F.softplus(lse - logits).masked_fill(~own | no_generic, 0.0)
    per_anchor = per_pair.sum(dim=1)[has_lookalikes] / own.sum(dim=1)[has_lookalikes]
    return first_tier + alpha * per_anchor.mean()


__all__ = ["NEARID_ALPHA", "NEARID_TEMPERATURE", "two_tier_loss"]
