"""Power of the study comparisons: how likely each design is to resolve an effect of a given size.

An interval that contains 0 says "no difference resolved"; whether that is informative depends
on the power the design had.  This module gives, for the two intervals of eval/intervals.py
(one rule for which one a comparison gets: :func:`intervals.paired_design`), the probability
that the two-sided 95% t-interval excludes 0 when the true difference is ``effect``:

* paired (same batches, or a study's pre-registered pairing by seed: ``--by-seed``): the
  one-sample t-test of the per-seed differences, ``n`` pairs, their SD ``sd``: noncentrality
  ``effect / (sd / sqrt(n))`` on ``n - 1`` degrees of freedom;
* Welch (other batches): ``effect / sqrt(sd_a^2/n_a + sd_b^2/n_b)`` on the Welch-Satterthwaite
  degrees of freedom (the usual noncentral-t approximation of Welch's test).

Both take the per-seed SDs as the true ones (a planning power, not a post-hoc one: it says
what the design could resolve if the arms scatter as much as they did).  scipy's noncentral t
(a development dependency, like the intervals').  :func:`detectable_effect` inverts it: the
smallest effect resolved with the given power.

    python eval/power.py docs/results/ablation_dense --arm identity --metric MVEB --effect 5 12
    python eval/power.py docs/results/ablation_dense --arm identity --metric MVEB --effect 5 --pairs 8
    python eval/power.py docs/results/ablation_plateau --arm identity --by-seed   # as its table pairs
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ALPHA = 0.05


def _power(noncentrality: float, df: float, alpha: float = ALPHA) -> float:
    """P(|T| > t_{1-alpha/2, df}) for T noncentral t(df, noncentrality)."""
    if not df >= 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    from scipy import stats

    critical = stats.t.ppf(1 - alpha / 2, df)
    # P(T < -c | nc) = P(T > c | -nc): both tails as survival functions, where scipy stays finite
    # (its cdf far in the lower tail of a large noncentrality is nan)
    return float(stats.nct.sf(critical, df, noncentrality) + stats.nct.sf(critical, df, -noncentrality))


def paired_power(effect: float, sd: float, n: int, alpha: float = ALPHA) -> float:
    """Power of the paired t-interval over ``n`` pairs whose differences have SD ``sd``."""
    if n < 2 or sd <= 0:
        raise ValueError(f"need n >= 2 pairs and sd > 0 (got n={n}, sd={sd})")
    return _power(effect / (sd / math.sqrt(n)), n - 1, alpha)


def welch_df(sd_a: float, n_a: int, sd_b: float, n_b: int) -> float:
    """The Welch-Satterthwaite degrees of freedom (as eval/intervals.py's welch_difference)."""
    var_a, var_b = sd_a ** 2 / n_a, sd_b ** 2 / n_b
    return (var_a + var_b) ** 2 / (var_a ** 2 / (n_a - 1) + var_b ** 2 / (n_b - 1))


def welch_power(effect: float, sd_a: float, n_a: int, sd_b: float, n_b: int, alpha: float = ALPHA) -> float:
    """Power of Welch's interval of ``mean(a) - mean(b)`` with ``n_a`` and ``n_b`` runs."""
    if min(n_a, n_b) < 2 or sd_a ** 2 + sd_b ** 2 <= 0:
        raise ValueError(f"need >= 2 runs a side and some spread (got {n_a}, {n_b}; sd {sd_a}, {sd_b})")
    se = math.sqrt(sd_a ** 2 / n_a + sd_b ** 2 / n_b)
    return _power(effect / se, welch_df(sd_a, n_a, sd_b, n_b), alpha)


@dataclass(frozen=True)
class Design:
    """One comparison as the power needs it: paired (``sd`` of the differences, ``n`` pairs)
    or Welch (``sd``/``n`` of the arm, ``sd_b``/``n_b`` of the baseline)."""

    paired: bool
    sd: float
    n: int
    sd_b: float = 0.0
    n_b: int = 0

    @property
    def has_spread(self) -> bool:
        """Runs that scatter: without spread a t-interval has no width and no power to state."""
        return self.sd > 0 if self.paired else self.sd ** 2 + self.sd_b ** 2 > 0

    def power(self, effect: float, alpha: float = ALPHA) -> float:
        if self.paired:
            return paired_power(effect, self.sd, self.n, alpha)
        return welch_power(effect, self.sd, self.n, self.sd_b, self.n_b, alpha)

    def with_runs(self, n: int) -> Design:
        """The same spread with ``n`` runs (pairs, or runs of each arm): a planning question."""
        return Design(self.paired, self.sd, n, self.sd_b, n if not self.paired else 0)


def design_of(values: Mapping[str, float], baseline: Mapping[str, float], paired: bool) -> Design:
    """The design of ``values`` − ``baseline`` (per seed), as eval/intervals.py's ``compare``
    pairs them: over common seeds where ``paired``, else every seed of each."""
    if paired:
        seeds = [seed for seed in values if seed in baseline]
        return Design(True, statistics.stdev([values[s] - baseline[s] for s in seeds]), len(seeds))
    return Design(False, statistics.stdev(values.values()), len(values),
                  statistics.stdev(baseline.values()), len(baseline))


def detectable_effect(design: Design, power: float = 0.8, alpha: float = ALPHA) -> float:
    """The smallest effect (>= 0) the design resolves with probability ``power``."""
    from scipy.optimize import brentq

    scale = design.sd + design.sd_b
    high = scale
    while design.power(high, alpha) < power:
        high *= 2
    return float(brentq(lambda effect: design.power(effect, alpha) - power, 0.0, high, xtol=1e-9))


def power_cell(design: Design, effect: float) -> str:
    """``0.97``: the power for ``effect``, two decimals (how the pages print it); "–" without spread."""
    return f"{design.power(effect):.2f}" if design.has_spread else "–"


def detectable_cell(design: Design, power: float = 0.8) -> str:
    """``±4.1``: the effect resolved with ``power``, one decimal (P@1 points, either sign); "–"
    without spread."""
    return f"±{detectable_effect(design, power):.1f}" if design.has_spread else "–"


def _scores(record: dict[str, Any], metric: str) -> float | None:
    from study_results import benchmark_split_means

    if metric in record.get("metrics", {}):
        return record["metrics"][metric]
    return benchmark_split_means(record).get(metric)


def _study_values(records: dict[str, dict[str, dict[str, Any]]], arm: str, metric: str,
                  results: Path) -> dict[str, float]:
    """``{seed: score}`` of one arm; a SystemExit naming what is missing (an arm without result
    files, a metric a file does not hold)."""
    if not records.get(arm):
        arms = sorted({path.name.rsplit("_seed", 1)[0] for path in Path(results).glob("*_seed*.json")})
        raise SystemExit(f"error: {results}: no result files of arm {arm!r} (arms there: {', '.join(arms) or 'none'})")
    values = {seed: _scores(record, metric) for seed, record in records[arm].items()}
    missing = [seed for seed, value in values.items() if value is None]
    if missing:
        raise SystemExit(f"error: {results}: {arm}_seed{missing[0]}.json has no metric {metric!r}")
    return values


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from intervals import paired_design
    from study_results import read_seed_results

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a study's per-seed result files (docs/results/<study>)")
    parser.add_argument("--arm", required=True)
    parser.add_argument("--baseline", default="naive_unmasked")
    parser.add_argument("--metric", default="MVEB", help="a metrics group, or MVEB IND / MVEB OOD")
    parser.add_argument("--effect", type=float, nargs="+", default=[5.0, 12.0], help="P@1 points")
    parser.add_argument("--pairs", type=int, help="the same spread with this many runs (a planning question)")
    parser.add_argument("--by-seed", action="store_true", help="the study pre-registered pairing by seed "
                        "(a shared recipe_seed, other batches by design: docs/ablation_plateau.md), as its table pairs")
    parser.add_argument("--unpaired-sd", action="store_true", help="arms on other batches, planned as pairs: "
                        "the SD of a difference taken as sqrt(sd_a^2 + sd_b^2) (no correlation assumed)")
    args = parser.parse_args()
    records = read_seed_results(args.results, [args.arm, args.baseline])
    values, baseline = (_study_values(records, arm, args.metric, args.results) for arm in (args.arm, args.baseline))
    paired = paired_design(records[args.arm], records[args.baseline], by_seed=args.by_seed)
    runs = len([s for s in values if s in baseline]) if paired else min(len(values), len(baseline))
    if runs < 2:
        what = f"{runs} pair(s)" if paired else f"{runs} run(s) on a side"
        raise SystemExit(f"error: {args.arm} − {args.baseline}: {what}, no spread to plan with (at least 2 needed)")
    design = design_of(values, baseline, paired)
    if args.unpaired_sd and not paired:
        design = Design(True, math.hypot(design.sd, design.sd_b), min(design.n, design.n_b))
    if args.pairs:
        if args.pairs < 2:
            raise SystemExit(f"error: --pairs {args.pairs}: a t-interval needs at least 2 runs")
        design = design.with_runs(args.pairs)
    if not design.has_spread:
        raise SystemExit(f"error: {args.arm} − {args.baseline}, {args.metric}: the runs do not scatter (SD 0), "
                         "so a t-interval has no width and no power to state")
    kind = "paired" if design.paired else "Welch"
    runs = f"{design.n} pairs" if design.paired else f"{design.n} vs {design.n_b} runs"
    spread = f"SD {design.sd:.2f}" + ("" if design.paired else f" vs {design.sd_b:.2f}")
    print(f"{args.arm} − {args.baseline}, {args.metric}: {kind}, {runs}, {spread}")
    for effect in args.effect:
        print(f"  power for {effect:+g}: {design.power(effect):.3f}")
    print(f"  effect resolved with power 0.8: {detectable_effect(design):.2f}")


if __name__ == "__main__":
    main()
