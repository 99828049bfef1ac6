"""End to end: a reduced quickstart must learn identity (positive held-out ID-Rec gain).

The full quickstart (README) trains for the tiny recipe's steps and gains >= 20 points; this
CI version trains fewer steps on the same data.  "Beyond seed noise": the untrained model's
ID-Rec P@1 on 80 held-out identities x 3 images is at chance (~0.4-1%, 240 queries, so one
query is 0.4 points); we require the trained model to beat it by at least 5 points, i.e.
12 more queries retrieving the right identity first.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from vis_embed import resources
from vis_embed.errors import ConfigError
from vis_embed.evaluation.quickstart_report import moving_average, plot_training_curve
from vis_embed.quickstart import StageClock, recipe_path, run_quickstart
from vis_embed.quickstart import pipeline as quickstart_pipeline

REPO = Path(__file__).resolve().parents[1]

REDUCED_STEPS = 200
MIN_GAIN_POINTS = 5.0


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_reduced_quickstart_learns_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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

    assert "before/plots/ID-Rec.png" in report and "after/plots/ID-Rec.png" in report

    # Every stage is resumable: a second call finds all outputs and redoes nothing, and the
    # report keeps the times the stages took when they did the work.
    def redone(*_args, **_kwargs):
        raise AssertionError("a finished stage was run again")

    for stage in ("generate", "build_tiny_checkpoint"):
        monkeypatch.setattr(quickstart_pipeline, stage, redone)
    monkeypatch.setattr("vis_embed.evaluation.api.evaluate_model", redone)
    monkeypatch.setattr("vis_embed.training.trainer.Trainer.train", redone)
    again = run_quickstart(out, seed=0, steps=REDUCED_STEPS, size="small",
                           overrides=["checkpoint.every=0", "logging.tensorboard=false"], show_progress=False)
    assert again["after"]["groups"] == after
    assert again["resumed"] == list(result["timings"]) and result["resumed"] == []
    assert again["timings"] == result["timings"]
    rows = (out / "report.md").read_text()
    took = result["timings"]["schedule + train"]
    assert f"| schedule + train (resumed: done by an earlier run) | {took:.1f} |" in rows


def _fake_stages(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Replace every stage's work by one writing its marker; the stages' results carry the seed
    the data was rendered with (the list returned records each render's seed)."""
    rendered: list[int] = []

    def render(out: Path, seed: int, size: str, show_progress: bool) -> Path:
        if (out / "synth" / "synth.json").is_file():
            return out / "synth"
        rendered.append(seed)
        (out / "synth").mkdir(parents=True, exist_ok=True)
        (out / "synth" / "synth.json").write_text(json.dumps({"seed": seed}))
        return out / "synth"

    def build(out: Path, seed: int) -> Path:
        (out / "model").mkdir(exist_ok=True)
        (out / "model" / "config.json").write_text("{}")
        return out / "model"

    def evaluate(model_dir, adapter, benchmark, out_dir, show_progress):
        if (out_dir / "results.json").is_file():
            return json.loads((out_dir / "results.json").read_text())
        seed = json.loads((benchmark.parent / "synth.json").read_text())["seed"]
        out_dir.mkdir(parents=True, exist_ok=True)
        result = {"groups": {"ID-Rec": float(seed)}}
        (out_dir / "results.json").write_text(json.dumps(result))
        return result

    def train(recipe, *args, **kwargs) -> Path:
        final = Path(recipe.output_dir) / "final"
        final.mkdir(parents=True, exist_ok=True)
        (final / "embedding_config.json").write_text("{}")
        return final

    monkeypatch.setattr(quickstart_pipeline, "render_data", render)
    monkeypatch.setattr(quickstart_pipeline, "build_quickstart_checkpoint", build)
    monkeypatch.setattr(quickstart_pipeline, "evaluate", evaluate)
    monkeypatch.setattr(quickstart_pipeline, "train", train)
    monkeypatch.setattr(quickstart_pipeline, "plot_training_curve", lambda *args: None)
    monkeypatch.setattr(quickstart_pipeline, "write_report", lambda out, *args, **kwargs: out / "report.md")
    return rendered


@pytest.mark.parametrize(("change", "named"), [({"seed": 1}, "seed"), ({"steps": 5}, "recipe.max_steps"),
                                               ({"size": "tiny"}, "size"),
                                               ({"overrides": ["optimizer.lr=0.1"]}, "recipe.optimizer.lr")])
def test_a_rerun_with_other_settings_is_refused_not_mixed_with_the_first_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict, named: str) -> None:
    rendered = _fake_stages(monkeypatch)
    out = tmp_path / "qs"
    first = run_quickstart(out, seed=0, steps=10, size="small", show_progress=False)
    assert first["after"]["groups"] == {"ID-Rec": 0.0}
    settings = {"seed": 0, "steps": 10, "size": "small", **change}
    with pytest.raises(ConfigError, match=f"[(; ]{re.escape(named)}: .* -> "):
        run_quickstart(out, show_progress=False, **settings)
    assert rendered == [0]
    again = run_quickstart(out, seed=0, steps=10, size="small", show_progress=False)  # the same settings resume
    assert again["resumed"] == ["render data", "build model", "evaluate untrained", "schedule + train",
                                "evaluate trained"] and rendered == [0]


@pytest.mark.parametrize("same", [{"steps": "default"}, {"overrides": ["max_steps=default"]},
                                  {"overrides": ["optimizer.lr=1e-3"]}])
def test_a_rerun_giving_the_default_values_explicitly_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              same: dict) -> None:
    """Settings are compared by the values they resolve to: ``--steps 300`` where 300 is the
    recipe's max_steps (or a --set repeating the recipe's value) is the run started without it,
    not "other settings" (it was refused: steps None -> 300)."""
    rendered = _fake_stages(monkeypatch)
    recipe = yaml.safe_load((REPO / "recipes" / "tiny_cpu.yaml").read_text())
    assert recipe["optimizer"]["lr"] == 1e-3
    steps = recipe["max_steps"]
    same = {key: steps if value == "default" else [text.replace("default", str(steps)) for text in value]
            for key, value in same.items()}
    out = tmp_path / "qs"
    run_quickstart(out, show_progress=False)
    again = run_quickstart(out, show_progress=False, **same)
    assert "schedule + train" in again["resumed"] and rendered == [0]
    run_quickstart(tmp_path / "other", show_progress=False, **same)  # and the other way round
    assert run_quickstart(tmp_path / "other", show_progress=False)["resumed"][-1] == "evaluate trained"


@pytest.mark.parametrize(("bad", "error"), [
    ({"overrides": ["optimizer.lr=fast"]}, "optimizer.lr"), ({"overrides": ["no_such_key=1"]}, "no_such_key"),
    ({"overrides": ["optimizer"]}, "KEY.PATH=VALUE"), ({"steps": 0}, "max_steps"), ({"steps": -3}, "max_steps"),
    ({"size": "huge"}, "unknown size 'huge'"), ({"seed": -1}, "--seed must be an integer >= 0")])
def test_bad_settings_are_refused_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: dict,
                                                  error: str) -> None:
    """A bad --set, --steps, --size or --seed was found only by the stage using it: after the
    data was rendered, the model built and evaluated, and with quickstart.json written, so the
    corrected command was then refused as "other settings" in that folder."""
    rendered = _fake_stages(monkeypatch)
    out = tmp_path / "qs"
    with pytest.raises(ConfigError, match=re.escape(error)):
        run_quickstart(out, show_progress=False, **bad)
    assert not out.exists() and rendered == []
    assert run_quickstart(out, show_progress=False)["resumed"] == [] and rendered == [0]


def test_the_quickstarts_own_places_keep_a_folder_name_that_is_not_plain_yaml(tmp_path: Path) -> None:
    """The stages' places in OUT reach the recipe as they are: a folder named "qs #1" (a YAML
    comment after the space) or "null" was read as "qs" / None."""
    from vis_embed.quickstart.pipeline import resolve_recipe

    for name in ("qs #1", "null", "a: b"):
        recipe = resolve_recipe(tmp_path / name, 0, None, None, [])
        assert recipe.output_dir == str(tmp_path / name / "run")
        assert recipe.model == str(tmp_path / name / "model")


def test_a_folder_of_other_files_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_stages(monkeypatch)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")  # someone else's model: never trusted as ours
    with pytest.raises(ConfigError, match="not empty and not a quickstart output folder"):
        run_quickstart(tmp_path, show_progress=False)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_quickstart(empty, show_progress=False)["resumed"] == []


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


def test_stage_clock_keeps_the_time_of_the_run_that_did_the_work(tmp_path: Path) -> None:
    marker = tmp_path / "done.txt"
    now = [100.0]

    def work() -> None:  # the work takes 12.5 s of the (fake) clock
        now[0] += 12.5
        marker.write_text("x")

    first = StageClock(tmp_path, total=1, clock=lambda: now[0])
    first.run("stage", "doing it", marker, work)
    assert first.seconds == {"stage": 12.5} and first.resumed == []

    resumed = StageClock(tmp_path, total=1, clock=lambda: now[0])
    resumed.run("stage", "doing it", marker, lambda: now.__setitem__(0, now[0] + 0.01))
    assert resumed.seconds == {"stage": 12.5} and resumed.resumed == ["stage"]
    assert "| stage (resumed: done by an earlier run) | 12.5 |" in resumed.table()


def test_moving_average_is_a_trailing_mean_that_keeps_every_step() -> None:
    values = [4.0, 0.0, 2.0, 6.0, 1.0]
    smoothed = moving_average(values, 3)
    assert len(smoothed) == len(values)
    for index, value in enumerate(smoothed):
        window = values[max(0, index - 2): index + 1]
        assert value == pytest.approx(sum(window) / len(window))


@pytest.mark.parametrize(("taus", "panels"), [([0.07] * 30, 1), ([0.07 - 0.001 * i for i in range(30)], 2)])
def test_training_curve_has_a_tau_panel_only_when_tau_is_learned(tmp_path: Path, taus: list[float],
                                                                  panels: int) -> None:
    from PIL import Image

    log = tmp_path / "train_log.jsonl"
    log.write_text("".join(json.dumps({"step": step, "loss": 5.0 - 0.1 * step + (step % 3), "tau": tau}) + "\n"
                           for step, tau in enumerate(taus)))
    with Image.open(plot_training_curve(log, tmp_path / "curve.png")) as image:
        width, height = image.size
    assert width / height == pytest.approx((10 if panels == 2 else 6) / 3.5, rel=0.02)
