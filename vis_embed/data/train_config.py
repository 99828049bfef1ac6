"""The training-data config's schema: a pydantic model, validated with :mod:`vis_embed.config`.

Only the YAML is checked here (keys, types, kinds, that data files exist); the rows of the
data files are validated by :mod:`vis_embed.data.train`, which builds the datasets from
this model.  Errors name file, line and key like every configuration of the package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, ValidationInfo, field_validator, model_validator

from vis_embed.config import Settings, invalid, one_of, uniquely_named
from vis_embed.data.tables import TABLE_SUFFIXES

KINDS: tuple[str, ...] = ("identity", "pairs")
IDENTITY_SEPARATOR = "::"


def _of_type(*types: type) -> BeforeValidator:
    """Accept only ``types`` as written in the YAML (no coercion; a bool is not a number)."""
    def check(value: Any) -> Any:
        if not isinstance(value, types) or isinstance(value, bool):
            raise invalid(f"wrong type {type(value).__name__}")
        return value
    return BeforeValidator(check)


Text = Annotated[str, _of_type(str)]
Number = Annotated[float, _of_type(int, float)]
OptionalText = Annotated[str | None, _of_type(str, type(None))]


class TrainDataEntry(Settings):
    """One sub-dataset of a training data config (paths relative to the YAML's folder)."""

    model_config = ConfigDict(frozen=True)

    name: Text
    kind: Text
    path: Text
    image_root: Text | None = None  # default: the data file's folder
    weight: Number = 1.0
    query_instruction: OptionalText = None
    candidate_instruction: OptionalText = None
    identity_namespace: Text | None = None  # default: the dataset name

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        return one_of(kind, KINDS, "kind")

    @field_validator("name", "identity_namespace")
    @classmethod
    def _usable_in_identity_keys(cls, value: str | None) -> str | None:
        # identity keys are "namespace::identity": the separator in a namespace would be ambiguous
        if value is not None and (IDENTITY_SEPARATOR in value or not value.strip()):
            raise invalid(f"must be non-empty and not contain {IDENTITY_SEPARATOR!r}")
        return value

    @field_validator("weight")
    @classmethod
    def _positive(cls, weight: float) -> float:
        if not weight > 0:
            raise invalid("weight must be > 0")
        return weight

    @model_validator(mode="after")
    def _data_file_exists(self, info: ValidationInfo) -> "TrainDataEntry":
        data_path = self.data_path(Path((info.context or {}).get("base", ".")))
        if data_path.suffix.lower() not in TABLE_SUFFIXES:
            raise invalid("data files must be .jsonl or .parquet", "path")
        if not data_path.is_file():
            raise invalid(f"data file not found: {data_path}", "path")
        return self

    def data_path(self, base: Path) -> Path:
        return (base / self.path).resolve()

    def image_folder(self, base: Path) -> Path:
        """Folder relative image paths are resolved against (``image_root`` or the data file's)."""
        return (base / self.image_root).resolve() if self.image_root is not None else self.data_path(base).parent


class TrainDataDocument(Settings):
    """A training data config: a non-empty list of datasets with unique names."""

    model_config = ConfigDict(frozen=True)

    datasets: list[TrainDataEntry]

    @field_validator("datasets")
    @classmethod
    def _unique_names(cls, datasets: list[TrainDataEntry]) -> list[TrainDataEntry]:
        return uniquely_named(datasets)
