"""What the trainer is built from: the LR factor, optional extras, the recipe seed, the merge command."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import (get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup,
                          get_cosine_with_min_lr_schedule_with_warmup, get_linear_schedule_with_warmup)

from vis_embed.cli import main as vis_embed_main
from vis_embed.errors import ConfigError
from vis_embed.training import merge as merge_module
from vis_embed import integrations
from vis_embed.training.lr_schedule import lr_lambda
from vis_embed.training.recipe import load_recipe

TOTAL = 20


def _raw(**extra) -> dict:
    return {"model": "m", "data": "d.yaml", "schedule": "s.parquet", "output_dir": "out", "max_steps": TOTAL,
            "global_batch_size": 8, **extra}


def _transformers_factors(make, **kwargs) -> list[float]:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    factor = make(optimizer, **kwargs).lr_lambdas[0]
    return [factor(step) for step in range(TOTAL)]


@pytest.mark.parametrize("warmup", [0, 1, 5])
@pytest.mark.parametrize(("decay", "min_ratio", "make", "kwargs"), [
    ("cosine", 0.0, get_cosine_schedule_with_warmup, {}),
    ("cosine", 0.1, get_cosine_with_min_lr_schedule_with_warmup, {"min_lr_rate": 0.1}),
    ("linear", 0.0, get_linear_schedule_with_warmup, {}),
    ("constant", 0.0, get_constant_schedule_with_warmup, {}),
])
def test_lr_factor_is_transformers_schedule_with_the_warm_up_one_step_ahead(
        warmup: int, decay: str, min_ratio: float, make, kwargs) -> None:
    """After the warm-up: transformers' curve.  During it: transformers' value of the next step,
    so the first step trains at lr / W instead of 0 (the documented reason it is written out)."""
    if decay != "constant":
        kwargs = {**kwargs, "num_training_steps": TOTAL}
    reference = _transformers_factors(make, num_warmup_steps=warmup, **kwargs)
    ours = lr_lambda(warmup, TOTAL, decay, min_ratio)
    for step in range(TOTAL):
        expected = reference[step + 1] if step < warmup else reference[step]
        assert ours(step) == pytest.approx(expected, abs=1e-12), step
    assert ours(0) > 0


def _lrs_used(backend, steps: int) -> list[float]:
    """The LR each of ``steps`` optimiser steps runs with (no gradients: only the schedule moves)."""
    used = []
    for _ in range(steps):
        used.append(backend.lr())
        backend.step()
    return used


@pytest.mark.parametrize("decay", ["cosine", "linear", "constant"])
def test_resuming_with_another_max_steps_follows_the_new_decay_after_the_resumed_step(tmp_path: Path,
                                                                                      decay: str) -> None:
    """What docs/training.md and RESUME_MAY_CHANGE say of max_steps: the resumed step keeps the
    checkpoint's LR, later steps follow the decay over the new max_steps (the schedule itself is
    not saved); so a decaying LR gives neither run's curve, and the trainer says so."""
    from vis_embed.training.backends import TorchBackend
    from vis_embed.training.lr_schedule import lr_schedule_of, resumed_decay_note
    from vis_embed.training.recipe import OptimizerConfig

    optimizer = OptimizerConfig(lr=1.0, warmup_steps=1, decay=decay)
    short, long = lr_schedule_of(optimizer, 6), lr_schedule_of(optimizer, 10)
    first = TorchBackend(torch.nn.Linear(2, 2), optimizer=optimizer, lr_schedule=short)
    _lrs_used(first, 4)
    first.save(tmp_path)  # a checkpoint after 4 of 6 steps
    resumed = TorchBackend(torch.nn.Linear(2, 2), optimizer=optimizer, lr_schedule=long)
    resumed.load(tmp_path)  # resumed with max_steps 10
    used = _lrs_used(resumed, 6)
    assert used == pytest.approx([short(4)] + [long(step) for step in range(5, 10)])
    fresh = [long(step) for step in range(4, 10)]
    note = resumed_decay_note(optimizer, 6, 10)
    if decay == "constant":
        assert used == pytest.approx(fresh) and note is None
    else:
        assert used[0] != pytest.approx(fresh[0]) and used[1] > used[0]  # the LR jumps back up
        assert note is not None and f"{decay} LR decay" in note and "neither" in note
    assert resumed_decay_note(optimizer, 10, 10) is None and resumed_decay_note(optimizer, None, 10) is None


def test_a_deepspeed_recipe_without_deepspeed_installed_names_the_extra(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(integrations, "find_spec", lambda module: None)  # as if `import deepspeed` failed
    path = tmp_path / "r.yaml"
    path.write_text("model: m\ndata: d\nschedule: s\noutput_dir: o\nmax_steps: 1\nglobal_batch_size: 8\n"
                    "deepspeed: ds_configs/zero2.json\n")
    with pytest.raises(ConfigError, match=rf"recipe {path} needs deepspeed \(deepspeed: ds_configs/zero2.json\): "
                                          r"pip install 'vis_embed\[deepspeed\]'"):
        load_recipe(path)


def _installed_distributions(monkeypatch, *names: str) -> None:
    from importlib import metadata

    def distribution(name: str):
        if name not in names:
            raise metadata.PackageNotFoundError(name)
        return object()

    monkeypatch.setattr(metadata, "distribution", distribution)


def test_flash_attention_without_flash_attn_installed_names_the_extra(monkeypatch) -> None:
    _installed_distributions(monkeypatch)
    raw = _raw(model_options={"attn_implementation": "flash_attention_2"})
    with pytest.raises(ConfigError,
                       match=r"'flash_attention_2' needs the flash-attn package.*pip install 'vis_embed\[gpu\]'"):
        load_recipe(raw=raw)


def test_flash_attn_4_alone_does_not_pass_for_flash_attention_2(monkeypatch) -> None:
    """flash-attn-4 installs a ``flash_attn`` folder, so a module probe would find one; the
    distribution is what counts (issue 35)."""
    monkeypatch.setattr(integrations, "find_spec", lambda module: object())
    _installed_distributions(monkeypatch, "flash-attn-4")
    with pytest.raises(ConfigError, match="flash-attn package"):
        load_recipe(raw=_raw(model_options={"attn_implementation": "flash_attention_2"}))
    load_recipe(raw=_raw(model_options={"attn_implementation": "flash_attention_4"}))
    _installed_distributions(monkeypatch, "flash-attn")
    load_recipe(raw=_raw(model_options={"attn_implementation": "flash_attention_2"}))


def test_a_recipe_without_extras_does_not_ask_for_them(monkeypatch) -> None:
    asked = []
    monkeypatch.setattr(integrations, "find_spec", lambda module: asked.append(module))
    load_recipe(raw=_raw(model_options={"attn_implementation": "sdpa"}))
    assert asked == []


@pytest.mark.parametrize("seed", [-1, 2**31])
def test_seed_outside_what_set_seed_accepts_is_a_config_error(seed: int) -> None:
    with pytest.raises(ConfigError, match="seed"):
        load_recipe(raw=_raw(seed=seed))


def test_merge_command_keeps_its_flags(monkeypatch, tmp_path: Path) -> None:
    calls = []

    def fake_merge(adapter, out, base=None, dtype="checkpoint"):
        calls.append((adapter, out, base, dtype))
        return Path(out)

    monkeypatch.setattr(merge_module, "merge_adapter", fake_merge)
    out = str(tmp_path / "merged")
    assert vis_embed_main(["merge", "run/final", "--out", out, "--base", "base-model", "--dtype", "float32"]) == 0
    assert vis_embed_main(["merge", "run/final", "--out", out]) == 0
    # No --dtype: the checkpoint's own dtype (spelled "auto" before "auto" came to mean "by device").
    assert calls == [("run/final", out, "base-model", "float32"), ("run/final", out, None, "checkpoint")]
