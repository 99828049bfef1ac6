"""eval/intervals.py: the 95% intervals of the study tables, checked against scipy; which one a
comparison gets (paired only for arms on the same batches, Welch's otherwise)."""

from __future__ import annotations

from _eval_scripts import load_eval_script

from types import ModuleType

import numpy as np
import pytest
from scipy import stats


def _load(name: str) -> ModuleType:
    return load_eval_script(name)


intervals = _load("intervals")


@pytest.mark.parametrize("df", [1, 2, 3.5, 4.2, 7.77, 12, 29.5, 40, 1000])
def test_t_quantile_matches_scipy(df: float) -> None:
    assert intervals.t_quantile_975(df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-9)


@pytest.mark.parametrize("pairs", [2, 3, 5, 8, 40])
def test_paired_difference_matches_scipys_paired_t_interval(pairs: int) -> None:
    rng = np.random.default_rng(pairs)
    a = rng.normal(30, 5, pairs)
    b = a - rng.normal(1.5, 3, pairs)
    result = intervals.paired_difference(a.tolist(), b.tolist())
    expected = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert result.pairs == pairs and result.paired
    assert result.mean == pytest.approx(float(np.mean(a - b)))
    assert (result.low, result.high) == (pytest.approx(expected.low, abs=1e-9), pytest.approx(expected.high, abs=1e-9))
    assert result.significant == (expected.low > 0 or expected.high < 0)


@pytest.mark.parametrize(("n_a", "n_b", "seed"), [(5, 10, 0), (2, 2, 1), (3, 7, 2), (10, 5, 3), (4, 40, 4)])
def test_welch_difference_matches_scipys_unequal_variance_interval(n_a: int, n_b: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = rng.normal(46, 5, n_a), rng.normal(48, 2, n_b)
    result = intervals.welch_difference(a.tolist(), b.tolist())
    expected = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert not result.paired and result.runs == (n_a, n_b) and result.pairs == 0
    assert result.mean == pytest.approx(float(a.mean() - b.mean()))
    assert (result.low, result.high) == (pytest.approx(expected.low, abs=1e-9), pytest.approx(expected.high, abs=1e-9))


def test_pairing_is_by_position_not_by_sorted_value() -> None:
    """Each seed is its own pair: a shift of about +2 is resolved however noisy the seeds are."""
    a, b = [10.0, 50.0, 30.0], [8.0, 48.5, 27.5]
    result = intervals.paired_difference(a, b)
    assert result.mean == pytest.approx(2.0) and result.significant and result.low < 2.0 < result.high
    # the same numbers as unpaired arms: the seed-to-seed spread is in the interval
    assert not intervals.welch_difference(a, b).significant


def test_runs_without_spread_get_no_interval_rather_than_a_certain_one() -> None:
    """A difference repeated exactly by every seed (P@1 moves in steps, so 2-3 seeds can) has an
    unobserved spread: no interval, never a zero-width one printed as resolved."""
    constant = intervals.paired_difference([40.0, 42.5], [38.75, 41.25])
    assert (constant.low, constant.high, constant.significant) == (None, None, False)
    assert intervals.difference_cell(constant) == "+1.2 (no spread in 2 pairs)"
    flat = intervals.welch_difference([40.0, 40.0], [38.75, 38.75])
    assert intervals.difference_cell(flat) == "+1.2 (no spread in either arm)" and not flat.significant


def test_one_pair_has_no_interval_and_mismatched_lists_are_refused() -> None:
    single = intervals.paired_difference([3.0], [1.0])
    assert (single.mean, single.low, single.high, single.significant) == (2.0, None, None, False)
    assert intervals.welch_difference([3.0], [1.0, 2.0]).low is None
    with pytest.raises(ValueError):
        intervals.paired_difference([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        intervals.t_quantile_975(0.5)


def test_paired_only_where_every_shared_seed_trained_on_the_same_schedule() -> None:
    baseline = {"0": {"schedule_hash": "a"}, "1": {"schedule_hash": "b"}, "2": {"schedule_hash": "c"}}
    assert intervals.same_batches({"0": {"schedule_hash": "a"}, "1": {"schedule_hash": "b"}}, baseline)
    assert not intervals.same_batches({"0": {"schedule_hash": "a"}, "1": {"schedule_hash": "x"}}, baseline)
    assert not intervals.same_batches({"0": {"schedule_hash": None}}, {"0": {"schedule_hash": None}})
    assert not intervals.same_batches({"7": {"schedule_hash": "a"}}, baseline)  # no seed in common
    # Welch uses every seed of each arm (the baseline's 3, not only the 2 shared)
    values, reference = {"0": 1.0, "1": 3.0}, {"0": 0.0, "1": 1.0, "2": 5.0}
    welch = intervals.compare(values, reference, paired=False)
    assert welch.runs == (2, 3) and welch.mean == pytest.approx(2.0 - 2.0)
    paired = intervals.compare(values, reference, paired=True)
    assert paired.runs == (2, 2) and paired.mean == pytest.approx(1.5)
    assert intervals.runs_cell(welch) == "2 vs 3" and intervals.runs_cell(paired) == "2"
