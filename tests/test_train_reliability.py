"""Reliability of training (issue 18): the run directory is never overwritten or continued with
another recipe, no checkpoint holds non-finite or exploded weights, recipe numbers are finite,
temporaries of a killed run are removed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file

from vis_embed.cli import main as cli_main
from vis_embed.errors import ConfigError
from vis_embed.training import checkpoint as ckpt
from vis_embed.training.recipe import load_recipe
from vis_embed.training.run_dir import check_run_directory, clear_run_directory, recipe_differences

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _training_fixtures import tiny_recipe, write_identity_dataset, write_schedule  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
BASE = {"model": "m", "data": "d.yaml", "schedule": "s.parquet", "output_dir": "out", "max_steps": 2,
        "global_batch_size": 8}


# ---------------------------------------------------------------- recipe numbers
@pytest.mark.parametrize("override, key", [
    ("optimizer.lr=inf", "optimizer.lr"), ("optimizer.lr=.nan", "optimizer.lr"),
    ("optimizer.betas=[0.9,.inf]", "optimizer.betas.1"), ("temperature.init=.inf", "temperature.init"),
    ("temperature.lr=-.inf", "temperature.lr"), ("gradcache.max_padding=nan", "gradcache.max_padding"),
    ("loss.two_tier.alpha=.inf", "loss.two_tier.alpha"), ("sampling.hard_negatives=.nan", "sampling.hard_negatives"),
])
def test_non_finite_recipe_numbers_are_refused_naming_the_key(override, key) -> None:
    with pytest.raises(ConfigError, match=rf"'{key}'.*finite"):
        load_recipe(raw=dict(BASE), overrides=[override])


# ---------------------------------------------------------------- run directory (no model)
def _finished_run(out: Path, recipe: dict) -> None:
    (out / "final").mkdir(parents=True)
    (out / "final" / "adapter_model.safetensors").write_bytes(b"weights")
    (out / "train_log.jsonl").write_text('{"step": 0}\n')
    (out / "recipe.yaml").write_text(yaml.safe_dump(recipe))


def test_a_directory_holding_a_run_is_refused_without_resume_or_overwrite(tmp_path) -> None:
    recipe = load_recipe(raw=dict(BASE)).model_dump(mode="json")
    out = tmp_path / "run"
    check_run_directory(out, recipe, resume=False, overwrite=False)  # new directory: fine
    out.mkdir()
    (out / "schedule.parquet").write_bytes(b"x")  # a non-run file does not make it a run
    check_run_directory(out, recipe, resume=False, overwrite=False)
    _finished_run(out, recipe)
    with pytest.raises(ConfigError, match=r"already holds a training run \(final.*--resume.*--overwrite"):
        check_run_directory(out, recipe, resume=False, overwrite=False)
    with pytest.raises(ConfigError, match="exclude each other"):
        check_run_directory(out, recipe, resume=True, overwrite=True)
    check_run_directory(out, recipe, resume=False, overwrite=True)
    check_run_directory(out, recipe, resume=True, overwrite=False)  # same recipe: may continue


def test_overwrite_removes_the_run_and_keeps_other_files(tmp_path) -> None:
    out = tmp_path / "run"
    _finished_run(out, {})
    (out / "checkpoint-2").mkdir()
    (out / "schedule.parquet").write_bytes(b"x")
    clear_run_directory(out, overwrite=False)
    assert (out / "final").is_dir() and (out / "checkpoint-2").is_dir()
    clear_run_directory(out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["schedule.parquet"]


def test_leftover_temporaries_are_removed_on_the_next_start(tmp_path) -> None:
    out = tmp_path / "run"
    leftovers = [".checkpoint-4.tmp-ab12cd", ".final.tmp-x9y8", ".final.old-1234"]
    for name in leftovers:
        (out / name).mkdir(parents=True)
        (out / name / "adapter_model.safetensors").write_bytes(b"half")
    (out / ".train_log.jsonl.k2j3.tmp").write_text("half")
    (out / ".keep-me").write_text("a user's hidden file")
    (out / "checkpoint-2").mkdir()
    clear_run_directory(out, overwrite=False)
    assert sorted(p.name for p in out.iterdir()) == [".keep-me", "checkpoint-2"]


def test_resume_names_every_recipe_key_that_differs(tmp_path) -> None:
    old = load_recipe(raw=dict(BASE)).model_dump(mode="json")
    new = load_recipe(raw=dict(BASE), overrides=["seed=7", "optimizer.lr=0.5", "max_steps=9",
                                                 "logging.every=5", "output_dir=moved", "model_options.compile=false",
                                                 "model_options.max_pixels=50176"]).model_dump(mode="json")
    # model_options.compile may change (a run recorded before its default became null resumes);
    # the section's other keys may not
    assert [key for key, _old, _new in recipe_differences(old, new)] == ["model_options.max_pixels",
                                                                         "optimizer.lr", "seed"]
    out = tmp_path / "run"
    checkpoint = out / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    ckpt.write_trainer_state(checkpoint, {"step": 2, "recipe": old})
    with pytest.raises(ConfigError, match=r"checkpoint-2.*max_pixels: None -> 50176; optimizer\.lr: 0\.0001 -> 0\.5; "
                                          r"seed: 42 -> 7"):
        check_run_directory(out, new, resume=True, overwrite=False)


def test_resume_with_max_steps_below_the_newest_checkpoint_is_refused(tmp_path) -> None:
    """Checkpoints 2 and 4 of a 6-step run, resumed with max_steps 3: nothing would train, and
    final/ would get the 4-step weights stamped as step 3.  Refused, naming both numbers."""
    recorded = load_recipe(raw=dict(BASE), overrides=["max_steps=6"]).model_dump(mode="json")
    out = tmp_path / "run"
    for step in (2, 4):
        (out / f"checkpoint-{step}").mkdir(parents=True)
        ckpt.write_trainer_state(out / f"checkpoint-{step}", {"step": step, "recipe": recorded})
    lower = load_recipe(raw=dict(BASE), overrides=["max_steps=3"]).model_dump(mode="json")
    with pytest.raises(ConfigError, match=r"checkpoint-4 has completed 4 steps, more than max_steps 3\. "
                                          r"Resume with max_steps >= 4"):
        check_run_directory(out, lower, resume=True, overwrite=False)
    for steps in (4, 5, 9):  # at or above the checkpoint: resumable (final/ then says its own step)
        allowed = load_recipe(raw=dict(BASE), overrides=[f"max_steps={steps}"]).model_dump(mode="json")
        check_run_directory(out, allowed, resume=True, overwrite=False)


def test_resume_before_the_first_checkpoint_compares_with_recipe_yaml(tmp_path) -> None:
    old = load_recipe(raw=dict(BASE)).model_dump(mode="json")
    out = tmp_path / "run"
    out.mkdir()
    (out / "recipe.yaml").write_text(yaml.safe_dump(old))
    changed = load_recipe(raw=dict(BASE), overrides=["lora.r=4"]).model_dump(mode="json")
    with pytest.raises(ConfigError, match=r"recipe\.yaml.*lora\.r: 16 -> 4"):
        check_run_directory(out, changed, resume=True, overwrite=False)


# ---------------------------------------------------------------- weights verified
def _write_checkpoint(out: Path, step: int, value: float) -> Path:
    directory = out / f"checkpoint-{step}"
    directory.mkdir(parents=True)
    save_file({"lora_A": torch.full((2, 2), value)}, str(directory / "adapter_model.safetensors"))
    ckpt.write_trainer_state(directory, {"step": step})
    return directory


@pytest.mark.parametrize("value, problem", [(float("nan"), "not finite"), (float("inf"), "not finite"),
                                            (1e30, "exploded"), (0.5, None)])
def test_weights_problem_names_the_tensor(value, problem) -> None:
    found = ckpt.weights_problem({"ok": torch.zeros(3), "lora_B": torch.tensor([0.1, value])})
    if problem is None:
        assert found is None
    else:
        assert "lora_B" in found and problem in found


def test_last_good_checkpoint_skips_exploded_and_non_finite_ones(tmp_path) -> None:
    _write_checkpoint(tmp_path, 2, 0.1)
    _write_checkpoint(tmp_path, 4, 1e30)
    _write_checkpoint(tmp_path, 6, float("nan"))
    assert ckpt.last_good_checkpoint(tmp_path) == tmp_path / "checkpoint-2"
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / "checkpoint-6"


# ---------------------------------------------------------------- end to end on the tiny model
@pytest.fixture(scope="module")
def setup(tiny_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("train-data")
    data = write_identity_dataset(root, identities=12)
    schedule = write_schedule(data, root / "schedule.parquet", steps=8, batch=4)
    return tiny_checkpoint("qwen2-vl"), data, schedule


def _recipe_file(setup, path: Path, out: Path, **overrides) -> Path:
    model, data, schedule = setup
    path.write_text(yaml.safe_dump(tiny_recipe(model, data, schedule, out, **overrides)))
    return path


def test_train_cli_refuses_a_finished_run_then_overwrite_and_resume_work(setup, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    recipe = _recipe_file(setup, tmp_path / "r.yaml", out, max_steps=2, checkpoint__every=1)
    assert cli_main(["train", str(recipe), "--no-progress"]) == 0
    final = (out / "final" / "adapter_model.safetensors").read_bytes()
    log = (out / "train_log.jsonl").read_text()
    capsys.readouterr()

    assert cli_main(["train", str(recipe), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "already holds a training run" in err and "--overwrite" in err and "Traceback" not in err
    assert (out / "final" / "adapter_model.safetensors").read_bytes() == final  # nothing lost
    assert (out / "train_log.jsonl").read_text() == log

    other = _recipe_file(setup, tmp_path / "other.yaml", out, max_steps=2, checkpoint__every=1,
                         temperature__init=0.07, optimizer__lr=1e-2)
    assert cli_main(["train", str(other), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "optimizer.lr: 0.001 -> 0.01" in err and "temperature.init: 0.05 -> 0.07" in err

    assert cli_main(["train", str(other), "--overwrite", "--no-progress"]) == 0
    state = json.loads((out / "final" / "trainer_state.json").read_text())
    assert state["recipe"]["temperature"]["init"] == 0.07
    assert len((out / "train_log.jsonl").read_text().splitlines()) == 2


def test_huge_learning_rate_never_writes_an_exploded_checkpoint(setup, tmp_path, capsys) -> None:
    out = tmp_path / "huge"
    recipe = _recipe_file(setup, tmp_path / "huge.yaml", out, max_steps=4, checkpoint__every=1,
                          optimizer__lr=1e30, optimizer__warmup_steps=0, optimizer__max_grad_norm=0.0)
    assert cli_main(["train", str(recipe), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "training diverged at step 0" in err and "Traceback" not in err
    assert "no good checkpoint was written yet" in err
    assert not ckpt.list_checkpoints(out) and not (out / "final").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporaries either
