"""vis_embed.config: pydantic ValidationErrors become DataErrors naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from vis_embed.config import dotted_field, format_validation_error, invalid, validate_document
from vis_embed.data.yaml_lines import load_yaml_with_lines
from vis_embed.errors import DataError


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    weight: float = 1.0


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    datasets: list[_Entry]


def test_dotted_field() -> None:
    assert dotted_field(("datasets", 1, "weight")) == "datasets[1].weight"
    assert dotted_field(()) == "(root)"


def test_errors_name_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text("datasets:\n  - name: a\n  - name: b\n    wieght: 2\n    weight: heavy\n")
    document = load_yaml_with_lines(path)
    with pytest.raises(ValidationError) as info:
        _Doc.model_validate(document)
    messages = sorted(str(error) for error in format_validation_error(info.value, path, document))
    assert messages == sorted([f"{path}:4: field 'datasets[1].wieght': unknown key",
                               f"{path}:5: field 'datasets[1].weight': Input should be a valid number, "
                               "unable to parse string as a number (got 'heavy')"])


def test_without_a_document_the_message_names_file_and_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as info:
        _Doc.model_validate({"datasets": [{}]})
    assert [str(e) for e in format_validation_error(info.value, "x.yaml")] == [
        "x.yaml: field 'datasets[0].name': required key missing"]


class _Checked(BaseModel):
    model_config = ConfigDict(extra="forbid")
    datasets: list[_Entry]

    @field_validator("datasets")
    @classmethod
    def _unique(cls, datasets: list[_Entry]) -> list[_Entry]:
        names = [entry.name for entry in datasets]
        if len(set(names)) < len(names):
            raise invalid(f"duplicate name {names[-1]!r} {{not a template}}", len(names) - 1, "name")
        return datasets


def test_invalid_shows_its_message_and_points_at_the_field_it_names(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("datasets:\n  - name: a\n  - weight: 2\n    name: a\n")
    with pytest.raises(DataError) as info:
        validate_document(_Checked, load_yaml_with_lines(path), path)
    assert str(info.value) == f"{path}:4: field 'datasets[1].name': duplicate name 'a' {{not a template}}"


def test_validate_document_raises_the_first_problem_and_lists_the_others(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("datasets:\n  - name: a\n    wieght: 2\n  - {}\n")
    with pytest.raises(DataError) as info:
        validate_document(_Doc, load_yaml_with_lines(path), path)
    assert (info.value.line, info.value.field) == (3, "datasets[0].wieght")
    assert f"also: {path}:4: field 'datasets[1].name': required key missing" in info.value.reason


def test_every_configuration_speaks_the_same_way(tmp_path: Path) -> None:
    """Recipe, training-data config and benchmark manifest: one wording, file and dotted key."""
    from vis_embed.data import load_benchmark, load_train_config
    from vis_embed.errors import ConfigError
    from vis_embed.training.recipe import load_recipe

    (tmp_path / "train.yaml").write_text("datasets:\n  - kind: pairs\n    path: p.jsonl\n")
    (tmp_path / "bench.yaml").write_text("name: b\ndatasets:\n  - layout: candidates\n")
    (tmp_path / "recipe.yaml").write_text("data: d\n")
    with pytest.raises(DataError, match=r"train.yaml:2: field 'datasets\[0\].name': required key missing"):
        load_train_config(tmp_path / "train.yaml")
    with pytest.raises(DataError, match=r"bench.yaml:3: field 'datasets\[0\].name': required key missing"):
        load_benchmark(tmp_path / "bench.yaml")
    with pytest.raises(ConfigError, match=r"recipe.yaml:1: field 'model': required key missing"):
        load_recipe(tmp_path / "recipe.yaml")
