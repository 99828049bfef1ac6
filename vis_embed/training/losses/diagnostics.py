r"""How much of each query's softmax its false negatives take: the mechanism behind the mask.

A *false negative* of query :math:`i` is an in-batch candidate :math:`j \ne i` with the same
loss label (identity, or the candidate's content for rows without one; the labels
:func:`~vis_embed.training.losses.infonce.info_nce_loss` masks on).  With logits
:math:`s_{ij} = q_i^\top c_j / \tau` over the global batch (explicit extra negatives included)
and :math:`p_{ij}` the softmax of row :math:`i` over **all** candidates (the unmasked
denominator, whether or not the run masks them out of its loss -- so a masked run shows what
it removed):

- ``fn_share``: :math:`\frac{1}{N}\sum_i \sum_{j \in F_i} p_{ij}`, the mean share of a query's
  denominator taken by its false negatives (0 for a query without any);
- ``fn_query_fraction``: share of queries with :math:`|F_i| \ge 1`;
- ``fn_logit_gap``: over queries with false negatives, the mean of
  :math:`\frac{1}{|F_i|}\sum_{j \in F_i} (s_{ij} - s_{ii})`: how far below the positive's logit
  they sit (0 = scored like the positive); ``nan`` when no query has one.

- ``fn_own_image_share``: the part of that false-negative mass, summed over the batch, that
  is the query's *own record* (candidate :math:`j \ne i` whose positive is query
  :math:`i`'s record, so its photo under the candidate prompt): the naive sampler draws slot
  :math:`j`'s positive among its identity's instances other than :math:`q_j`, so with two
  slots of one identity :math:`p_j` can be :math:`q_i`; ``nan`` without false
  negatives or without the records (``own_image``);
- ``fn_logit_gap_other``: ``fn_logit_gap`` over the false negatives that are *not* the query's
  own record (whether the own-image ones explain a gap above 0).

``fn_share / fn_query_fraction`` is the mean share among affected queries.  The trainer logs
these per step (``train_log.jsonl``, TensorBoard ``train/fn_*``); they are computed from the
gathered global-batch embeddings the loss sees, under ``torch.no_grad``, so GradCache and
distributed runs report the same numbers as a single-process run of the same batch.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from vis_embed.training.losses.designated import pad_columns
from vis_embed.training.losses.infonce import false_negative_mask

DIAGNOSTIC_KEYS = ("fn_share", "fn_query_fraction", "fn_logit_gap", "fn_own_image_share", "fn_logit_gap_other")


def own_image_matrix(query_records: Sequence[Hashable], positive_records: Sequence[Hashable]) -> Tensor:
    """``(N, N)`` bool: candidate ``j``'s positive is query ``i``'s own record (``j != i``).

    Records are any hashable keys, e.g. ``(dataset, record id)`` of each member's query and
    positive, in the batch's member order."""
    codes: dict[Hashable, int] = {}
    queries = torch.tensor([codes.setdefault(key, len(codes)) for key in query_records], dtype=torch.long)
    positives = torch.tensor([codes.setdefault(key, len(codes)) for key in positive_records], dtype=torch.long)
    own = queries[:, None] == positives[None, :]
    own.fill_diagonal_(False)
    return own


def _mean_gap(gaps: Tensor, mask: Tensor) -> Tensor:
    """Per query the mean of ``gaps`` over ``mask``, averaged over the queries with any."""
    counts = mask.sum(dim=1)
    some = counts > 0
    if not bool(some.any()):
        return torch.tensor(float("nan"))
    return ((gaps * mask).sum(dim=1)[some] / counts[some]).mean()


@torch.no_grad()
def false_negative_stats(query_embeddings: Tensor, candidate_embeddings: Tensor,
                         temperature: Tensor | float, labels: Tensor,
                         own_image: Tensor | None = None) -> dict[str, float]:
    """:data:`DIAGNOSTIC_KEYS` of one global batch (row i's positive is column i; ``own_image``:
    :func:`own_image_matrix` of the batch, None when the records are unknown)."""
    logits = query_embeddings.detach().float() @ candidate_embeddings.detach().float().T
    logits = logits / (temperature.detach() if isinstance(temperature, Tensor) else temperature)
    false_negative = false_negative_mask(labels.to(logits.device), logits.shape[1])
    probabilities = logits.softmax(dim=1)
    mass = probabilities * false_negative
    share = mass.sum(dim=1)
    affected = false_negative.sum(dim=1) > 0
    gaps = logits - logits.diagonal()[:, None]
    own = pad_columns(own_image.to(logits.device), logits.shape[1]) & false_negative.bool() \
        if own_image is not None else None
    total = mass.sum()
    own_share = float((mass * own).sum() / total) if own is not None and float(total) > 0 else float("nan")
    other = false_negative.bool() & ~own if own is not None else false_negative.bool()
    return {"fn_share": float(share.mean()), "fn_query_fraction": float(affected.float().mean()),
            "fn_logit_gap": float(_mean_gap(gaps, false_negative)), "fn_own_image_share": own_share,
            "fn_logit_gap_other": float(_mean_gap(gaps, other)) if own is not None else float("nan")}
