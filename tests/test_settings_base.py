"""One settings base (config.Settings): every settings class refuses ``inf`` and ``nan`` in each
float field, from Python (a SettingsError naming the field), from a recipe key (naming the key)
and from a flag (exit 2 naming the flag).  The classes and their float fields are discovered by
introspection, so a new settings class or float field is covered without editing this file."""

from __future__ import annotations

import ast
import importlib
import math
import types
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from vis_embed.cli import main
from vis_embed.config import FileRecord, Settings
from vis_embed.errors import ConfigError, DataError, SettingsError
from vis_embed.training.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("vis_embed",)
# pydantic models that are no settings: HTTP request bodies answer in OpenAI's error schema
REQUEST_BODIES = {"EmbeddingRequest", "SearchRequest"}
HOSTILE = (math.inf, -math.inf, math.nan, "inf", "nan")


def _modules_with_models() -> dict[str, set[str]]:
    """module name -> names of the classes it declares on a pydantic or settings base (AST)."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.bases}
            if names and ("pydantic" in path.read_text(encoding="utf-8") or "Settings" in path.read_text()):
                module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                found[module] = names
    return found


def _settings_classes() -> list[type[Settings]]:
    for module in _modules_with_models():
        importlib.import_module(module)
    seen: list[type[Settings]] = []
    stack = list(Settings.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls not in seen:
            seen.append(cls)
            stack.extend(cls.__subclasses__())
    return sorted(seen, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


def _with_infinity(annotation: typing.Any, value: typing.Any) -> typing.Any:
    """A value of ``annotation`` holding ``value`` where a float goes, or None if no float fits."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is float:
        return value
    if origin is typing.Annotated:
        return _with_infinity(args[0], value)
    if origin in (typing.Union, types.UnionType):
        return next((found for arg in args if (found := _with_infinity(arg, value)) is not None), None)
    if origin in (list, tuple):
        inner = [_with_infinity(arg, value) for arg in args if arg is not Ellipsis]
        if inner and all(item is not None for item in inner):
            return inner if origin is list else tuple(inner)
    return None


def _float_fields() -> list[tuple[type[Settings], str]]:
    return [(cls, name) for cls in _settings_classes() for name, field in cls.model_fields.items()
            if _with_infinity(field.annotation, math.inf) is not None]


FLOAT_FIELDS = _float_fields()


def test_every_pydantic_model_of_the_packages_is_on_the_settings_base() -> None:
    """Two bases, each for one kind of thing: a setting (Settings: unknown keys and inf/nan refused)
    and a record of a file vis_embed writes and reads back (FileRecord: unknown keys kept); the
    server's request bodies answer in OpenAI's error shape."""
    models = [cls for module in _modules_with_models() for cls in vars(importlib.import_module(module)).values()
              if isinstance(cls, type) and issubclass(cls, BaseModel) and cls.__module__ == module]
    strays = {cls.__name__ for cls in models if not issubclass(cls, (Settings, FileRecord))} \
        - REQUEST_BODIES - {"Settings", "FileRecord"}
    assert strays == set()


def test_the_discovery_finds_the_known_float_settings() -> None:
    names = {f"{cls.__name__}.{name}" for cls, name in FLOAT_FIELDS}
    assert {"ServerSettings.max_wait_ms", "ScheduleSettings.size_exponent", "SamplingOptions.size_exponent",
            "OptimizerConfig.lr", "OptimizerConfig.betas", "LossConfig.matryoshka_weights",
            "LoraOptions.alpha"} <= names


@pytest.mark.parametrize("value", HOSTILE, ids=str)
@pytest.mark.parametrize("cls, name", FLOAT_FIELDS, ids=lambda x: getattr(x, "__name__", x))
def test_every_float_field_refuses_inf_and_nan(cls, name, value) -> None:
    bad = _with_infinity(cls.model_fields[name].annotation, value)
    with pytest.raises(ValidationError) as caught:
        cls.model_validate({name: bad})
    # refused at this field: as not finite (or, for a field that takes numbers only, a string as no number)
    assert any(error["loc"][:1] == (name,) for error in caught.value.errors())
    with pytest.raises(SettingsError, match=name):  # built directly: the one error type, naming the field
        cls(**{name: bad})


def test_the_settings_error_is_a_data_error_and_a_config_error() -> None:
    from vis_embed.serving.settings import ServerSettings

    with pytest.raises(SettingsError) as caught:
        ServerSettings(model_name="m", max_wait_ms=math.inf)
    assert isinstance(caught.value, DataError) and isinstance(caught.value, ConfigError)
    assert caught.value.field == "max_wait_ms"


REQUIRED = {"model": "m", "data": "d.yaml", "schedule": "s.parquet", "output_dir": "out", "max_steps": 1,
            "global_batch_size": 2}


@pytest.mark.parametrize("key", ["optimizer.lr", "sampling.size_exponent", "temperature.init",
                                 "adaptation.lora.alpha", "gradcache.max_padding", "loss.two_tier.alpha"])
@pytest.mark.parametrize("value", [".inf", ".nan", "-.inf"])
def test_a_recipe_key_refuses_inf_and_nan_naming_the_key(key, value, tmp_path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("\n".join(f"{k}: {v}" for k, v in REQUIRED.items()) + "\n")
    with pytest.raises(ConfigError, match=rf"field '{key}'"):
        load_recipe(recipe, overrides=[f"{key}={value}"])


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
@pytest.mark.parametrize("command, flag", [
    (["schedule", "--data", "none.yaml", "--steps", "2", "--global-batch-size", "8", "--interleave-batch-size", "4",
      "--out", "s.parquet", "--no-progress"], "--size-exponent"),
    (["serve", "--model", "/nonexistent/model"], "--max-wait-ms"),
    (["serve", "--model", "/nonexistent/model"], "--request-timeout"),
    (["mine-negatives", "--model", "/nonexistent/model", "--data", "none.jsonl", "--out", "o.jsonl"],
     "--min-positive-similarity"),
])
def test_a_float_flag_refuses_inf_and_nan_with_exit_2_naming_it(command, flag, value, capsys, monkeypatch,
                                                                tmp_path) -> None:
    from vis_embed.serving import cli as serve_cli

    monkeypatch.setattr(serve_cli, "tune_malloc", lambda *args: {})  # leave this process's allocator alone
    monkeypatch.chdir(tmp_path)
    try:
        code = main([*command, f"{flag}={value}"])
    except SystemExit as exc:  # argparse's own refusal (a flag that is no settings field)
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err


@pytest.mark.parametrize("value", [".inf", ".nan"])
def test_train_refuses_an_infinite_recipe_key_with_exit_2(value, tmp_path, capsys) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("\n".join(f"{k}: {v}" for k, v in REQUIRED.items()) + f"\nsampling:\n  size_exponent: {value}\n")
    assert main(["train", str(recipe)]) == 2
    err = capsys.readouterr().err
    line = len(REQUIRED) + 2  # the YAML line of size_exponent
    assert f"recipe.yaml:{line}: field 'sampling.size_exponent'" in err and "Traceback" not in err


def test_a_validators_message_comes_out_as_written_from_every_entry_point(tmp_path) -> None:
    """A validator raising a plain ValueError: its message, without pydantic's "Value error, "
    prefix or an echo of the input, as one error type (SettingsError) whatever the entry point."""
    from pydantic import model_validator

    from vis_embed.config import validate_document, validated

    class Checked(Settings):
        low: int = 0
        high: int = 1

        @model_validator(mode="after")
        def _ordered(self) -> "Checked":
            if self.low > self.high:
                raise ValueError(f"low {self.low} exceeds high {self.high}")
            return self

    entry_points = {
        "direct": lambda: Checked(low=2),
        "validated": lambda: validated(Checked, {"low": 2}, "x.yaml"),
        "validate_document": lambda: validate_document(Checked, {"low": 2}, "x.yaml"),
    }
    for name, build in entry_points.items():
        with pytest.raises(SettingsError) as caught:
            build()
        text = str(caught.value)  # a check of the whole model: no field to name, no '(root)'
        assert text in ("low 2 exceeds high 1", "x.yaml: low 2 exceeds high 1"), (name, text)
    with pytest.raises(SettingsError) as caught:  # a recipe validator names the key it is about
        load_recipe(raw={**REQUIRED, "loss": {"two_tier": {"weight": 1}}})
    assert str(caught.value).startswith("recipe: field 'loss.two_tier.weight': 'weight' belongs to the margin variant")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("\n".join(f"{k}: {v}" for k, v in REQUIRED.items()) + "\ntemperature:\n  init: 0.001\n")
    with pytest.raises(SettingsError) as caught:  # from a file: the file, the line and the key
        load_recipe(recipe)
    line = len(REQUIRED) + 2
    assert str(caught.value) == (f"{recipe}:{line}: field 'temperature.init': "
                                 "temperature.init 0.001 is below temperature.min 0.005")
    with pytest.raises(SettingsError, match="field 'output_dir': must not be empty$"):  # a field validator's
        load_recipe(recipe, overrides=["output_dir=' '", "temperature.init=0.02"])
