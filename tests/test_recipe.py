"""Recipes: validation with clear errors, --set overrides, shipped recipes are valid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from vis_embed.errors import ConfigError
from vis_embed.training.recipe import load_recipe, parse_override

REPO = Path(__file__).resolve().parents[1]
MINIMAL = {"model": "m", "data": "d.yaml", "schedule": "s.parquet", "output_dir": "out",
           "max_steps": 10, "global_batch_size": 8}


def _write(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_defaults_follow_the_paper(tmp_path: Path) -> None:
    recipe = load_recipe(_write(tmp_path, MINIMAL))
    lora = recipe.adaptation.lora
    assert recipe.adaptation.kind == "lora" and (lora.r, lora.alpha, lora.dropout) == (16, 32, 0.05)
    assert recipe.temperature.init == 0.02 and recipe.temperature.learnable
    assert recipe.gradcache.chunk_size == 0


def test_unknown_key_names_file_line_and_dotted_path(tmp_path: Path) -> None:
    path = _write(tmp_path, {**MINIMAL, "lora": {"rank": 8}})
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "rank:" in text)
    # the older top-level spelling is read as adaptation.lora; the error names its line
    with pytest.raises(ConfigError, match=rf"recipe\.yaml:{line}: field 'adaptation\.lora\.rank': unknown key"):
        load_recipe(path)


def test_every_problem_names_its_own_line(tmp_path: Path) -> None:
    """Like every YAML of the package (data/yaml_lines): FILE:LINE: field 'KEY': reason, one per problem."""
    path = tmp_path / "recipe.yaml"
    base = {key: value for key, value in MINIMAL.items() if key != "max_steps"}
    path.write_text(yaml.safe_dump(base, sort_keys=False) + "max_steps: many\nlora:\n  r: 8\n  rank: 8\n")
    lines = {text.split(":")[0].strip(): n for n, text in enumerate(path.read_text().splitlines(), 1)}
    with pytest.raises(ConfigError) as info:
        load_recipe(path)
    message = str(info.value)
    assert f"recipe.yaml:{lines['max_steps']}: field 'max_steps': " in message
    assert f"recipe.yaml:{lines['rank']}: field 'adaptation.lora.rank': unknown key" in message


def test_a_key_set_on_the_command_line_is_named_without_a_file_line(tmp_path: Path) -> None:
    path = _write(tmp_path, MINIMAL)
    with pytest.raises(ConfigError, match=r"recipe\.yaml: field 'max_steps': .*'many'"):
        load_recipe(path, ["max_steps=many"])


@pytest.mark.parametrize("changed, named", [
    ({"sampling": {"interleave_batch_size": 32, "hard_negatives": 40}}, "sampling.hard_negatives"),  # k + 1 > M
    ({"global_batch_size": 30}, "global_batch_size"),  # B not a multiple of M
    ({"sampling": {"interleave_batch_size": 32, "hard_negatives": 2, "strategy": "naive"}},
     "sampling.hard_negatives"),  # naive places no hard negatives
])
def test_a_sampling_combination_no_schedule_can_have_names_the_recipe_line(tmp_path: Path, changed: dict,
                                                                          named: str) -> None:
    """Refused when the recipe loads (not after the data and the schedule), at the recipe's own
    line and dotted key, with the scheduler's reason: the rule is ScheduleSettings', not restated."""
    from vis_embed.sampling import ScheduleSettings

    raw = {**MINIMAL, "global_batch_size": 32, "sampling": {"interleave_batch_size": 32, "hard_negatives": 0}}
    path = _write(tmp_path, {**raw, **changed})
    leaf = named.rpartition(".")[2]
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if text.strip().startswith(f"{leaf}:"))
    recipe = {**raw, **changed}
    with pytest.raises(ConfigError) as scheduler:
        ScheduleSettings(steps=10, global_batch_size=recipe["global_batch_size"], seed=0, **recipe["sampling"])
    with pytest.raises(ConfigError) as info:
        load_recipe(path)
    assert str(info.value) == f"{path}:{line}: field '{named}': {scheduler.value.reason}"


@pytest.mark.parametrize("override", ["lora.alpah=3", "lora.r=abc", "adaptation.lora.r=abc"])
def test_an_older_spelling_set_on_the_command_line_is_named_without_a_file_line(tmp_path: Path,
                                                                              override: str) -> None:
    # `--set lora.KEY` (the older top-level section, moved into adaptation.lora) once named line 0
    # for a new key, and the file's `r:` line for a value that replaced it
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(MINIMAL, sort_keys=False) + "adaptation:\n  lora:\n    r: 8\n")
    key = override.split("=")[0].split(".")[-1]
    with pytest.raises(ConfigError, match=rf"recipe\.yaml: field 'adaptation\.lora\.{key}': "):
        load_recipe(path, [override])


def test_a_broken_recipe_file_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    base = {key: value for key, value in MINIMAL.items() if key != "max_steps"}
    path.write_text(yaml.safe_dump(base, sort_keys=False) + "max_steps: 3\nmax_steps: 4\n")
    line = len(path.read_text().splitlines())
    with pytest.raises(ConfigError, match=rf"recipe\.yaml:{line}: field 'max_steps': duplicate key"):
        load_recipe(path)


def test_ill_typed_key_is_reported(tmp_path: Path) -> None:
    path = _write(tmp_path, {**MINIMAL, "max_steps": "many"})
    with pytest.raises(ConfigError, match=r"field 'max_steps'.*'many'"):
        load_recipe(path)


def test_missing_required_key_is_reported(tmp_path: Path) -> None:
    raw = dict(MINIMAL)
    del raw["model"]
    with pytest.raises(ConfigError, match=r"field 'model': required key missing"):
        load_recipe(_write(tmp_path, raw))


@pytest.mark.parametrize("override, attribute, expected", [
    ("model=/ckpt", ("model",), "/ckpt"), ("data=x.yaml", ("data",), "x.yaml"),
    ("schedule=s2.parquet", ("schedule",), "s2.parquet"), ("output_dir=o2", ("output_dir",), "o2"),
    ("max_steps=5", ("max_steps",), 5), ("global_batch_size=64", ("global_batch_size",), 64),
    ("seed=3", ("seed",), 3), ("lora.r=8", ("adaptation", "lora", "r"), 8),  # the older spelling
    ("adaptation.lora.alpha=4", ("adaptation", "lora", "alpha"), 4),
    ("lora.dropout=0", ("adaptation", "lora", "dropout"), 0),
    ("gradcache.chunk_size=3", ("gradcache", "chunk_size"), 3),
    ("temperature.learnable=false", ("temperature", "learnable"), False),
    ("lora.target_modules=[q_proj,v_proj]", ("adaptation", "lora", "target_modules"), ["q_proj", "v_proj"]),
    ("adaptation.kind=head", ("adaptation", "kind"), "head"), ("adaptation=full", ("adaptation", "kind"), "full"),
])
def test_set_overrides(tmp_path: Path, override: str, attribute: tuple[str, ...], expected: object) -> None:
    value = load_recipe(_write(tmp_path, MINIMAL), [override])
    for part in attribute:
        value = getattr(value, part)
    assert value == expected


def test_set_rejects_unknown_keys_and_bad_syntax(tmp_path: Path) -> None:
    path = _write(tmp_path, MINIMAL)
    with pytest.raises(ConfigError, match="lora.rr"):
        load_recipe(path, ["lora.rr=3"])
    with pytest.raises(ConfigError, match="KEY.PATH=VALUE"):
        parse_override("lora.r")


@pytest.mark.parametrize("name", ["visme_qwen2vl_2b", "visme_qwen25vl_3b", "visme_qwen25vl_7b", "tiny_cpu"])
def test_shipped_recipes_are_valid(name: str) -> None:
    recipe = load_recipe(REPO / "recipes" / f"{name}.yaml")
    if name.startswith("visme"):
        assert (recipe.max_steps, recipe.global_batch_size, recipe.optimizer.lr) == (3000, 1024, 1e-4)
        assert (recipe.adaptation.lora.r, recipe.adaptation.lora.alpha, recipe.temperature.init) == (16, 32, 0.02)
        assert recipe.temperature.learnable and recipe.sampling.hard_negatives == 5
        assert recipe.model_options.max_pixels == 200704 and recipe.model_options.max_length == 768
        assert recipe.deepspeed and (REPO / recipe.deepspeed).is_file()


@pytest.mark.parametrize("name", ["zero2", "zero3", "zero3_offload"])
def test_deepspeed_configs_get_their_auto_values_from_the_recipe(tmp_path: Path, name: str) -> None:
    import torch

    from vis_embed.training.deepspeed_config import fill_deepspeed_config

    recipe = load_recipe(_write(tmp_path, MINIMAL), ["optimizer.max_grad_norm=0.5"])
    config = fill_deepspeed_config(str(REPO / "ds_configs" / f"{name}.json"), recipe, 16, torch.bfloat16)
    assert "auto" not in json.dumps(config)
    assert config["train_micro_batch_size_per_gpu"] == 16 and config["gradient_accumulation_steps"] == 1
    assert config["gradient_clipping"] == 0.5 and config["bf16"]["enabled"] is True


def test_deepspeed_config_must_not_define_the_optimizer(tmp_path: Path) -> None:
    from vis_embed.training.deepspeed_config import fill_deepspeed_config

    bad = tmp_path / "ds.json"
    bad.write_text(json.dumps({"optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 2}}))
    recipe = load_recipe(_write(tmp_path, MINIMAL))
    with pytest.raises(ConfigError, match="remove 'optimizer'"):
        fill_deepspeed_config(str(bad), recipe, 4, None)


@pytest.mark.parametrize(("name", "refused"), [("zero2", False), ("zero3", True), ("zero3_offload", True)])
def test_compile_in_training_is_refused_with_zero3_before_any_compilation(tmp_path: Path, name: str,
                                                                         refused: bool) -> None:
    """ZeRO-3 gathers partitioned weights in hooks a compiled block would trace over: the recipe
    naming both fails at the model's build, saying what to change; ZeRO-2 passes."""
    from vis_embed.training.model_setup import training_compiles

    recipe = load_recipe(_write(tmp_path, MINIMAL), [f"deepspeed={REPO / 'ds_configs' / f'{name}.json'}",
                                                     "model_options.compile=true"])
    if refused:
        with pytest.raises(ConfigError, match="compile: true does not combine with ZeRO stage 3"):
            training_compiles(recipe, torch.device("cuda"))
    else:
        assert training_compiles(recipe, torch.device("cuda"))


@pytest.mark.parametrize(("compile_value", "deepspeed", "device", "expected"), [
    (None, None, "cuda", True), (None, "zero2", "cuda", True), (None, "zero3", "cuda", False),
    (None, None, "cpu", False), (False, None, "cuda", False), (True, None, "cpu", True)])
def test_training_compiles_by_default_on_cuda_only_and_never_by_default_under_zero3(
        tmp_path: Path, compile_value: bool | None, deepspeed: str | None, device: str, expected: bool) -> None:
    """null = inference's rule (on for CUDA: the measured 2B step is 0.65x of eager's), except
    under ZeRO-3, where the default is off rather than a refusal; true / false as given."""
    from vis_embed.training.model_setup import training_compiles

    overrides = [f"model_options.compile={'null' if compile_value is None else str(compile_value).lower()}"]
    if deepspeed:
        overrides.append(f"deepspeed={REPO / 'ds_configs' / f'{deepspeed}.json'}")
    recipe = load_recipe(_write(tmp_path, MINIMAL), overrides)
    assert recipe.model_options.compile is compile_value
    assert training_compiles(recipe, torch.device(device)) is expected


def test_a_deepspeed_config_that_is_not_json_names_the_file(tmp_path: Path) -> None:
    from vis_embed.training.deepspeed_config import zero_stage

    broken = tmp_path / "ds.json"
    broken.write_text("{stage: 3")
    with pytest.raises(ConfigError, match=r"ds\.json: not valid JSON"):
        zero_stage(str(broken))
