"""A benchmark dataset's evaluation options, typed and validated once, when the manifest (or a
spec built in code) is loaded -- not again where they are used.

Manifest ``options:`` (any layout) and a peer layout's extra keys: ``index`` (gallery search
backend), ``tie_policy`` (how tied scores rank), ``depth`` (gallery ranking depth), ``seed``
(2AFC bootstrap), ``ks`` (asymmetric recall cut-offs), ``primary`` (the qrels layout's aggregated
score: ``ndcg_linear@5``, its default, or ``hit@1``, what MMEB-V2 reports for a video task ranked
over a global pool).  Other keys are kept for the peer
layouts that read them.  The vocabularies live here, below :mod:`vis_embed.evaluation`
(which imports them from here), so the manifest's schema can check them; no torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict, NonNegativeInt, PositiveInt, field_validator

from vis_embed.config import Settings, dotted_field, invalid, member_of, one_of, validated
from vis_embed.errors import ConfigError, DataError
from vis_embed.vectors.index_spec import AUTO, IndexSpec, check_index_name

# Gallery search: the one index vocabulary is vectors/index_spec.py's (its kinds and eval's earlier
# names, exact / exact-bf16 / exact-gpu / ivf, as aliases); "auto" is the machine's fastest exact kind.
DEFAULT_INDEX = AUTO
# How tied scores are ordered in candidates / gallery rankings (see evaluation.metrics):
# pessimistic = negatives before positives; first = listed order, as VLM2Vec's argmax.
TIE_POLICIES: tuple[str, ...] = ("pessimistic", "first")
DEFAULT_TIE_POLICY = "pessimistic"
# The scores a qrels dataset may aggregate by (the first is the default).
QRELS_PRIMARIES: tuple[str, ...] = ("ndcg_linear@5", "hit@1")


def index_name(name: Any) -> str:
    """A pydantic field validator's body: ``name`` when index_spec's one check accepts it."""
    try:
        return check_index_name(name)
    except ConfigError as error:
        raise invalid(str(error)) from None


def check_tie_policy(policy: Any, field: str = "tie_policy") -> str:
    """``policy`` if it is one of TIE_POLICIES, else a DataError naming ``field`` (the one check)."""
    return member_of(policy, TIE_POLICIES, "tie policy", field)


class DatasetOptions(Settings):
    """Per-dataset evaluation options; None = the run's setting (or the protocol's default)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    index: str | None = None
    tie_policy: str | None = None
    depth: PositiveInt | None = None
    seed: NonNegativeInt | None = None  # numpy's generators take no negative seed
    ks: tuple[PositiveInt, ...] | None = None
    primary: str | None = None

    @field_validator("primary")
    @classmethod
    def _known_primary(cls, primary: str | None) -> str | None:
        return primary if primary is None else one_of(primary, QRELS_PRIMARIES, "primary score")

    @field_validator("index")
    @classmethod
    def _known_index(cls, kind: str | None) -> str | None:
        return kind if kind is None else index_name(kind)

    def index_spec(self, run: IndexSpec) -> IndexSpec:
        """The index this dataset is searched with: its ``index`` (with the run's rescore when
        its kind re-ranks a shortlist), else the run's spec ``run``."""
        if self.index is None:
            return run
        spec = IndexSpec.named(self.index)
        return IndexSpec.named(self.index, rescore=run.rescore) if spec.takes_rescore else spec

    @field_validator("tie_policy")
    @classmethod
    def _known_tie_policy(cls, policy: str | None) -> str | None:
        return policy if policy is None else one_of(policy, TIE_POLICIES, "tie policy")

    @classmethod
    def from_values(cls, values: DatasetOptions | dict[str, Any] | None, dataset: str,
                    path: str | Path | None = None, line: int | None = None) -> DatasetOptions:
        """Validated options of ``dataset``; a problem is a DataError naming
        ``DATASET.options.KEY`` (and the manifest's file and line when known)."""
        if isinstance(values, DatasetOptions):
            return values
        def first_problem(problems: list[DataError]) -> DataError:
            return DataError(problems[0].reason, path=path, line=line, field=problems[0].field)

        return validated(cls, values or {}, path, dotted=lambda loc: f"{dataset}.options.{dotted_field(loc)}",
                         as_error=first_problem)

    def get(self, key: str, default: Any = None) -> Any:
        """An option by name (a typed one or a peer layout's extra key); ``default`` when unset."""
        value = self.as_dict().get(key)
        return default if value is None else value

    def as_dict(self) -> dict[str, Any]:
        """The options that were given (what fingerprints and results record)."""
        return self.model_dump(exclude_unset=True)
