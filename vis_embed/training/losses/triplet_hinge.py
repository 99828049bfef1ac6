r"""Triplet hinge loss on cosine distances (DreamSim-style).

With L2-normalised embeddings, cosine distance :math:`d(a, x) = 1 - a^\top x`, anchor
:math:`q_i`, positive :math:`c_i` and the negatives :math:`\mathcal{N}_i` of row i:

.. math::

    \ell_i = \frac{1}{|\mathcal{N}_i|} \sum_{j \in \mathcal{N}_i}
        \max\bigl(0,\; d(q_i, c_i) - d(q_i, c_j) + m\bigr), \qquad
    \mathcal{L} = \frac{1}{|\{i : \mathcal{N}_i \ne \emptyset\}|} \sum_{i : \mathcal{N}_i \ne \emptyset} \ell_i

:math:`\mathcal{N}_i` is row i's *designated* hard negatives
(:func:`~vis_embed.training.losses.designated.designated_negatives`) when it has any, else
every other candidate of the global batch ("batch-all" triplets), minus those sharing row
i's loss label when ``labels`` is given (InfoNCE's mask: infonce.false_negative_mask).  Each anchor weighs
the same whatever its number of negatives.  No temperature: only the ordering of distances and
the margin ``m`` matter, so a fixed or learnable tau is left untouched.

When to use: when the target is a *ranking* judgement (which of two is closer, the 2AFC of
DreamSim/NIGHTS) rather than retrieval among many candidates; with designated look-alikes it
trains exactly those decisions.  It ignores how far beyond the margin a negative is, so it
learns retrieval more slowly than InfoNCE.  Recipe: ``loss: {kind: triplet_hinge,
triplet_hinge: {margin: 0.05}}``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from vis_embed.training.losses.designated import pad_columns
from vis_embed.training.losses.infonce import false_negative_mask


def _negatives(rows: int, columns: int, designated: Tensor | None, labels: Tensor | None,
               device: torch.device) -> Tensor:
    """(rows, columns) bool: each row's designated negatives, or its in-batch ones when it has none."""
    in_batch = torch.ones(rows, columns, dtype=torch.bool, device=device)
    in_batch[:, :rows].fill_diagonal_(False)
    if labels is not None:
        in_batch &= ~false_negative_mask(labels.to(device), columns)
    if designated is None:
        return in_batch
    chosen = pad_columns(designated.to(device), columns)
    has_designated = chosen.any(dim=1, keepdim=True)
    return torch.where(has_designated, chosen, in_batch)


def triplet_hinge_loss(query_embeddings: Tensor, candidate_embeddings: Tensor,
                       designated: Tensor | None = None, labels: Tensor | None = None, *,
                       margin: float = 0.05) -> Tensor:
    """Mean triplet hinge of N anchors (row i's positive is candidate i); float32.

    ``candidate_embeddings`` may have more rows than the queries (extra negatives after the N
    positives: in-batch negatives for every row, never designated).
    """
    queries, candidates = query_embeddings.float(), candidate_embeddings.float()
    if queries.shape[0] > candidates.shape[0] or queries.shape[1:] != candidates.shape[1:]:
        raise ValueError(f"queries {tuple(queries.shape)} need at least as many candidates of the same "
                         f"width, got {tuple(candidates.shape)}")
    similarity = queries @ candidates.T
    positive_distance = 1.0 - similarity.diagonal()[:, None]
    negative_distance = 1.0 - similarity
    hinge = F.relu(positive_distance - negative_distance + margin)
    negatives = _negatives(*similarity.shape, designated, labels, similarity.device)
    counts = negatives.sum(dim=1)
    per_anchor = (hinge * negatives).sum(dim=1) / counts.clamp(min=1)
    anchors = counts > 0
    if not bool(anchors.any()):
        return similarity.sum() * 0.0  # nothing to rank (one member); zero, still in the graph
    return per_anchor[anchors].mean()
