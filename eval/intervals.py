"""The 95% intervals of the study tables: one rule for which interval a comparison gets.

Two arms trained on the *same batches* (every seed's schedule file has the same hash in both)
differ only in what the study varies, so their difference is paired by seed (a paired
t-interval).  Arms on *different batches* (e.g. identity-aware vs naive schedules of one seed)
share nothing but the model initialisation, and pairing them by seed means nothing unless the
study was designed so: their difference of means gets Welch's unpaired interval over every seed
of each arm (issue 38), except in a study that pre-registered pairing by seed (shared LoRA
initialisation and scheduler seed, recorded as ``recipe_seed``: :func:`paired_design`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def t_quantile_975(df: float) -> float:
    """t_{0.975, df}: the half-width factor of a two-sided 95% t-interval (df >= 1, real:
    Welch's degrees of freedom are fractional, where a table of integer quantiles is off by
    up to 1.3 at df 1-2), from scipy (a development dependency; the study scripts need it)."""
    if not df >= 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    from scipy import stats

    return float(stats.t.ppf(0.975, df))


@dataclass(frozen=True)
class Difference:
    """Mean of ``a - b`` and its 95% interval (``None`` bounds where there is none).

    ``paired``: a paired t-interval over ``runs[0]`` pairs; else Welch's over ``runs`` = (runs
    of a, runs of b)."""

    mean: float
    low: float | None
    high: float | None
    runs: tuple[int, int]
    paired: bool = True
    # why there is no interval where there are enough runs: their spread is 0 (P@1 moves in
    # steps of 100 / queries, so 2-3 seeds can repeat a difference exactly), and a zero-width
    # t-interval would read as a certain effect from a spread that was never observed
    no_interval: str | None = None

    @property
    def pairs(self) -> int:
        return self.runs[0] if self.paired else 0

    @property
    def significant(self) -> bool:
        """The interval excludes 0."""
        return self.low is not None and (self.low > 0 or self.high < 0)


def paired_difference(a: list[float], b: list[float]) -> Difference:
    """Paired t-interval of ``mean(a - b)``; ``a[i]`` and ``b[i]`` are one pair (one seed)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"need equally many values, at least one (got {len(a)} and {len(b)})")
    differences = [x - y for x, y in zip(a, b)]
    mean = statistics.mean(differences)
    if len(differences) < 2:
        return Difference(mean, None, None, (len(a), len(b)))
    if statistics.stdev(differences) == 0:
        return Difference(mean, None, None, (len(a), len(b)), no_interval=f"no spread in {len(a)} pairs")
    half = t_quantile_975(len(differences) - 1) * statistics.stdev(differences) / math.sqrt(len(differences))
    return Difference(mean, mean - half, mean + half, (len(a), len(b)))


def welch_difference(a: list[float], b: list[float]) -> Difference:
    """Welch's unpaired t-interval of ``mean(a) - mean(b)`` (unequal variances; the
    Welch-Satterthwaite degrees of freedom); no interval with fewer than 2 runs on a side."""
    if not a or not b:
        raise ValueError(f"need at least one value on each side (got {len(a)} and {len(b)})")
    mean = statistics.mean(a) - statistics.mean(b)
    if len(a) < 2 or len(b) < 2:
        return Difference(mean, None, None, (len(a), len(b)), paired=False)
    var_a, var_b = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(var_a + var_b)
    if se == 0:
        return Difference(mean, None, None, (len(a), len(b)), paired=False, no_interval="no spread in either arm")
    df = (var_a + var_b) ** 2 / (var_a ** 2 / (len(a) - 1) + var_b ** 2 / (len(b) - 1))
    half = t_quantile_975(df) * se
    return Difference(mean, mean - half, mean + half, (len(a), len(b)), paired=False)


def same_batches(arm: Mapping[str, Mapping[str, Any]], baseline: Mapping[str, Mapping[str, Any]]) -> bool:
    """Every seed the two arms share trained on one schedule file (same ``schedule_hash``),
    and they share at least one: the only case a paired interval is right for."""
    seeds = [seed for seed in arm if seed in baseline]
    return bool(seeds) and all(arm[s].get("schedule_hash") is not None
                               and arm[s].get("schedule_hash") == baseline[s].get("schedule_hash") for s in seeds)


def same_seed_design(arm: Mapping[str, Mapping[str, Any]], baseline: Mapping[str, Mapping[str, Any]]) -> bool:
    """Every seed the two arms share trained with one recorded ``recipe_seed``: the same LoRA
    initialisation and the same random stream of the scheduler, the batches differing by design
    (identity-aware vs naive).  Pairing such runs by seed is a *pre-registered* design choice
    (docs/ablation_plateau.md); it is never inferred for studies that did not declare it."""
    seeds = [seed for seed in arm if seed in baseline]
    return bool(seeds) and all(arm[s].get("recipe_seed") is not None
                               and arm[s].get("recipe_seed") == baseline[s].get("recipe_seed") for s in seeds)


def paired_design(arm: Mapping[str, Mapping[str, Any]], baseline: Mapping[str, Mapping[str, Any]],
                  by_seed: bool = False) -> bool:
    """The one pairing rule: paired on the same batches; also, where a study pre-registered
    pairing by seed (``by_seed``), on a shared recipe seed; else Welch."""
    return same_batches(arm, baseline) or (by_seed and same_seed_design(arm, baseline))


def compare(values: Mapping[str, float], baseline: Mapping[str, float], paired: bool) -> Difference:
    """``values`` − ``baseline`` (per seed): paired over their common seeds where ``paired``
    (same batches, :func:`same_batches`), else Welch over every seed of each."""
    if paired:
        seeds = [seed for seed in values if seed in baseline]
        return paired_difference([values[s] for s in seeds], [baseline[s] for s in seeds])
    return welch_difference(list(values.values()), list(baseline.values()))


def difference_cell(difference: Difference) -> str:
    """``+1.2 [-0.3, +2.7]``, bold where the interval excludes 0; ``+1.2 (no spread in 2 pairs)``
    where the runs cannot estimate one."""
    if difference.low is None:
        return f"{difference.mean:+.1f}" + (f" ({difference.no_interval})" if difference.no_interval else "")
    text = f"{difference.mean:+.1f} [{difference.low:+.1f}, {difference.high:+.1f}]"
    return f"**{text}**" if difference.significant else text


def runs_cell(difference: Difference) -> str:
    """``10`` (pairs) or ``5 vs 10`` (Welch: runs of each arm)."""
    return str(difference.runs[0]) if difference.paired else f"{difference.runs[0]} vs {difference.runs[1]}"
