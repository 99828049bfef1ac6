r"""Matryoshka representation learning (Kusupati et al. 2022): any loss, on nested prefixes.

With dims :math:`d_1 < \dots < d_m` (``loss.matryoshka_dims``), weights :math:`w_k`
(``loss.matryoshka_weights``, default 1 each), the full width :math:`D` and the wrapped loss
:math:`\mathcal{L}` (any ``loss.kind``):

.. math::

    \mathcal{L}_{\text{MRL}} = \sum_{k} w_k\, \mathcal{L}\bigl(\hat q^{(d_k)}, \hat c^{(d_k)}\bigr)
        \;+\; w_D\, \mathcal{L}(q, c), \qquad
    \hat x^{(d)} = \frac{x_{1:d}}{\lVert x_{1:d} \rVert}

The full width is always a term: it is the last dim when the list ends at :math:`D` (its
weight is then that dim's), else it is added with weight 1.  This is sentence-transformers'
``MatryoshkaLoss`` (which asks for the full width among its dims).  Each prefix is
renormalised, so every term sees unit vectors as the wrapped loss expects.

Why it works under GradCache and DeepSpeed unchanged: the wrapper only reads the pooled,
gathered embeddings, so it is one more ``(queries, candidates) -> loss`` for
:func:`~vis_embed.training.gradcache.contrastive_step`; d(loss)/d(embedding) of the sum is
cached and replayed like any other loss.

When to use: when galleries are large and the vectors will be stored or searched cut short
(``--dim``, the server's ``dimensions``): the first :math:`d_k` coordinates become a good
embedding themselves.  Cost: one extra loss evaluation per dim on the (N x N) score matrix,
negligible beside the encoder.  Recipe: ``loss: {kind: infonce, matryoshka_dims: [64, 128,
256]}``; the trained model records them as ``matryoshka_dims`` in ``embedding_config.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch.nn.functional as F
from torch import Tensor

from vis_embed.errors import ConfigError, DataError
from vis_embed.vectors.transforms import check_matryoshka_dims

if TYPE_CHECKING:
    from vis_embed.training.recipe import LossConfig

Objective = Callable[[Tensor, Tensor, Any], Tensor]


def matryoshka_objective(objective: Objective, dims: Sequence[int] | None,
                         weights: Sequence[float] | None = None) -> Objective:
    """``objective`` summed over the renormalised prefixes ``dims`` plus the full width (see the
    module docstring); ``objective`` itself when ``dims`` is empty or None."""
    if not dims:
        return objective
    dims = [int(d) for d in dims]
    weights = [float(w) for w in weights] if weights is not None else [1.0] * len(dims)
    if len(weights) != len(dims):
        raise ValueError(f"{len(weights)} matryoshka_weights for {len(dims)} matryoshka_dims")

    def loss(queries: Tensor, candidates: Tensor, labels: Any) -> Tensor:
        full = queries.shape[-1]
        check_matryoshka_dims(dims, full)
        total = 0.0 if dims[-1] == full else objective(queries, candidates, labels)
        for dim, weight in zip(dims, weights):
            total = total + weight * objective(prefix(queries, dim), prefix(candidates, dim), labels)
        return total

    return loss


def matryoshka_for_model(objective: Objective, loss: LossConfig, embedding_dim: int) -> Objective:
    """The trainer's objective for the recipe's ``loss`` section (``matryoshka_dims`` /
    ``matryoshka_weights``), checked against the model's width before any step runs."""
    dims = loss.matryoshka_dims
    if dims:
        try:
            check_matryoshka_dims(dims, embedding_dim, field="loss.matryoshka_dims")
        except DataError as exc:  # a recipe key: the recipe's error type
            raise ConfigError(str(exc)) from None
    return matryoshka_objective(objective, dims, loss.matryoshka_weights)


def prefix(embeddings: Tensor, dim: int) -> Tensor:
    """The first ``dim`` coordinates, renormalised (the full width: unchanged)."""
    if dim == embeddings.shape[-1]:
        return embeddings
    return F.normalize(embeddings[..., :dim], dim=-1)
