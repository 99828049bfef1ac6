"""The plateau ablation (docs/ablation_plateau.md): its pre-registered power, plateau rule, pairing
by seed, trained/transfer split, and the page rebuilt from its result files."""

from __future__ import annotations

from _eval_scripts import load_eval_script

import math
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load(name: str) -> ModuleType:
    return load_eval_script(name)


plateau = _load("ablation_plateau_table")
power = _load("power")
study = _load("study_results")


def _record(arm: str, seed: int, mveb: float, *, recipe_seed: int | None, loss: float = 1.0,
            schedule: str | None = None) -> dict:
    datasets = {name: {"meta_task": "x", "split": "IND", "benchmark": "MVEB", "primary": "P@1", "score": score}
                for name, score in (("SynthRec", mveb + 10), ("SynthReID", mveb), ("SynthVehicleReID", mveb - 10),
                                    ("SynthGrd", mveb - 10), ("SynthEdit", mveb - 10))}
    return {"schema": 2, "study": "ablation_plateau", "arm": arm, "seed": seed, "recipe_seed": recipe_seed,
            "schedule_hash": schedule or f"{arm}{seed}", "benchmark_version": 2, "datasets": datasets,
            "metrics": {"MVEB": mveb, "ID-Rec": mveb, "Re-ID": mveb, "overall": mveb},
            "training": {"final_loss_mean_last10pct": loss, "steps": 700, "fn_share_by_decile": [0.1] * 10},
            "provenance": {"commit": "0123456789abcdef", "dirty": False, "date": "2026-11-28T10:00:00+00:00",
                           "machine": {"cpu": "Test CPU", "cpu_features": [], "cores": 2}}}


def test_the_preregistered_power_is_computed_from_the_dense_study() -> None:
    # docs/ablation_plateau.md states its power before the runs: the dense study's MVEB SDs, no
    # correlation assumed within a pair; every figure of its table must be what eval/power.py gives
    results = REPO / "docs" / "results" / "ablation_dense"
    records = study.read_seed_results(results, ["identity", "naive_unmasked"])
    sds = [power.statistics.stdev(r["metrics"]["MVEB"] for r in records[arm].values())
           for arm in ("identity", "naive_unmasked")]
    sd = math.hypot(*sds)
    text = (REPO / "docs" / "ablation_plateau.md").read_text(encoding="utf-8")
    assert f"`identity` {sds[0]:.2f}" in text and f"`naive_unmasked` {sds[1]:.2f}" in text and f"= {sd:.2f}" in text
    for pairs in (8, 9, 10):
        design = power.Design(True, sd, pairs)
        row = f"| {pairs} | {design.power(5.0):.3f}"
        assert row in text.replace("**", ""), row
        assert f"| {power.detectable_effect(design):.2f} |" in text.replace("**", "")
    assert power.Design(True, sd, 10).power(5.0) >= 0.8 > power.Design(True, sd, 8).power(5.0)


def test_the_plateau_rule_takes_the_first_step_within_tolerance_of_the_end_inside_600_800() -> None:
    def curves(losses: dict[int, float]) -> dict:
        return {variant: {step: _record("p", 100, 0.0, recipe_seed=100, loss=loss) for step, loss in losses.items()}
                for variant in ("naive_unmasked", "identity")}

    flat_at_700 = {600: 1.20, 700: 1.04, 800: 1.02, 1000: 1.0}
    assert plateau.plateau_step(curves(flat_at_700)) == (700, 700)
    early = {300: 1.03, 600: 1.0, 1000: 1.0}
    assert plateau.plateau_step(curves(early)) == (600, 300)  # held at 600
    late = {600: 1.5, 900: 1.04, 1000: 1.0}
    assert plateau.plateau_step(curves(late)) == (800, 900)  # held at 800
    one_arm = curves(flat_at_700)
    one_arm["identity"] = {step: _record("p", 100, 0.0, recipe_seed=100, loss=2.0 if step < 1000 else 1.0)
                           for step in flat_at_700}
    # both arms must have levelled off; the last step is the reference, never a finding
    assert plateau.plateau_step(one_arm) == (800, None)
    with pytest.raises(ValueError, match="both arms"):
        plateau.plateau_step({"identity": one_arm["identity"]})


def test_arms_sharing_the_recipe_seed_are_paired_and_mveb_splits_into_trained_and_transfer() -> None:
    naive = {str(s): _record("naive_unmasked", s, 30.0 + s, recipe_seed=s) for s in range(4)}
    aware = {str(s): _record("identity", s, 31.0 + s + (s % 2), recipe_seed=s) for s in range(4)}
    intervals, power_rows = plateau.difference_rows({"naive_unmasked": naive, "identity": aware})
    # differences 1, 2, 1, 2 paired: mean 1.5, sd 0.577, t(0.975, 3) = 3.182 -> +1.5 [+0.6, +2.4]
    assert intervals[2].startswith("| `identity` − `naive_unmasked` | 4 | paired | **+1.5 [+0.6, +2.4]** |")
    assert len(power_rows) == 3
    record = aware["0"]
    assert plateau.scores(record)["MVEB trained"] == pytest.approx(36.0)   # (41 + 31) / 2
    assert plateau.scores(record)["MVEB transfer"] == pytest.approx(21.0)
    # without a recorded recipe seed (or with different ones) there is no pairing: Welch
    unrecorded = {s: {**r, "recipe_seed": None} for s, r in aware.items()}
    assert "| 4 vs 4 | Welch |" in plateau.difference_rows({"naive_unmasked": naive, "identity": unrecorded})[0][2]


def test_the_page_is_its_result_files_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    markdown = Path("docs/ablation_plateau.md")
    text = markdown.read_text(encoding="utf-8")
    results = Path("docs/results/ablation_plateau")
    command = text.split("Command:\n\n```bash\n", 1)[1].split("\n```", 1)[0] if "Command:\n\n```bash\n" in text \
        else "unused: no runs"
    assert plateau.document(results, markdown, command, Path("recipes/ablation_dense.yaml")) == text
    if not list(results.glob("*_seed*.json")):
        # without an arm's file the title may not read as a result: "not run yet" or "arms running"
        assert "**Not run yet.**" in text and any(words in text.splitlines()[0]
                                                 for words in ("not run yet", "arms running"))
    # the block is what the files give: a result file added changes the page
    copy = tmp_path / "results"
    for seed in range(3):
        for arm, mveb in (("naive_unmasked", 30.0), ("identity", 32.0 + seed)):
            study.write_seed_result(copy, _record(arm, seed, mveb, recipe_seed=seed))
    rebuilt = plateau.document(copy, markdown, "bash eval/ablation_plateau.sh", Path("recipes/ablation_dense.yaml"))
    assert "**Not run yet.**" not in rebuilt and "| `identity` − `naive_unmasked` | 3 | paired | **+3.0" in rebuilt
    assert rebuilt.split("<!-- results -->")[0] == text.split("<!-- results -->")[0]  # the pre-registration kept


def test_the_readme_and_experiments_quote_the_pages_primary_difference() -> None:
    """README's "What the ablations show" and docs/experiments.md are rebuilt from the study's
    files through its page: they quote the primary comparison (`identity` − `naive_unmasked`,
    MVEB, paired) exactly as the page's results block gives it, with its number of pairs; before
    any arm has run they say so."""
    page = (REPO / "docs" / "ablation_plateau.md").read_text(encoding="utf-8")
    block = page.split("<!-- results -->", 1)[1].split("<!-- /results -->", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("| `identity` − `naive_unmasked` |")]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    experiments = (REPO / "docs" / "experiments.md").read_text(encoding="utf-8")
    if not rows:
        assert "**Not run yet.**" in block and "not run yet" in readme.split("## What the ablations show", 1)[1]
        return
    cells = [cell.strip() for cell in rows[0].split("|")]
    pairs, mveb = cells[2], cells[4].replace("**", "")
    for name, text in (("README.md", readme), ("docs/experiments.md", experiments)):
        assert f"MVEB {mveb}" in text and f"{pairs} pairs" in text, name
