"""Sampling primitives of the scheduler: capped expectations and systematic sampling."""

from __future__ import annotations

import numpy as np


def dataset_shares(weights: np.ndarray, sizes: np.ndarray, exponent: float) -> np.ndarray:
    """Each dataset's share of slots, ``weight × size ** exponent`` (unnormalised; weight 0: none).

    Where that product leaves the float range (weights near the largest float, a large
    ``exponent``: inf, then nan shares) the shares are computed in log space, normalised to a
    largest share of 1; otherwise they are the product itself, so schedules stay as they were.
    """
    weights, sizes = np.asarray(weights, dtype=np.float64), np.asarray(sizes, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        direct = weights * sizes ** exponent
        if np.isfinite(direct.sum()) and ((direct > 0) == (weights > 0)).all():
            return direct
    with np.errstate(divide="ignore"):
        logs = np.log(weights) + exponent * np.log(sizes)
    return np.exp(logs - logs.max())


def capped_inclusion(weights: np.ndarray, total: float, cap: float | np.ndarray = 1.0) -> np.ndarray:
    """Expected counts ``e_i = min(cap_i, λ w_i)`` with ``sum(e) = total`` (water filling).

    ``cap`` is one bound for every item or one per item.
    """
    weights = np.asarray(weights, dtype=np.float64)
    caps = np.broadcast_to(np.asarray(cap, dtype=np.float64), weights.shape)
    positive = weights > 0
    if total > caps[positive].sum() + 1e-9:
        raise ValueError(f"cannot place {total} draws on {positive.sum()} items with caps summing to "
                         f"{caps[positive].sum():g}")
    capped = np.zeros_like(positive)
    while True:
        free = positive & ~capped
        remaining = total - caps[capped].sum()
        if not free.any() or remaining <= 1e-12:
            scale = 0.0
            break
        scale = remaining / weights[free].sum()
        newly = free & (scale * weights >= caps)
        if not newly.any():
            break
        capped |= newly
    return np.where(capped, caps, scale * weights * (positive & ~capped))


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




def slot_expectations(shares: np.ndarray, slots: int, capacity: np.ndarray | None = None) -> np.ndarray:
    """Expected slots per batch of each dataset: ``slots × share``, so a dataset with a large share
    takes several slots of one batch; a dataset whose ``capacity`` (slots it can fill per batch)
    binds keeps it and the rest is spread over the others.  ``capacity=None``: no bound.
    """
    caps = float(slots) if capacity is None else capacity
    return capped_inclusion(shares, slots, cap=caps)
