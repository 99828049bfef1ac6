"""The learning-rate factor of a step: linear warm-up, then cosine | linear | constant decay.

Why not ``transformers.get_scheduler``: its warm-up factor at step ``s`` is ``s / W``, so the
first optimiser step of a warm-up runs at learning rate 0 (a wasted step; with the tiny
recipes' ``warmup_steps: 1`` the whole first step).  Ours is ``(s + 1) / W``: the warm-up
reaches the peak at step ``W - 1``.  After the warm-up both are the same curve
(``tests/test_train_setup.py`` checks both statements against transformers), and
switching would change every trained figure, so this stays written out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vis_embed.training.recipe import OptimizerConfig


def lr_schedule_of(optimizer: OptimizerConfig, total_steps: int) -> Callable[[int], float]:
    """:func:`lr_lambda` of the recipe's ``optimizer:`` section (warm-up, decay, floor) over
    ``total_steps`` (the recipe's max_steps)."""
    return lr_lambda(optimizer.warmup_steps, total_steps, optimizer.decay, optimizer.min_lr_ratio)


def lr_lambda(warmup_steps: int, total_steps: int, decay: str = "cosine",
              min_ratio: float = 0.0) -> Callable[[int], float]:
    """Step (0-based) -> multiplier of the peak LR, for ``torch.optim.lr_scheduler.LambdaLR``.

    ``min_ratio`` is the floor the cosine and linear decays end at (ignored by ``constant``).
    """

    def factor(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return (step + 1) / warmup_steps
        if decay == "constant" or total_steps <= warmup_steps:
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        if decay == "linear":
            shape = 1.0 - progress
        else:
            shape = 0.5 * (1.0 + math.cos(math.pi * progress))
        return min_ratio + (1.0 - min_ratio) * shape

    return factor


def resumed_decay_note(optimizer: OptimizerConfig, previous_steps: int | None, total_steps: int) -> str | None:
    """What resuming with another max_steps does to the LR (None: nothing).

    max_steps may change on resume (recipe.RESUME_MAY_CHANGE), but a cosine or linear decay is
    spread over it: the resumed step keeps the LR its checkpoint saved (the optimiser's state) and
    the later ones follow the decay over the new length, so the run is neither the first one
    continued nor a fresh run of the new length.  A constant LR is the same curve at any length.
    """
    if previous_steps is None or previous_steps == total_steps or optimizer.decay == "constant":
        return None
    return (f"max_steps changed from {previous_steps} to {total_steps}: the {optimizer.decay} LR decay of the "
            f"steps still to come follows the new length, so this run is neither the {previous_steps}-step run "
            f"continued nor a fresh {total_steps}-step one")
