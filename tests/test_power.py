"""eval/power.py: the power of the study comparisons, checked against independent computations."""

from __future__ import annotations

from _eval_scripts import load_eval_script

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
power = load_eval_script("power")


def test_the_paired_power_is_the_textbook_value() -> None:
    # one-sample / paired t-test, two-sided alpha 0.05, d = 1, n = 10: power 0.803 (Cohen 1988,
    # G*Power); d = 0.5, n = 34: 0.807
    assert power.paired_power(1.0, 1.0, 10) == pytest.approx(0.8031, abs=5e-4)
    assert power.paired_power(2.0, 4.0, 34) == pytest.approx(0.8078, abs=5e-4)
    assert power.paired_power(0.0, 1.0, 10) == pytest.approx(0.05, abs=1e-9)  # no effect: alpha


def test_the_powers_match_a_simulation_of_the_tests() -> None:
    rng = np.random.default_rng(0)
    trials = 20000
    differences = rng.normal(1.5, 2.0, (trials, 8))  # paired: 8 pairs, SD of the differences 2
    simulated = (stats.ttest_1samp(differences, 0.0, axis=1).pvalue < 0.05).mean()
    assert power.paired_power(1.5, 2.0, 8) == pytest.approx(simulated, abs=0.015)
    arm, baseline = rng.normal(5.0, 3.5, (trials, 5)), rng.normal(0.0, 2.5, (trials, 10))  # Welch 5 vs 10
    simulated = (stats.ttest_ind(arm, baseline, axis=1, equal_var=False).pvalue < 0.05).mean()
    assert power.welch_power(5.0, 3.5, 5, 2.5, 10) == pytest.approx(simulated, abs=0.015)


def test_large_effects_have_power_one_not_nan_and_the_sign_does_not_matter() -> None:
    assert power.paired_power(5.0, 1.54, 10) == pytest.approx(1.0)
    assert power.paired_power(-1.0, 1.0, 10) == pytest.approx(power.paired_power(1.0, 1.0, 10))


def test_the_detectable_effect_inverts_the_power() -> None:
    design = power.Design(False, 3.5, 5, 2.5, 10)
    effect = power.detectable_effect(design, 0.8)
    assert design.power(effect) == pytest.approx(0.8, abs=1e-6)
    assert power.detectable_effect(design.with_runs(20)) < effect  # more runs resolve smaller effects
    assert power.detectable_cell(power.Design(True, 1.0, 10)) == "±1.0"  # d = 1 at n = 10 is ~0.80
    assert power.detectable_cell(power.Design(True, 0.0, 3)) == "–"  # equal differences: no spread


def test_the_design_follows_the_interval_rule() -> None:
    paired = power.design_of({"0": 3.0, "1": 5.0, "2": 4.0}, {"0": 1.0, "1": 2.0, "2": 2.0}, paired=True)
    assert paired == power.Design(True, pytest.approx(0.57735, abs=1e-5), 3)  # differences 2, 3, 2
    welch = power.design_of({"0": 3.0, "1": 5.0}, {"0": 1.0, "1": 2.0, "2": 3.0}, paired=False)
    assert (welch.paired, welch.n, welch.n_b) == (False, 2, 3) and welch.sd_b == pytest.approx(1.0)


def test_the_command_reads_a_study_and_plans_pairs() -> None:
    results = REPO / "docs" / "results" / "ablation_dense"
    if not results.is_dir():
        pytest.skip("the dense study's result files are not in this checkout")
    done = subprocess.run([sys.executable, str(REPO / "eval" / "power.py"), str(results), "--arm", "identity",
                           "--metric", "MVEB", "--effect", "12"], capture_output=True, text=True, cwd=REPO,
                          check=True)
    assert "Welch, 5 vs 10 runs" in done.stdout and "power for +12: 1.000" in done.stdout
