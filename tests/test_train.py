"""The trainer end to end on a tiny Qwen-VL: logs, checkpoints, resume after SIGKILL, guards, merge."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from vis_embed.errors import ConfigError, FingerprintMismatchError
from vis_embed.training.recipe import load_recipe
from vis_embed.training.trainer import Trainer, TrainingDivergedError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _training_fixtures import tiny_recipe, write_identity_dataset, write_schedule  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_torch_thread")



@pytest.fixture(scope="module")
def setup(tiny_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("train-data")
    data = write_identity_dataset(root, identities=12)
    schedule = write_schedule(data, root / "schedule.parquet", steps=8, batch=4)
    return tiny_checkpoint("qwen2-vl"), data, schedule


def _recipe(setup, out: Path, **overrides):
    model, data, schedule = setup
    return load_recipe(raw=tiny_recipe(model, data, schedule, out, **overrides))


def _log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


def _adapter(directory: Path) -> dict[str, torch.Tensor]:
    return load_file(str(directory / "adapter_model.safetensors"))


def test_gradcache_and_plain_runs_end_with_the_same_adapter(setup, tmp_path) -> None:
    plain = Trainer(_recipe(setup, tmp_path / "plain", max_steps=3)).train()
    cached = Trainer(_recipe(setup, tmp_path / "cached", max_steps=3, gradcache__chunk_size=1)).train()
    a, b = _adapter(plain), _adapter(cached)
    assert set(a) == set(b) and a
    # Adam divides each element's step by its own gradient scale, so where a gradient is ~0 the
    # float rounding that differs between chunked and whole-batch forwards (it depends on the
    # CPU's kernels: AMX vs AVX-512) can move an element by ~1% of a step (lr 1e-3 here).
    # A wrong GradCache gradient moves elements by whole steps; 5e-5 = 5% of a step catches it.
    for name in a:
        assert torch.allclose(a[name], b[name], rtol=1e-4, atol=5e-5), name
    assert [r["loss"] for r in _log(tmp_path / "plain")] == pytest.approx(
        [r["loss"] for r in _log(tmp_path / "cached")], rel=1e-5)


def test_tau_is_learned_logged_and_checkpoints_are_peft_adapters(setup, tmp_path) -> None:
    out = tmp_path / "run"
    final = Trainer(_recipe(setup, out, max_steps=4, temperature__init=0.02, checkpoint__every=2,
                            gradcache__chunk_size=2)).train()
    log = _log(out)
    assert [r["step"] for r in log] == [0, 1, 2, 3]
    for key in ("loss", "tau", "grad_norm", "lr", "samples_per_s"):
        assert all(isinstance(r[key], float) for r in log), key
    assert log[-1]["tau"] != pytest.approx(0.02, rel=1e-3)  # tau moved
    state = json.loads((final / "trainer_state.json").read_text())
    assert state["step"] == 4 and state["tau"] == pytest.approx(log[-1]["tau"], rel=1e-6)
    assert (out / "checkpoint-2" / "adapter_model.safetensors").is_file()
    assert not list(out.glob(".checkpoint-*"))  # no temporary directories left behind

    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    base = AutoModelForImageTextToText.from_pretrained(setup[0])
    PeftModel.from_pretrained(base, str(final))  # plain peft format
    assert (final / "adapter_config.json").is_file()


# `vis-embed train` that SIGKILLs itself once step 3 is logged (after checkpoint-2): the hook
# lives here, not in the trainer.
_KILLED_AFTER_STEP_3 = """
import os, signal, sys
from vis_embed.cli import main
from vis_embed.training.run_log import RunLogger
log = RunLogger.log
def log_then_die(self, step, values):
    log(self, step, values)
    if step + 1 == 3:
        os.kill(os.getpid(), signal.SIGKILL)
RunLogger.log = log_then_die
sys.exit(main(["train", sys.argv[1]]))
"""


@pytest.mark.slow
def test_resume_after_sigkill_matches_an_uninterrupted_run(setup, tmp_path) -> None:
    overrides = dict(max_steps=6, checkpoint__every=2, lora__dropout=0.1, gradcache__chunk_size=2)
    uninterrupted = Trainer(_recipe(setup, tmp_path / "straight", **overrides)).train()

    out = tmp_path / "killed"
    recipe_path = tmp_path / "killed.yaml"
    model, data, schedule = setup
    recipe_path.write_text(yaml.safe_dump(tiny_recipe(model, data, schedule, out, **overrides)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", _KILLED_AFTER_STEP_3, str(recipe_path)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert (out / "checkpoint-2").is_dir() and not (out / "final").exists()

    trainer = Trainer(load_recipe(recipe_path), resume=True)
    assert trainer.start_step == 2  # really resumed (a restart from 0 would also be deterministic)
    resumed = trainer.train()
    a, b = _adapter(uninterrupted), _adapter(resumed)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert [r["step"] for r in _log(out)] == list(range(6))
    assert [r["loss"] for r in _log(out)] == pytest.approx([r["loss"] for r in _log(tmp_path / "straight")])


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(setup, tmp_path, monkeypatch) -> None:
    from vis_embed.training.losses import objective as objective_module  # the trainer's loss calls go through it

    real_loss = objective_module.info_nce_loss
    calls = {"n": 0}

    def loss_turning_nan(*args, **kwargs):
        calls["n"] += 1
        loss = real_loss(*args, **kwargs)
        return loss * float("nan") if calls["n"] > 2 else loss

    monkeypatch.setattr(objective_module, "info_nce_loss", loss_turning_nan)
    out = tmp_path / "nan"
    with pytest.raises(TrainingDivergedError, match=r"step 2: loss is nan.*checkpoint-2"):
        Trainer(_recipe(setup, out, max_steps=4, checkpoint__every=2)).train()
    assert (out / "checkpoint-2").is_dir() and not (out / "final").exists()


def test_schedule_of_other_data_is_refused(setup, tmp_path) -> None:
    model, data, _schedule = setup
    other_root = tmp_path / "other"
    other = write_identity_dataset(other_root, identities=12, seed=1)
    schedule = write_schedule(other, tmp_path / "other.parquet", steps=8, batch=4)
    (other_root / "rec.jsonl").write_text((other_root / "rec.jsonl").read_text().replace("obj011", "obj012"))
    with pytest.raises(FingerprintMismatchError, match="different training data"):
        Trainer(load_recipe(raw=tiny_recipe(model, other, schedule, tmp_path / "o")))


def test_a_schedule_built_with_other_settings_is_refused_naming_each_key(setup, tmp_path) -> None:
    """An ablation arm (naive, M 2, seed 123) pointed at another arm's file (identity-aware, M 4,
    seed 0) must not train on its batches while recipe.yaml and the model card record its own."""
    model, data, schedule = setup  # M = B = 4, k 0, identity_aware, seed 0, 8 steps
    raw = tiny_recipe(model, data, schedule, tmp_path / "arm", seed=123,
                      sampling={"strategy": "naive", "hard_negatives": 0, "interleave_batch_size": 2})
    with pytest.raises(ConfigError) as info:
        Trainer(load_recipe(raw=raw))
    message = str(info.value)
    assert message.startswith(f"schedule {schedule} was built with other settings than the recipe's: ")
    for difference in ("sampling.interleave_batch_size: 4 in the file, 2 in the recipe",
                       "seed: 0 in the file, 123 in the recipe",
                       "sampling.strategy: 'identity_aware' in the file, 'naive' in the recipe"):
        assert difference in message
    assert "global_batch_size" not in message and "max_steps" not in message  # only what differs
    # steps may exceed max_steps (a run may stop early), never fall short of it
    with pytest.raises(ConfigError, match="max_steps: the file has 8 steps, fewer than the recipe's 9"):
        Trainer(load_recipe(raw=tiny_recipe(model, data, schedule, tmp_path / "long", max_steps=9)))


def test_missing_schedule_is_built_first_and_announced(setup, tmp_path, caplog) -> None:
    model, data, _schedule = setup
    schedule = tmp_path / "new_schedule.parquet"
    raw = tiny_recipe(model, data, schedule, tmp_path / "out", max_steps=2,
                      sampling={"interleave_batch_size": 4, "hard_negatives": 0})
    with caplog.at_level(logging.INFO, logger="vis_embed"):
        Trainer(load_recipe(raw=raw))
    assert schedule.is_file()
    assert "building it first" in caplog.text


def test_merge_writes_a_checkpoint_the_embedder_loads(setup, tmp_path) -> None:
    from vis_embed.model.runtime.embedder import Embedder
    from vis_embed.training.merge import merge_adapter

    final = Trainer(_recipe(setup, tmp_path / "run", max_steps=2, optimizer__lr=5e-2)).train()
    merged = merge_adapter(final, tmp_path / "merged")
    items = [{"image": None, "text": "a red square"}, {"image": None, "text": "a blue circle"}]
    with_adapter = Embedder.from_pretrained(setup[0], adapter=str(final)).encode(items)
    from_merged = Embedder.from_pretrained(str(merged)).encode(items)
    base = Embedder.from_pretrained(setup[0]).encode(items)
    assert abs(with_adapter - from_merged).max() < 1e-4
    assert abs(with_adapter - base).max() > 1e-3  # the adapter changed something


def test_loss_decreases_on_a_small_identity_dataset(tiny_checkpoint, tmp_path) -> None:
    data = write_identity_dataset(tmp_path / "data", identities=12)
    schedule = write_schedule(data, tmp_path / "schedule.parquet", steps=12, batch=8)
    raw = tiny_recipe(tiny_checkpoint("qwen2-vl"), data, schedule, tmp_path / "run", max_steps=12,
                      global_batch_size=8, optimizer__lr=5e-3, optimizer__warmup_steps=3,
                      temperature__init=0.1, temperature__learnable=False, lora__r=8, lora__alpha=16,
                      lora__vision=True, gradcache__chunk_size=4)
    Trainer(load_recipe(raw=raw)).train()
    losses = [r["loss"] for r in _log(tmp_path / "run")]
    first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
    assert last < 0.5 * first, losses


def test_only_complete_checkpoints_count_and_keep_last_prunes_the_oldest(tmp_path) -> None:
    from vis_embed.training import checkpoint as ckpt

    for step in (2, 4, 10):
        (tmp_path / f"checkpoint-{step}").mkdir()
        ckpt.write_trainer_state(tmp_path / f"checkpoint-{step}", {"step": step})
    (tmp_path / "checkpoint-12").mkdir()  # no trainer_state.json: an interrupted copy, never resumed from
    (tmp_path / ".checkpoint-14.tmp-abc").mkdir()
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / "checkpoint-10"  # numeric, not lexical order
    ckpt.prune_checkpoints(tmp_path, keep_last=2)
    assert [step for step, _ in ckpt.list_checkpoints(tmp_path)] == [4, 10]


def test_gradient_checkpointing_with_lora_dropout_gives_the_same_adapter(setup, tmp_path) -> None:
    # Checkpointing re-runs each layer's forward in backward; with GradCache's RNG replay and
    # LoRA dropout on, the result must not change.
    overrides = dict(max_steps=2, lora__dropout=0.2, gradcache__chunk_size=2)
    plain = Trainer(_recipe(setup, tmp_path / "plain", **overrides)).train()
    checkpointed = Trainer(_recipe(setup, tmp_path / "ckpt", model_options={"dtype": "float32",
                                                                            "gradient_checkpointing": True},
                                   **overrides)).train()
    a, b = _adapter(plain), _adapter(checkpointed)
    for name in a:
        assert torch.allclose(a[name], b[name], rtol=1e-5, atol=1e-7), name


@pytest.mark.parametrize(("chunk_size", "announced"), [(0, False), (2, False), (4, True), (8, False)])
def test_a_plain_step_wider_than_a_chunk_is_announced(setup, tmp_path, caplog, chunk_size, announced) -> None:
    """4 queries + 4 candidates per step: chunk 4 runs them as one forward of 8 members (the
    sides-fit shortcut), which exceeds chunk_size; chunk 8 holds them anyway, chunk 2 chunks."""
    with caplog.at_level(logging.INFO, logger="vis_embed"):
        Trainer(_recipe(setup, tmp_path / "run", max_steps=1, gradcache__chunk_size=chunk_size))
    assert ("one plain forward of 8 members" in caplog.text) == announced


def test_adaptation_full_resumes_and_warm_starts_from_its_saved_weights(setup, tmp_path) -> None:
    """``adaptation: full``: --resume and init_adapter load the checkpoint's weights into the
    model (they once kept the base's: the checkpoint's key names did not match the module's)."""
    import shutil

    from transformers import AutoModelForImageTextToText

    out = tmp_path / "full"
    recipe = _recipe(setup, out, max_steps=2, checkpoint__every=1, adaptation="full")
    final = Trainer(recipe).train()
    checkpoint = out / "checkpoint-1"
    saved = AutoModelForImageTextToText.from_pretrained(checkpoint).state_dict()
    base = AutoModelForImageTextToText.from_pretrained(setup[0]).state_dict()
    assert any(not torch.equal(saved[name], base[name]) for name in saved)  # training moved the weights

    def assert_holds(trainer: Trainer, expected: dict[str, torch.Tensor]) -> None:
        own = trainer.model.backbone.state_dict()
        assert own.keys() == expected.keys()
        for name, value in expected.items():
            assert torch.equal(own[name], value), name

    shutil.rmtree(final)
    shutil.rmtree(out / "checkpoint-2", ignore_errors=True)
    resumed = Trainer(recipe, resume=True)
    assert resumed.start_step == 1
    assert_holds(resumed, saved)
    warm = Trainer(_recipe(setup, tmp_path / "warm", max_steps=2, adaptation="full", init_adapter=str(checkpoint)))
    assert_holds(warm, saved)
