"""The benchmark manifest's schema: a pydantic model, validated with :mod:`vis_embed.config`.

A manifest names evaluation datasets, their place in the benchmark vocabulary
(:mod:`vis_embed.data.taxonomy`) and their data files; errors name file, line and key
like every configuration of the package.  ``benchmark.load_benchmark`` turns the validated
model into ``EvalDatasetSpec``s; no data file is read here (only checked to exist).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    ConfigDict,
    ValidationInfo,
    field_validator,
    model_validator,
)

from vis_embed.config import Settings, invalid, one_of, reported, uniquely_named
from vis_embed.data.eval_options import DatasetOptions
from vis_embed.data.eval_protocols import PROTOCOL_NAMES
from vis_embed.data.tables import TABLE_SUFFIXES
from vis_embed.data.taxonomy import (
    BENCHMARKS,
    MMEB_DATASETS,
    MMEB_META_TASKS,
    MMEB_V2,
    MMEB_V2_META_TASKS,
    MODALITIES,
    MVEB_META_TASKS,
    SPLITS,
    benchmark_of_meta_task,
    mmeb_v2_entry,
    modality_of_meta_task,
)

# The layouts vis_embed.data reads rows of, then the peer layouts (rows read by evaluation/peer_layouts,
# scored by evaluation/peer_metrics).
RETRIEVAL_LAYOUTS: tuple[str, ...] = ("candidates", "gallery", "qrels")
PROTOCOL_LAYOUTS: tuple[str, ...] = ("2afc", "nearid", "asym_recall", "pair_ap", "human_corr")
LAYOUTS: tuple[str, ...] = RETRIEVAL_LAYOUTS + PROTOCOL_LAYOUTS
PEER_LAYOUTS: frozenset[str] = frozenset(PROTOCOL_LAYOUTS)
FILE_ROLES: tuple[str, ...] = ("path", "queries", "gallery", "corpus", "qrels")
BENCHMARK_CHOICES: tuple[str, ...] = (*BENCHMARKS, MMEB_V2, "other")
QRELS_SUFFIXES: tuple[str, ...] = (".jsonl", ".tsv")  # a qrels file: JSONL, or BEIR's TSV with a header


def _non_empty_string(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise invalid(f"expected a non-empty string, got {value!r:.60}")
    return value


def _optional_string(value: Any) -> Any:
    if value is not None and not isinstance(value, str):
        raise invalid(f"expected a string, got {type(value).__name__}")
    return value


Name = Annotated[str, BeforeValidator(_non_empty_string)]
OptionalText = Annotated[str | None, BeforeValidator(_optional_string)]


def files_of_layout(layout: str) -> tuple[str, ...]:
    """The file keys a layout takes: ``queries`` and ``gallery`` for a gallery, ``queries``,
    ``corpus`` and ``qrels`` for qrels (BEIR), else ``path``."""
    return {"gallery": ("queries", "gallery"), "qrels": ("queries", "corpus", "qrels")}.get(layout, ("path",))


class ManifestEntry(Settings):
    """One dataset of a manifest.  Keys other than these are protocol options, allowed only
    for the peer layouts (interpreted by vis_embed.evaluation)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: Name
    meta_task: Name
    split: Name | None = None  # required, except for MMEB-V2 tasks (no IND / OOD there)
    layout: Name
    benchmark: Name | None = None  # default: the meta-task's benchmark, else "other"
    modality: Name | None = None  # MMEB-V2: image | video | visdoc (default: the meta-task's)
    path: Name | None = None
    queries: Name | None = None
    gallery: Name | None = None
    corpus: Name | None = None
    qrels: Name | None = None
    image_root: Name | None = None
    query_instruction: OptionalText = None
    candidate_instruction: OptionalText = None
    options: DatasetOptions = DatasetOptions()

    @field_validator("layout")
    @classmethod
    def _known_layout(cls, layout: str) -> str:
        return one_of(layout, LAYOUTS, "layout")

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> "ManifestEntry":
        self._check_options()
        self._check_taxonomy()
        self._check_files(Path((info.context or {}).get("base", ".")))
        return self

    @property
    def inferred_benchmark(self) -> str:
        return self.benchmark or benchmark_of_meta_task(self.meta_task) or "other"

    @property
    def all_options(self) -> DatasetOptions:
        """Protocol options: the entry's extra keys, then its ``options`` mapping (both validated)."""
        return DatasetOptions.model_validate({**(self.model_extra or {}), **self.options.as_dict()})

    def _check_options(self) -> None:
        if self.options.primary is not None and self.layout != "qrels":
            raise invalid(f"a primary score is chosen for layout 'qrels' only, not {self.layout!r}", "options",
                          "primary")
        extras = self.model_extra or {}
        if self.layout not in PEER_LAYOUTS:
            for key in extras:
                raise invalid(f"unknown key for layout {self.layout!r} (allowed: "
                              f"{', '.join(ManifestEntry.model_fields)}; put extra settings under 'options')", key)
        # a peer layout's extra keys are options: the same types and vocabularies
        with reported(as_error=lambda problems: invalid(problems[0].reason, problems[0].field)):
            DatasetOptions.model_validate(extras)

    @property
    def inferred_modality(self) -> str | None:
        return self.modality or (modality_of_meta_task(self.meta_task) if self.inferred_benchmark == MMEB_V2 else None)

    def _check_taxonomy(self) -> None:
        benchmark, meta_task, split = self.inferred_benchmark, self.meta_task, self.split
        one_of(benchmark, BENCHMARK_CHOICES, "benchmark", "benchmark")
        if split is None and benchmark != MMEB_V2:
            raise invalid("required key missing", "split")
        if split is not None:
            one_of(split, SPLITS, "split", "split")
        if self.modality is not None:
            one_of(self.modality, MODALITIES, "modality", "modality")
        if benchmark == MMEB_V2:
            self._check_mmeb_v2()
        allowed = {"MMEB": MMEB_META_TASKS, "MVEB": MVEB_META_TASKS, MMEB_V2: MMEB_V2_META_TASKS}.get(benchmark)
        if allowed is not None and meta_task not in allowed:
            raise invalid(f"meta-task {meta_task!r} is not one of {benchmark}'s: {', '.join(allowed)}", "meta_task")
        expected = MMEB_DATASETS.get(self.name) if benchmark == "MMEB" else None
        if expected is not None and expected != (meta_task, split):
            raise invalid(f"MMEB dataset {self.name!r} is {expected[0]}/{expected[1]}, not {meta_task}/{split}",
                          "meta_task")

    def _check_mmeb_v2(self) -> None:
        """A known MMEB-V2 task keeps its meta-task and modality; a modality fits its meta-task."""
        try:
            expected = mmeb_v2_entry(self.name)
        except KeyError:
            expected = None
        if expected is not None and self.meta_task != expected["meta_task"]:
            raise invalid(f"MMEB-V2 task {self.name!r} is {expected['meta_task']}, not {self.meta_task}", "meta_task")
        implied = modality_of_meta_task(self.meta_task)
        if self.modality is not None and implied is not None and self.modality != implied:
            raise invalid(f"meta-task {self.meta_task} is a {implied} meta-task, not {self.modality}", "modality")

    def _check_files(self, base: Path) -> None:
        files = files_of_layout(self.layout)
        for key in FILE_ROLES:
            if getattr(self, key) is not None and key not in files:
                raise invalid(f"layout {self.layout!r} takes {' and '.join(files)}, not {key!r}", key)
        for key in files:
            if getattr(self, key) is None:
                raise invalid(f"layout {self.layout!r} requires {key!r}", key)
            resolved = self.resolved(base, key)
            if not resolved.exists():
                raise invalid(f"file not found: {resolved}", key)
            if key == "qrels":
                if resolved.suffix.lower() not in QRELS_SUFFIXES:
                    raise invalid("a qrels file must be .jsonl or .tsv", key)
            elif self.layout in RETRIEVAL_LAYOUTS and resolved.suffix.lower() not in TABLE_SUFFIXES:
                raise invalid("data files must be .jsonl or .parquet", key)

    def resolved(self, base: Path, key: str) -> Path:
        """The file or folder under ``key``, relative to the manifest's folder ``base``."""
        return (base / getattr(self, key)).resolve()


class Manifest(Settings):
    """A benchmark manifest: a name and a non-empty list of datasets with unique names."""

    model_config = ConfigDict(frozen=True)

    name: Name
    datasets: list[ManifestEntry]
    description: Any = None
    # the benchmark's version (e.g. `vis-embed synth`'s generator version): the evaluation puts it
    # in every dataset's result and result key, so results of two versions are never mixed
    version: int | str | None = None
    protocol: Name | None = None  # the benchmark's evaluation protocol (vis_embed.evaluation.eval_protocols)

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, protocol: str | None) -> str | None:
        return protocol if protocol is None else one_of(protocol, PROTOCOL_NAMES, "protocol")

    @field_validator("datasets")
    @classmethod
    def _unique_names(cls, datasets: list[ManifestEntry]) -> list[ManifestEntry]:
        return uniquely_named(datasets)
