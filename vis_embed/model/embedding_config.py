"""EmbeddingConfig: how a model turns an item into a vector, recorded beside the weights.

ONE typed class holds every setting that changes the vectors of a model (prompt format,
pixel budget, token cap, dtype policy, attention kernel, pooling) plus the instructions it
was trained with.  It travels with the model as ``embedding_config.json``: training writes it
into every ``checkpoint-STEP/`` and ``final/`` (LoRA adapter or projection head),
``vis-embed merge`` and ``vis-embed export`` into their outputs, and
``EmbeddingModel.save_pretrained`` beside what it saves.

Precedence when a model is loaded (:func:`resolve_embedding_config`): an explicit value (flag
or keyword) > the adapter directory's file > the base model directory's file > the built-in
default.  A checkpoint without the file therefore loads exactly as before the file existed.

The command-line flags are generated from the class (:func:`add_embedding_config_arguments`):
a field whose ``json_schema_extra`` names a ``group`` becomes ``--field-name`` (default None =
"not given", so a recorded value can win) on every command that asks for that group.  Adding
a field here adds its flag to encode, eval, serve and mine-negatives at once.

No torch here: ``vis-embed COMMAND --help`` and recipe validation import this module.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, PositiveInt, field_validator, model_validator

from vis_embed.config import Settings, dotted_field, invalid, validated, value_options
from vis_embed.errors import ConfigError, DataError
from vis_embed.vectors.transforms import check_matryoshka_dims
from vis_embed.io import atomic_write_json, fingerprint_json, read_settings_object
from vis_embed.data.images import DECODE_MODES
from vis_embed.model.defaults import (DECODE_HELP, DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, DEFAULT_VIDEO_FRAMES,
                                      DEFAULT_VIDEO_MAX_PIXELS, DTYPE_NAMES)
from vis_embed.model.prompts import PROMPT_FORMATS
from vis_embed.model.references import model_file

EMBEDDING_CONFIG_FILE = "embedding_config.json"
# The adaptation kinds, declared once: model/network/adaptation/ has one class per kind (its
# registry, ADAPTATIONS), the recipe's adaptation.kind and the model card's facts take this type.
AdaptationKind = Literal["lora", "head", "full"]

# Flag groups: "loading" = how the model embeds (encode, eval, serve, mine-negatives, export);
# "instructions" = the task prompts (export's sentence-transformers prompts).
LOADING = "loading"
INSTRUCTIONS = "instructions"


def matryoshka_dims_field(dims: list[int]) -> list[int]:
    """A field validator's body for Matryoshka widths (here and the recipe's ``loss:``): the one
    rule, :func:`vis_embed.vectors.transforms.check_matryoshka_dims`, reported at the field."""
    try:
        return check_matryoshka_dims(dims)
    except DataError as exc:
        raise invalid(exc.reason) from None


def _flag(group: str, metavar: str | None = None) -> dict[str, Any]:
    return {"group": group, **({"metavar": metavar} if metavar else {})}


class EmbeddingConfig(Settings):
    """The settings that define a model's vectors (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    prompt_format: Literal[PROMPT_FORMATS] = Field(  # type: ignore[valid-type]
        "chat", description="prompt template: chat (Qwen chat messages), chat-system (the instruction as the "
        "system turn, as Qwen3-VL-Embedding) or vlm2vec",
        json_schema_extra=_flag(LOADING))
    min_pixels: int = Field(DEFAULT_MIN_PIXELS, gt=0, description="smallest image area in pixels",
                            json_schema_extra=_flag(LOADING, "N"))
    max_pixels: int = Field(DEFAULT_MAX_PIXELS, gt=0, description="largest image area in pixels before resizing",
                            json_schema_extra=_flag(LOADING, "N"))
    video_frames: int = Field(
        DEFAULT_VIDEO_FRAMES, gt=0, le=1024,
        description="frames a video item gives the model (picked evenly over its frames, VLM2Vec's rule)",
        json_schema_extra=_flag(LOADING, "N"))
    video_max_pixels: int = Field(
        DEFAULT_VIDEO_MAX_PIXELS, gt=0, description="largest area of each video frame in pixels before resizing",
        json_schema_extra=_flag(LOADING, "N"))
    max_length: int | None = Field(
        None, gt=0, description="most tokens per item; longer texts are cut at the end of the item's text "
                                "(never the instruction or image); unset: the model's own maximum",
        json_schema_extra=_flag(LOADING, "TOKENS"))
    dtype: Literal[DTYPE_NAMES] = Field(  # type: ignore[valid-type]
        "auto", description="weights' dtype: auto (bfloat16 on CUDA, float32 elsewhere), checkpoint "
                            "(the checkpoint's own), or a name",
        json_schema_extra=_flag(LOADING))
    attn_implementation: str | None = Field(
        None, description="attention kernel: varlen (one call per vision block, torch's kernels), sdpa "
                          "(transformers' own: one call per image), eager, flash_attention_2/4 (when installed); "
                          "unset: on CUDA flash_attention_2 when flash-attn 2 is installed, else varlen; on CPU sdpa",
        json_schema_extra=_flag(LOADING, "NAME"))
    decode: Literal[DECODE_MODES] = Field(  # type: ignore[valid-type]
        "exact", description=DECODE_HELP.replace("exact (default)", "exact"), json_schema_extra=_flag(LOADING))
    query_instruction: str | None = Field(
        None, description="instruction for queries (trained with; export's 'query' prompt)",
        json_schema_extra=_flag(INSTRUCTIONS, "TEXT"))
    document_instruction: str | None = Field(
        None, description="instruction for documents/candidates (trained with; export's 'document' prompt)",
        json_schema_extra=_flag(INSTRUCTIONS, "TEXT"))
    # Descriptive, not flags: one pooling exists; the adaptation is what the directory holds
    # (every writer records the kind of what it saved: lora, head, or full for full weights;
    # None: a directory written before the kind was recorded).  Not part of fingerprint().
    pooling: Literal["last_token"] = "last_token"
    adaptation: AdaptationKind | None = None
    # the widths trained with loss.matryoshka_dims (training/losses/matryoshka.py): a model that
    # records them serves any `dimensions` (--dim); None: not trained for truncation
    matryoshka_dims: list[PositiveInt] | None = None

    @field_validator("matryoshka_dims")
    @classmethod
    def _matryoshka_dims(cls, dims: list[int] | None) -> list[int] | None:
        return dims if dims is None else matryoshka_dims_field(dims)

    @model_validator(mode="after")
    def _pixel_budget_ordered(self) -> EmbeddingConfig:
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) exceeds max_pixels ({self.max_pixels})")
        if self.min_pixels > self.video_max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) exceeds video_max_pixels ({self.video_max_pixels})")
        return self

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def save(self, directory: str | Path) -> Path:
        """Write ``directory/embedding_config.json`` atomically; returns its path."""
        path = Path(directory) / EMBEDDING_CONFIG_FILE
        atomic_write_json(path, self.to_json())
        return path

    def with_values(self, **values: Any) -> EmbeddingConfig:
        """This config with ``values`` (None: keep this config's) -- validated, so the pixel
        order and the vocabularies are checked here and nowhere else (ConfigError)."""
        given = {key: value for key, value in values.items() if value is not None}
        unknown = sorted(set(given) - set(type(self).model_fields))
        if unknown:
            raise TypeError(f"unknown embedding setting(s): {', '.join(unknown)}")
        return _validated({**self.model_dump(), **given}, "settings", model=type(self))

    def fingerprint(self) -> str:
        """A hash of every field that shapes the vectors (the dump, not a list of names): a new
        field joins every cache key made from it (the Embedder's fingerprint).  Only
        :data:`UNFINGERPRINTED` is left out: ``adaptation`` says what trained, not how the model
        embeds (the weights and adapter files are fingerprinted themselves), so the same weights
        saved by the trainer or by ``save_pretrained`` keep one fingerprint."""
        return fingerprint_json(self.model_dump(mode="json", exclude=set(UNFINGERPRINTED)))


# Fields recorded but not fingerprinted: descriptive of how the model came to be, not of its vectors.
UNFINGERPRINTED = ("adaptation",)


def _validated(values: Mapping[str, Any], source: str, flags: bool = False,
               model: type[EmbeddingConfig] = EmbeddingConfig) -> EmbeddingConfig:
    """``values`` as an EmbeddingConfig; problems are a ConfigError naming the source and each field
    (as ``field (--flag)`` for given values), through the project's one ValidationError formatter."""
    def name(loc: tuple[Any, ...]) -> str:
        field = ".".join(map(str, loc))
        if not field:  # a check of the whole config (the pixel order): its message names the fields
            return dotted_field(loc)
        return f"{field} (--{field.replace('_', '-')})" if flags else field

    return validated(model, dict(values), source, dotted=name)


def read_embedding_config(directory: str | Path | None) -> dict[str, Any]:
    """The values recorded in ``directory/embedding_config.json`` (validated; ``directory`` a
    local folder or a Hub id: :func:`model_file`), or {} when it holds none (a plain checkpoint)."""
    if directory is None:
        return {}
    path = model_file(directory, EMBEDDING_CONFIG_FILE)
    if path is None:
        return {}
    recorded = read_settings_object(path)
    _validated(recorded, str(path))  # a bad recorded value is named with its file and field
    return recorded


# Settings that are the machine's choice, not how the model embeds: a warm start may change them.
MACHINE_SETTINGS = ("dtype", "attn_implementation")


def check_adapter_agrees(adapter: str | Path, given: Mapping[str, Any], source: str,
                         field_prefix: str = "") -> None:
    """Refuse (ConfigError naming both) a value in ``given`` that contradicts the one recorded in
    ``adapter``'s embedding_config.json: a warm start from an adapter trained with another
    prompt format or pixel budget would not continue that adapter's training."""
    recorded = read_embedding_config(adapter)
    for name, value in given.items():
        if value is None or name in MACHINE_SETTINGS or name not in recorded or recorded[name] == value:
            continue
        raise ConfigError(f"{source} sets {field_prefix}{name}: {value!r}, but {adapter} was trained with "
                          f"{name}: {recorded[name]!r} ({Path(adapter) / EMBEDDING_CONFIG_FILE}); "
                          f"remove the setting to adopt the adapter's, or start from another adapter")


def resolve_embedding_config(model: str | Path | None, adapter: str | Path | None = None,
                             **given: Any) -> EmbeddingConfig:
    """The config a model loads with: ``given`` values that are not None > the adapter's
    recorded file > the base model's recorded file > defaults."""
    values: dict[str, Any] = {}
    values.update(read_embedding_config(model))
    values.update(read_embedding_config(adapter))
    explicit = {key: value for key, value in given.items() if value is not None}
    unknown = sorted(set(explicit) - set(EmbeddingConfig.model_fields))
    if unknown:
        raise TypeError(f"unknown embedding setting(s): {', '.join(unknown)}")
    values.update(explicit)
    return _validated(values, "model settings", flags=bool(explicit))


# ------------------------------------------------------------------ command-line flags
def flag_fields(groups: Iterable[str]) -> list[str]:
    """Names of the fields that are flags of the given groups, in declaration order."""
    wanted = set(groups)
    return [name for name, field in EmbeddingConfig.model_fields.items()
            if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("group") in wanted]


def add_embedding_config_arguments(parser: argparse.ArgumentParser, groups: Iterable[str] = (LOADING,),
                                   only: Iterable[str] | None = None,
                                   help_overrides: Mapping[str, str] | None = None) -> list[str]:
    """Add ``--field-name`` for every field of ``groups`` (or the fields named in ``only``);
    defaults are None so that a recorded value can win.  Returns the field names added."""
    names = list(only) if only is not None else flag_fields(groups)
    for name in names:
        field = EmbeddingConfig.model_fields[name]
        default = "unset" if field.default is None else field.default
        text = (help_overrides or {}).get(name) or (
            f"{field.description} (default: the value recorded with the model, else {default})")
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None, **value_options(field, text))
    return names


def given_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The EmbeddingConfig fields given on the command line (flags left at None are not given)."""
    return {name: getattr(args, name) for name in EmbeddingConfig.model_fields
            if getattr(args, name, None) is not None}
