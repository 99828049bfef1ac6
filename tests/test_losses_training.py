"""Each ``loss.kind`` trains 2 steps on the tiny recipe (tiny random Qwen2-VL), changes the
vectors, and its ``final/`` evaluates with ``vis-embed eval``; the trainer hands the loss the
schedule's designated hard negatives; the recipe validates the loss section."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from vis_embed.cli import main as cli_main
from vis_embed.errors import ConfigError
from vis_embed.model.runtime.embedder import Embedder
from vis_embed.training.recipe import load_recipe
from vis_embed.training.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _training_fixtures import tiny_recipe, write_identity_dataset  # noqa: E402
from eval_fakes import make_identity_benchmark  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ITEMS = [{"text": "a red square"}, {"text": "a blue circle"}]


def write_data_with_hard_negatives(root: Path) -> Path:
    """The toy identity dataset with every row's designated hard negative: the next identity's first image."""
    data = write_identity_dataset(root, identities=8)
    records = root / "rec.jsonl"
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    for row in rows:
        identity = int(row["identity"][3:])
        row["hard_negatives"] = [f"id{(identity + 1) % 8:03d}_0"]
    records.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return data


@pytest.fixture(scope="module")
def setup(tiny_checkpoint, tmp_path_factory) -> tuple[Path, Path, Path, Path]:
    """(base, data, schedule with designated hard negatives, eval manifest)."""
    from vis_embed.data import load_train_config
    from vis_embed.training.schedule_source import write_recipe_schedule

    root = tmp_path_factory.mktemp("losses")
    data = write_data_with_hard_negatives(root / "data")
    schedule = write_recipe_schedule(load_train_config(data), root / "schedule.parquet", steps=2, global_batch_size=4,
                                     seed=0, sampling={"interleave_batch_size": 4, "hard_negatives": 1},
                                     show_progress=False)
    bench = make_identity_benchmark(root / "bench", n_views=2)
    manifest = bench["candidates"].parent / "benchmark.yaml"
    manifest.write_text(yaml.safe_dump({"name": "tiny", "datasets": [
        {"name": "Cand", "benchmark": "MVEB", "meta_task": "ID-Rec", "split": "IND", "layout": "candidates",
         "path": "cand.jsonl", "image_root": "images", "query_instruction": "Find the same object.",
         "candidate_instruction": "Represent the image."}]}))
    return tiny_checkpoint("qwen2-vl"), data, schedule, manifest


def _recipe(setup, out: Path, **overrides):
    base, data, schedule, _manifest = setup
    return load_recipe(raw=tiny_recipe(base, data, schedule, out, max_steps=2, optimizer__lr=5e-2,
                                       sampling__hard_negatives=1, **overrides))


def test_the_trainer_gives_the_loss_the_designated_pairs_of_the_schedule(setup, tmp_path) -> None:
    trainer = Trainer(_recipe(setup, tmp_path / "run"))
    batch = next(trainer.schedule.steps())
    prepared = trainer.prepare_step(batch)
    roles = [member.role for member in batch.members()]
    assert roles.count("hard_negative") >= 1
    pairs = {tuple(pair) for pair in prepared.designated.nonzero().tolist()}
    expected = {(row - 1, row) for row, role in enumerate(roles) if role == "hard_negative"}
    assert pairs == expected | {(j, i) for i, j in expected}


@pytest.mark.parametrize("kind", ["infonce", "two_tier", "two_tier_margin", "triplet_hinge"])
def test_each_loss_kind_trains_changes_the_vectors_and_evaluates(setup, tmp_path, kind: str) -> None:
    base, _data, _schedule, manifest = setup
    # The toy identities differ in background colour: a random model already ranks them, so
    # wide margins keep the hinges active (margin 0.05 gives a zero loss and no update here).
    final = Trainer(_recipe(setup, tmp_path / "run", loss__kind=kind, loss__two_tier_margin={"margin": 1.0},
                            loss__triplet_hinge={"margin": 1.0})).train()
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert len(log) == 2 and all(math.isfinite(row["loss"]) and row["loss"] > 0 for row in log)
    state = json.loads((final / "trainer_state.json").read_text())
    assert state["recipe"]["loss"]["kind"] == kind
    plain = Embedder.from_pretrained(base, device="cpu", dtype="float32").encode(ITEMS)
    trained = Embedder.from_pretrained(base, adapter=final, device="cpu", dtype="float32").encode(ITEMS)
    assert np.abs(plain - trained).max() > 1e-4
    out = tmp_path / "eval"
    assert cli_main(["eval", "--model", str(base), "--adapter", str(final), "--benchmark", str(manifest),
                     "--out", str(out), "--device", "cpu", "--quiet", "--no-pictures"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["model"]["adapter"] == str(final)


def test_loss_section_is_validated(setup, tmp_path) -> None:
    recipe = _recipe(setup, tmp_path / "r", loss__kind="two_tier_margin",
                     loss__two_tier_margin={"weight": 0.5, "margin": 0.2})
    assert (recipe.loss.kind, recipe.loss.two_tier_margin.weight, recipe.loss.two_tier_margin.margin) == \
        ("two_tier_margin", 0.5, 0.2)
    nearid = _recipe(setup, tmp_path / "n", loss__kind="two_tier").loss.two_tier
    assert (nearid.alpha, nearid.temperature) == (0.5, 0.07)  # NearID's alpha and fixed tau
    assert _recipe(setup, tmp_path / "t", loss__two_tier={"alpha": 1.0, "temperature": None}).loss.two_tier.alpha == 1.0
    # the margin variant's old keys under two_tier are refused with a pointer to where they went
    with pytest.raises(ConfigError, match="loss.two_tier.*two_tier_margin"):
        _recipe(setup, tmp_path / "old", loss__kind="two_tier", loss__two_tier={"weight": 0.5, "margin": 0.2})
    assert recipe.loss.triplet_hinge.margin == 0.05 and recipe.loss.identity_mask is True
    assert _recipe(setup, tmp_path / "d").loss.kind == "infonce"  # the default is VisME's loss
    with pytest.raises(ConfigError, match="loss.kind"):
        _recipe(setup, tmp_path / "x", loss__kind="cosent")
    with pytest.raises(ConfigError, match="loss.two_tier_margin.margin"):
        _recipe(setup, tmp_path / "y", loss__two_tier_margin={"margin": -1})
    with pytest.raises(ConfigError, match="loss.two_tier.temperature"):
        _recipe(setup, tmp_path / "w", loss__two_tier={"temperature": 0})
    with pytest.raises(ConfigError, match="loss.triplet_hinge.weight"):
        _recipe(setup, tmp_path / "z", loss__triplet_hinge={"weight": 1})
