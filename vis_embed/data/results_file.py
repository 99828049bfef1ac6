"""``results.json`` as its readers see it: :class:`ResultsFile` (no torch).

``vis-embed eval`` (:mod:`vis_embed.evaluation.harness`) writes the file; the model card's
summary, ``vis-embed export --results``, the Markdown report and the MMEB score files read it
through this model once and then use attributes, instead of ``.get()`` chains with their own
defaults.  Only the parts the readers use are declared; every key is optional where an earlier
file may lack it, and everything else a file carries is kept (``extra="allow"``): the file is
open-ended (each dataset's metrics, a protocol record, what a newer writer adds): each part is
a :class:`~vis_embed.config.FileRecord`.  Nothing here writes: the keys and values of
results.json are the harness's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from vis_embed.config import FileRecord

# what a file written before ``primary`` / ``tie_policy`` were recorded meant
DEFAULT_PRIMARY = "P@1"
DEFAULT_TIE_POLICY = "pessimistic"


class ResultsModel(FileRecord):
    """results.json's ``model`` block (harness.describe_encoder): which model was evaluated.  Not
    a :class:`~vis_embed.config.ModelRecord`: the file records ``fingerprints`` (model and
    benchmark), not ``fingerprint``, and its shape is the file's."""

    name: str | None = None
    adapter: str | None = None
    fingerprints: dict[str, Any] = Field(default_factory=dict)  # model, benchmark
    embedding_config: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        """``NAME + ADAPTER`` (just NAME without an adapter; "this model" without a name)."""
        return self.name_with_adapter("this model")

    def name_with_adapter(self, unnamed: str) -> str:
        """``NAME + ADAPTER`` (the one spelling of an evaluated model); ``unnamed`` stands for a
        missing name (the MMEB score file's default differs from the reports')."""
        name = self.name or unnamed
        return f"{name} + {self.adapter}" if self.adapter else name

    @property
    def fingerprint(self) -> str | None:
        """The evaluated model's fingerprint (None: not recorded)."""
        return self.fingerprints.get("model")


class DatasetResult(FileRecord):
    """One entry of results.json's ``datasets``: its metrics (percent) and what it is."""

    metrics: dict[str, Any] = Field(default_factory=dict)
    primary: str | None = None  # the metric the dataset is ranked by (None: an older file)
    n_queries: int | None = None
    meta_task: str | None = None
    split: str | None = None
    benchmark: str | None = None
    modality: str | None = None

    @property
    def primary_metric(self) -> str:
        """The primary metric's name (an older file without one: P@1)."""
        return self.primary or DEFAULT_PRIMARY


class ProtocolRecord(FileRecord):
    """results.json's ``protocol`` (an eval with ``--protocol``)."""

    name: str | None = None
    description: str | None = None


class ResultsFile(FileRecord):
    """A ``results.json`` (see the module docstring)."""

    model: ResultsModel = Field(default_factory=ResultsModel)
    tie_policy: str = DEFAULT_TIE_POLICY
    datasets: dict[str, DatasetResult] = Field(default_factory=dict)
    groups: dict[str, float] = Field(default_factory=dict)  # group means, percent
    counts: dict[str, int] = Field(default_factory=dict)  # tasks each group covers
    data_version: str | None = None  # MMEB-V2 visdoc data release (evaluation.mmeb_v2_scores); None: no visdoc task
    protocol: ProtocolRecord | None = None

    @classmethod
    def of(cls, results: ResultsFile | Mapping[str, Any], source: str | Path | None = None) -> ResultsFile:
        """``results`` (a parsed results.json, or the harness's dict) read once; a value of the
        wrong type is a DataError naming ``source`` and the key."""
        if isinstance(results, ResultsFile):
            return results
        return cls.of_file(dict(results), source)
