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

``fn_share / fn_query_fraction`` is the mean share among affected queries.  The trainer logs
these per step (``train_log.jsonl``, TensorBoard ``train/fn_*``); they are computed from the
gathered global-batch embeddings the loss sees, under ``torch.no_grad``, so GradCache and
distributed runs report the same numbers as a single-process run of the same batch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from vis_embed.training.losses.infonce import false_negative_mask

DIAGNOSTIC_KEYS = ("fn_share", "fn_query_fraction", "fn_logit_gap")


@torch.no_grad()
def false_negative_stats(query_embeddings: Tensor, candidate_embeddings: Tensor,
                         temperature: Tensor | float, labels: Tensor) -> dict[str, float]:
    """:data:`DIAGNOSTIC_KEYS` of one global batch (row i's positive is column i)."""
    logits = query_embeddings.detach().float() @ candidate_embeddings.detach().float().T
    logits = logits / (temperature.detach() if isinstance(temperature, Tensor) else temperature)
    false_negative = false_negative_mask(labels.to(logits.device), logits.shape[1])
    probabilities = logits.softmax(dim=1)
    share = (probabilities * false_negative).sum(dim=1)
    counts = false_negative.sum(dim=1)
    affected = counts > 0
    positive = logits.diagonal()[:, None]
    gap_sum = ((logits - positive) * false_negative).sum(dim=1)
    gap = (gap_sum[affected] / counts[affected]).mean() if bool(affected.any()) else torch.tensor(float("nan"))
    return {"fn_share": float(share.mean()), "fn_query_fraction": float(affected.float().mean()),
            "fn_logit_gap": float(gap)}
