"""End to end: a reduced quickstart must learn identity (positive held-out ID-Rec gain).

The full quickstart (README) trains for the tiny recipe's steps and gains >= 20 points; this
CI version trains fewer steps on the same data.  "Beyond seed noise": the untrained model's
ID-Rec P@1 on 80 held-out identities x 3 images is at chance (~0.4-1%, 240 queries, so one
query is 0.4 points); we require the trained model to beat it by at least 5 points, i.e.
12 more queries retrieving the right identity first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vis_embed import resources
from vis_embed.errors import ConfigError
from vis_embed.quickstart import recipe_path, run_quickstart

REPO = Path(__file__).resolve().parents[1]

REDUCED_STEPS = 200
MIN_GAIN_POINTS = 5.0


@pytest.mark.usefixtures("one_torch_thread")
def test_reduced_quickstart_learns_identity(tmp_path: Path) -> None:
    out = tmp_path / "quickstart"
    result = run_quickstart(out, seed=0, steps=REDUCED_STEPS, size="small",
                            overrides=["checkpoint.every=0", "logging.tensorboard=false"], show_progress=False)

    for name in ("before/results.json", "after/results.json", "report.md", "train_curve.png"):
        assert (out / name).is_file(), name
    before = json.loads((out / "before" / "results.json").read_text())["groups"]
    after = json.loads((out / "after" / "results.json").read_text())["groups"]
    assert result["after"]["groups"] == after
    gain = after["ID-Rec"] - before["ID-Rec"]
    assert gain >= MIN_GAIN_POINTS, f"ID-Rec P@1 {before['ID-Rec']:.1f} -> {after['ID-Rec']:.1f}"
    report = (out / "report.md").read_text()
    assert "ID-Rec" in report and "train_curve.png" in report

    # Every stage is resumable: a second call finds all outputs and redoes nothing.
    again = run_quickstart(out, seed=0, steps=REDUCED_STEPS, size="small", show_progress=False)
    assert again["after"]["groups"] == after
    assert sum(again["timings"].values()) < 30


def test_packaged_tiny_recipe_is_the_one_in_recipes() -> None:
    """The installed quickstart trains with a packaged copy; users read and edit recipes/."""
    with resources.tiny_recipe_path() as packaged:
        assert packaged.read_bytes() == (REPO / "recipes" / "tiny_cpu.yaml").read_bytes()


def test_quickstart_recipe_needs_no_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with recipe_path() as default:
        assert default.is_file() and REPO / "recipes" not in default.parents
    with pytest.raises(ConfigError, match="missing.yaml"), recipe_path(tmp_path / "missing.yaml"):
        pass
