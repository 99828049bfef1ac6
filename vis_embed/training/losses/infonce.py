r"""InfoNCE over the global batch with a (learnable) temperature -- VisME Eq. 4-5.

For a global batch of N (query, candidate) pairs with L2-normalised embeddings
:math:`q_i, c_j` and temperature :math:`\tau`:

.. math::

    s_{ij} = \frac{q_i^\top c_j}{\tau}, \qquad
    \mathcal{L} = -\frac{1}{N}\sum_{i=1}^{N}
        \log \frac{\exp s_{ii}}{\sum_{j \in \mathcal{C}_i} \exp s_{ij}}

The positive of query *i* is its own candidate *i*; every other candidate of the global batch
is a negative -- including the scheduled hard negatives, which are ordinary members of the
batch.  :math:`\mathcal{C}_i` is all candidates except those that share query *i*'s visual
identity without being its positive: the scheduler already keeps one identity per batch
(hard negatives are other identities), so the mask is a safety net that stops a duplicate
identity from being pushed apart from itself.

When to use: always for VisME training.  ``tau`` is learnable by default (initialised at
0.02, the paper's setting); on a randomly initialised backbone a small learnable tau
collapses all embeddings within a few steps, so tiny/from-scratch recipes fix it (e.g. 0.07)
or freeze it for the first steps (``Temperature(freeze_steps=...)``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vis_embed.training.losses.designated import pad_columns

if TYPE_CHECKING:
    from vis_embed.training.recipe import LossConfig, TemperatureConfig


def false_negative_mask(labels: Tensor, columns: int | None = None) -> Tensor:
    """(N, columns) bool: candidate j is a false negative of query i -- the same loss label
    (>= 0), j != i; columns past the N positives (explicit negatives) are never masked.
    The one same-label rule: every loss (infonce, two_tier, two_tier_margin, triplet_hinge)
    and the diagnostics (diagnostics.py) call it."""
    same = (labels[:, None] == labels[None, :]) & (labels[:, None] >= 0)
    same.fill_diagonal_(False)
    return same if columns is None else pad_columns(same, columns)


def info_nce_loss(query_embeddings: Tensor, candidate_embeddings: Tensor, temperature: Tensor | float,
                  labels: Tensor | None = None) -> Tensor:
    """Mean InfoNCE of ``N`` queries against ``N`` candidates (row i's positive is column i).

    ``labels`` (N,) int64 loss-label codes (the trainer's: the schedule's ``label`` column, computed
    once when the training data is loaded): candidates j != i with ``labels[j] == labels[i] >= 0``
    are masked out of query i's denominator.  ``candidate_embeddings`` may have more rows than
    the queries: extra candidates after the N positives (explicit negatives), in every
    query's denominator and never masked.  Computed in float32 whatever the input dtype.
    """
    if query_embeddings.shape[0] > candidate_embeddings.shape[0] \
            or query_embeddings.shape[1:] != candidate_embeddings.shape[1:]:
        raise ValueError(f"queries {tuple(query_embeddings.shape)} and candidates "
                         f"{tuple(candidate_embeddings.shape)}: need one candidate per query (+ extras) "
                         f"of the same width")
    scores = query_embeddings.float() @ candidate_embeddings.float().T / temperature
    if labels is not None:
        scores = scores.masked_fill(false_negative_mask(labels.to(scores.device), scores.shape[1]), float("-inf"))
    targets = torch.arange(scores.shape[0], device=scores.device)
    return F.cross_entropy(scores, targets)


class Temperature(nn.Module):
    """The softmax temperature tau, stored as ``log tau`` so it stays positive.

    ``learnable=False`` fixes tau; ``freeze_steps`` keeps a learnable tau fixed during the
    first steps (the trainer calls :meth:`set_step`) so a random model can leave the collapsed
    state before tau starts to shrink; ``min_value`` clamps tau from below (like CLIP's
    logit-scale clamp at 100) so it cannot run away to 0; at the floor it can still rise
    (the forward's clamp passes the gradient; :meth:`keep_in_range` after each optimiser step).
    """

    def __init__(self, init: float = 0.02, learnable: bool = True, freeze_steps: int = 0,
                 min_value: float = 0.005) -> None:
        super().__init__()
        if init <= 0:
            raise ValueError(f"temperature init must be > 0, got {init}")
        self.log_tau = nn.Parameter(torch.tensor(math.log(init), dtype=torch.float32),
                                    requires_grad=learnable)
        self.learnable = learnable
        self.freeze_steps = freeze_steps
        self.min_value = min_value
        self._frozen_now = freeze_steps > 0

    @classmethod
    def from_config(cls, config: TemperatureConfig, loss: LossConfig | None = None) -> Temperature:
        """The recipe's ``temperature:`` section, or the one ``loss`` trains with
        (:meth:`~vis_embed.training.recipe.LossConfig.training_temperature`: two_tier's fixed tau)."""
        config = config if loss is None else loss.training_temperature(config)
        return cls(config.init, config.learnable, config.freeze_steps, config.min)

    def set_step(self, step: int) -> None:
        """Called by the trainer before each step (0-based): handles ``freeze_steps``."""
        self._frozen_now = step < self.freeze_steps

    def forward(self) -> Tensor:
        # The value clamped, its gradient not: clamp's gradient is 0 at and below the floor (even
        # at equality), so a tau that reached min_value could never rise again.
        floor = math.log(self.min_value)
        log_tau = self.log_tau + (self.log_tau.clamp(min=floor) - self.log_tau).detach()
        if not self.learnable or self._frozen_now:
            log_tau = log_tau.detach()
        return log_tau.exp()

    def keep_in_range(self) -> None:
        """After an optimiser step: the parameter itself back at the floor (CLIP clamps its logit
        scale the same way), so momentum cannot carry it far below, from where it would take as
        many steps to climb back as it went down."""
        with torch.no_grad():
            self.log_tau.clamp_(min=math.log(self.min_value))

    @property
    def value(self) -> float:
        return float(self.log_tau.detach().exp().clamp(min=self.min_value))
