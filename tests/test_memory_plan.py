"""``gradcache.chunk_size: auto`` / ``model_options.gradient_checkpointing: auto``: the largest
chunk that fits, checkpointing only when needed, decided from a measured probe and the card's
free memory (probe and budget are stubbed here: no CUDA on the test machines; the last test
measures for real where a GPU is present), logged and written to the run directory."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from vis_embed.errors import ConfigError
from vis_embed.training import memory_plan
from vis_embed.training.memory_plan import AUTO, MIN_CHUNK, MemoryPlan, agree, plan_memory
from vis_embed.training.recipe import load_recipe

from _training_fixtures import tiny_recipe, write_identity_dataset, write_schedule

CUDA = torch.device("cuda")
MIB = 2**20


class _Model:
    def __init__(self) -> None:
        self.checkpointing = False

    def enable_gradient_checkpointing(self) -> None:
        self.checkpointing = True


class _Member:
    def __init__(self, length: int) -> None:
        self.length = length


def _plan(monkeypatch: pytest.MonkeyPatch, budget_members: float, checkpointed_members: float, *,
          chunk_size: int | str = AUTO, checkpointing: bool | str = AUTO, local: int = 16) -> tuple[MemoryPlan, _Model]:
    """A plan where ``budget_members`` members fit without checkpointing and
    ``checkpointed_members`` with it (probe: 1 MiB a member, 1/k MiB checkpointed)."""
    model = _Model()
    monkeypatch.setattr(memory_plan, "_budget", lambda model, device: budget_members * MIB)
    monkeypatch.setattr(memory_plan, "_probe", lambda model, collate, members, device:
                        MIB * (budget_members / checkpointed_members if model.checkpointing else 1.0))
    plan = plan_memory(model, lambda members: {}, lambda: [_Member(n) for n in (5, 9, 3, 7, 8)],
                       chunk_size=chunk_size, gradient_checkpointing=checkpointing, local_batch_size=local,
                       device=CUDA)
    return plan, model


def test_when_the_whole_local_batch_fits_it_is_one_forward_without_checkpointing(monkeypatch) -> None:
    plan, model = _plan(monkeypatch, budget_members=100, checkpointed_members=400)
    assert (plan.chunk_size, plan.gradient_checkpointing, model.checkpointing) == (16, False, False)
    assert plan.measured["probe_tokens"] == [9, 8, 7, 5]  # the longest members are probed


def test_the_largest_chunk_that_fits_without_checkpointing(monkeypatch) -> None:
    plan, model = _plan(monkeypatch, budget_members=20, checkpointed_members=80)
    assert (plan.chunk_size, plan.gradient_checkpointing, model.checkpointing) == (15, False, False)


def test_checkpointing_only_when_chunks_would_be_tiny(monkeypatch) -> None:
    plan, model = _plan(monkeypatch, budget_members=MIN_CHUNK - 1, checkpointed_members=40)
    assert (plan.chunk_size, plan.gradient_checkpointing, model.checkpointing) == (16, True, True)
    plan, model = _plan(monkeypatch, budget_members=MIN_CHUNK - 1, checkpointed_members=12)
    assert (plan.chunk_size, plan.gradient_checkpointing) == (12, True)
    assert "bytes_per_member_checkpointed" in plan.measured


def test_checkpointing_off_in_the_recipe_takes_small_chunks_instead(monkeypatch) -> None:
    plan, model = _plan(monkeypatch, budget_members=3, checkpointed_members=40, checkpointing=False)
    assert (plan.chunk_size, plan.gradient_checkpointing, model.checkpointing) == (3, False, False)


def test_a_given_chunk_turns_checkpointing_on_only_if_it_does_not_fit(monkeypatch) -> None:
    plan, _ = _plan(monkeypatch, budget_members=10, checkpointed_members=40, chunk_size=8)
    assert (plan.chunk_size, plan.gradient_checkpointing) == (8, False)
    plan, _ = _plan(monkeypatch, budget_members=6, checkpointed_members=40, chunk_size=8)
    assert (plan.chunk_size, plan.gradient_checkpointing) == (8, True)
    # chunk_size 0 (and any chunk >= the local batch) holds both sides: 32 members
    plan, _ = _plan(monkeypatch, budget_members=20, checkpointed_members=40, chunk_size=0)
    assert (plan.chunk_size, plan.gradient_checkpointing) == (0, True)


def test_nothing_fits_is_a_config_error_with_the_figures(monkeypatch) -> None:
    with pytest.raises(ConfigError, match="not even one member fits.*budget_bytes"):
        _plan(monkeypatch, budget_members=0.2, checkpointed_members=0.5)


def test_off_cuda_auto_keeps_the_defaults() -> None:
    model = _Model()
    plan = plan_memory(model, lambda members: {}, lambda: pytest.fail("no probe off CUDA"), chunk_size=AUTO,
                       gradient_checkpointing=AUTO, local_batch_size=6, device=torch.device("cpu"))
    assert (plan.chunk_size, plan.gradient_checkpointing, model.checkpointing) == (6, False, False)


def test_ranks_agree_on_the_most_careful_plan() -> None:
    plans = [MemoryPlan(12, False, "a"), MemoryPlan(9, False, "b"), MemoryPlan(16, True, "c")]
    assert (agree(plans).chunk_size, agree(plans).gradient_checkpointing) == (9, True)
    assert agree([MemoryPlan(0, False, "off"), MemoryPlan(4, False, "d")]).chunk_size == 4


def test_recipe_takes_auto_and_refuses_other_words(tmp_path: Path) -> None:
    raw = tiny_recipe(tmp_path, tmp_path, tmp_path, tmp_path, gradcache__chunk_size="auto",
                      model_options__gradient_checkpointing="auto")
    recipe = load_recipe(raw=raw)
    assert (recipe.gradcache.chunk_size, recipe.model_options.gradient_checkpointing) == ("auto", "auto")
    for key, value in (("gradcache__chunk_size", "big"), ("gradcache__chunk_size", -1),
                       ("model_options__gradient_checkpointing", "sometimes")):
        with pytest.raises(ConfigError, match=key.split("__")[1]):
            load_recipe(raw=tiny_recipe(tmp_path, tmp_path, tmp_path, tmp_path, **{key: value}))


@pytest.mark.usefixtures("one_torch_thread")
def test_a_run_with_auto_records_its_plan(tiny_checkpoint, tmp_path: Path, caplog) -> None:
    from vis_embed.training.trainer import Trainer

    data = write_identity_dataset(tmp_path / "data", identities=6)
    schedule = write_schedule(data, tmp_path / "schedule.parquet", steps=1, batch=4)
    recipe = load_recipe(raw=tiny_recipe(tiny_checkpoint("qwen2-vl"), data, schedule, tmp_path / "run", max_steps=1,
                                         gradcache__chunk_size="auto", model_options__gradient_checkpointing="auto"))
    with caplog.at_level(logging.INFO, logger="vis_embed"):
        trainer = Trainer(recipe)
        # what a CUDA probe would measure: the first step's members, both sides, with their lengths
        members = trainer._members(0)
        assert len(members) == 8 and all(member.length > 0 for member in members)
        trainer.train()
    recorded = json.loads((tmp_path / "run" / memory_plan.PLAN_FILE).read_text())
    assert (recorded["chunk_size"], recorded["gradient_checkpointing"]) == (4, False)
    assert "memory plan: gradcache.chunk_size 4" in caplog.text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="measures CUDA memory")
def test_the_probe_measures_less_per_member_with_checkpointing(tiny_checkpoint) -> None:
    from vis_embed.model.network.embedding_model import EmbeddingModel

    model = EmbeddingModel.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cuda", dtype="float32")
    model.add_lora(r=4, alpha=8, dropout=0.0)
    model.train()
    members = model.prepare([{"text": "a long description of a red car " * 20}] * 4)
    plain = memory_plan._probe(model, model.collate, members, CUDA)
    model.enable_gradient_checkpointing()
    checkpointed = memory_plan._probe(model, model.collate, members, CUDA)
    assert 0 < checkpointed < plain
