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


def _study(folder: Path, scores: dict[str, list[float]], hashes: dict[str, str]) -> Path:
    """Result files of two arms on other batches (one schedule hash per arm) sharing the recipe seed."""
    import json

    folder.mkdir()
    for arm, values in scores.items():
        for seed, value in enumerate(values):
            record = {"arm": arm, "seed": seed, "recipe_seed": seed, "metrics": {"MVEB": value},
                      "schedule_hash": f"{hashes[arm]}{seed}"}
            (folder / f"{arm}_seed{seed}.json").write_text(json.dumps(record))
    return folder


def _command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "eval" / "power.py"), *args], capture_output=True, text=True,
                          cwd=REPO, check=False)


def test_a_study_that_pre_registered_pairing_by_seed_is_planned_paired(tmp_path) -> None:
    # the plateau study's design: other batches by design, paired by the shared recipe seed
    # (eval/intervals.py paired_design with by_seed, as its table pairs); without --by-seed: Welch
    scores = {"identity": [50.0, 52.0, 49.0, 51.0], "naive_unmasked": [49.0, 50.5, 48.5, 49.0]}
    folder = _study(tmp_path / "study", scores, {"identity": "aware", "naive_unmasked": "naive"})
    paired = _command(str(folder), "--arm", "identity", "--by-seed", "--effect", "5")
    assert paired.returncode == 0, paired.stderr
    # differences 1.0, 1.5, 0.5, 2.0: SD 0.645 over 4 pairs
    assert "MVEB: paired, 4 pairs, SD 0.65" in paired.stdout
    expected = power.paired_power(5.0, float(np.std([1.0, 1.5, 0.5, 2.0], ddof=1)), 4)
    assert f"power for +5: {expected:.3f}" in paired.stdout
    welch = _command(str(folder), "--arm", "identity", "--effect", "5")
    assert welch.returncode == 0 and "MVEB: Welch, 4 vs 4 runs" in welch.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--arm", "identiy"], "no result files of arm 'identiy' (arms there: identity, naive_unmasked)"),
    (["--arm", "identity", "--metric", "MVEB IND"], "identity_seed0.json has no metric 'MVEB IND'"),
    (["--arm", "identity", "--pairs", "1"], "--pairs 1: a t-interval needs at least 2 runs"),
    (["--arm", "single"], "1 run(s) on a side, no spread to plan with"),
    (["--arm", "flat", "--baseline", "flat_too"], "the runs do not scatter (SD 0)"),
])
def test_the_command_says_what_is_wrong_without_a_traceback(tmp_path, args, message) -> None:
    scores = {"identity": [50.0, 52.0, 49.0], "naive_unmasked": [49.0, 50.5, 48.5]}
    if args[1] == "single":
        scores["single"] = [40.0]
    if args[1] == "flat":
        scores = {"flat": [40.0, 40.0], "flat_too": [30.0, 30.0]}
    folder = _study(tmp_path / "study", scores, {arm: arm for arm in scores})
    done = _command(str(folder), *args)
    assert done.returncode != 0 and message in done.stderr and "Traceback" not in done.stderr
