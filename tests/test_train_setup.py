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
