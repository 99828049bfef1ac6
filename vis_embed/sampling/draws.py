"""Sampling primitives of the scheduler: capped expectations and systematic sampling."""

from __future__ import annotations

import numpy as np


def capped_inclusion(weights: np.ndarray, total: float, cap: float = 1.0) -> np.ndarray:
    """Expected counts ``e_i = min(cap, λ w_i)`` with ``sum(e) = total`` (water filling)."""
    weights = np.asarray(weights, dtype=np.float64)
    positive = weights > 0
    if total > cap * positive.sum() + 1e-9:
        raise ValueError(f"cannot place {total} draws on {positive.sum()} items with cap {cap}")
    capped = np.zeros_like(positive)
    while True:
        free = positive & ~capped
        remaining = total - cap * capped.sum()
        if not free.any() or remaining <= 1e-12:
            scale = 0.0
            break
        scale = remaining / weights[free].sum()
        newly = free & (scale * weights >= cap)
        if not newly.any():
            break
        capped |= newly
    expected = np.where(capped, cap, scale * weights * (positive & ~capped))
    return expected


def systematic_sample(expected: np.ndarray, num_draws: int, rng: np.random.Generator) -> np.ndarray:
    """Indices drawn by systematic sampling over ``expected`` (in the given order).

    Item ``i`` is drawn ``floor(e_i)`` or ``ceil(e_i)`` times, ``e_i`` times in expectation.
    """
    cumulative = np.cumsum(expected)
    points = rng.random() + np.arange(num_draws)
    return np.minimum(np.searchsorted(cumulative, points, side="right"), len(expected) - 1)


def segment_arange(lengths: np.ndarray) -> np.ndarray:
    """``[0..l0-1, 0..l1-1, ...]`` for the given lengths."""
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)


