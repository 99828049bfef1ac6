"""eval/ablation_table.py: the paired 95% interval of the sampling ablation, checked against scipy."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from scipy import stats


def _load_table_module() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "eval" / "ablation_table.py"
    spec = importlib.util.spec_from_file_location("ablation_table", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


table = _load_table_module()


@pytest.mark.parametrize("df", [*range(1, 35), 40, 60, 100, 1000])
def test_t_quantile_matches_scipy(df: int) -> None:
    assert table.t_quantile_975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=2e-4)


@pytest.mark.parametrize("pairs", [2, 3, 5, 8, 40])
def test_paired_difference_matches_scipys_paired_t_interval(pairs: int) -> None:
    rng = np.random.default_rng(pairs)
    a = rng.normal(30, 5, pairs)
    b = a - rng.normal(1.5, 3, pairs)
    result = table.paired_difference(a.tolist(), b.tolist())
    expected = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert result.pairs == pairs
    assert result.mean == pytest.approx(float(np.mean(a - b)))
    assert (result.low, result.high) == (pytest.approx(expected.low, abs=1e-3), pytest.approx(expected.high, abs=1e-3))
    assert result.significant == (expected.low > 0 or expected.high < 0)


def test_pairing_is_by_position_not_by_sorted_value() -> None:
    """Each seed is its own pair: a constant +2 shift is exact however noisy the seeds are."""
    a, b = [10.0, 50.0, 30.0], [8.0, 48.0, 28.0]
    result = table.paired_difference(a, b)
    assert (result.mean, result.low, result.high) == (pytest.approx(2.0), pytest.approx(2.0), pytest.approx(2.0))
    assert result.significant


def test_one_pair_has_no_interval_and_mismatched_lists_are_refused() -> None:
    single = table.paired_difference([3.0], [1.0])
    assert (single.mean, single.low, single.high, single.significant) == (2.0, None, None, False)
    with pytest.raises(ValueError):
        table.paired_difference([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        table.t_quantile_975(0)
