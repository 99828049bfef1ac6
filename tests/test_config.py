"""vis_embed.config: pydantic ValidationErrors become DataErrors naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from vis_embed.config import dotted_field, format_validation_error
from vis_embed.data.yaml_lines import load_yaml_with_lines


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
