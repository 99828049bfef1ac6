"""The scheduler's vocabulary: its input (:class:`SubDataset`), its output (:class:`Schedule`)
and the statistics it keeps while planning (:class:`ScheduleStats`, what the report is built from).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from vis_embed.data.train_config import KINDS
from vis_embed.errors import ConfigError, DataError
from vis_embed.sampling.settings import ScheduleSettings

ROLES: tuple[str, str] = ("anchor", "hard_negative")
ROLE_ANCHOR, ROLE_HARD_NEGATIVE = 0, 1


@dataclass
class SubDataset:
    """What the scheduler needs to know about one sub-dataset (row ``i`` = record ``i``).

    ``identities``: one label per row (any hashable, or an int array); ``None`` entries (or
    ``identities=None``) mean "no identity" and are only allowed for ``pairs`` rows, each of
    which is then its own identity.  Labels are compared within ``namespace`` (default: the
    dataset's name), so two datasets share identities only if they share a namespace.
    With ``identity_names``, ``identities`` is instead an int array of *codes* into that list
    (negative: no identity), already encoded once (``subdatasets_from_config``); datasets
    sharing a namespace then share the code space.
    ``hard_negatives``: per row, the *row positions* of its designated hard negatives, either
    a list of lists or a CSR pair ``(offsets[n + 1], rows)``.
    """

    name: str
    kind: Literal["identity", "pairs"]
    ids: Sequence[str] | np.ndarray
    identities: Sequence[Any] | np.ndarray | None = None
    hard_negatives: Sequence[Sequence[int]] | tuple[np.ndarray, np.ndarray] | None = None
    weight: float = 1.0
    namespace: str | None = None
    identity_names: Sequence[str] | np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"dataset {self.name!r}: unknown kind {self.kind!r} (known: {KINDS})")
        if not self.weight > 0:
            raise ConfigError(f"dataset {self.name!r}: weight must be > 0, got {self.weight}")
        if self.identities is not None and len(self.identities) != len(self.ids):
            raise DataError(f"dataset {self.name!r}: {len(self.identities)} identity labels for "
                            f"{len(self.ids)} rows", field="identity")
        if self.kind == "identity" and self.identities is None:
            raise DataError(f"identity dataset {self.name!r} needs an identity label per row",
                            field="identity")
        if self.identity_names is not None:
            self._check_identity_codes()

    def _check_identity_codes(self) -> None:
        codes = self.identities
        if not (isinstance(codes, np.ndarray) and codes.dtype.kind in "iu"):
            raise ConfigError(f"dataset {self.name!r}: identity_names needs identities as an int array of codes")
        if len(codes) and codes.max() >= len(self.identity_names):  # type: ignore[arg-type]
            raise DataError(f"dataset {self.name!r}: identity code {int(codes.max())} outside the "
                            f"{len(self.identity_names)} identity names", field="identity")  # type: ignore[arg-type]

    @property
    def num_rows(self) -> int:
        return len(self.ids)

    def hard_negative_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, rows)`` of the designated hard negatives (empty CSR when none)."""
        n = self.num_rows
        if self.hard_negatives is None:
            return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if isinstance(self.hard_negatives, tuple) and len(self.hard_negatives) == 2 \
                and isinstance(self.hard_negatives[0], np.ndarray):
            offsets = np.asarray(self.hard_negatives[0], dtype=np.int64)
            rows = np.asarray(self.hard_negatives[1], dtype=np.int64)
        else:
            lists = list(self.hard_negatives)
            if len(lists) != n:
                raise DataError(f"dataset {self.name!r}: {len(lists)} hard-negative lists for {n} rows",
                                field="hard_negatives")
            lengths = np.fromiter((len(x) for x in lists), dtype=np.int64, count=n)
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            rows = np.fromiter((r for x in lists for r in x), dtype=np.int64, count=int(offsets[-1]))
        if len(offsets) != n + 1 or offsets[0] != 0 or (np.diff(offsets) < 0).any() \
                or offsets[-1] != len(rows):
            raise DataError(f"dataset {self.name!r}: malformed hard-negative offsets", field="hard_negatives")
        if len(rows) and (rows.min() < 0 or rows.max() >= n):
            raise DataError(f"dataset {self.name!r}: hard negative row outside 0..{n - 1}",
                            field="hard_negatives")
        return offsets, rows


@dataclass
class Schedule:
    """A computed schedule: ``steps × B`` members in (step, slot, position) order.

    Row ``r`` belongs to step ``r // B``; ``dataset[r]`` indexes ``dataset_names``;
    ``query_row`` / ``positive_row`` are row positions within that dataset.  ``label``: the
    loss-label code of each member's positive (``TrainDataset.labels``), set by
    ``build_schedule`` from the training data and written as the ``label`` column; None for a
    schedule planned from in-memory :class:`SubDataset` s alone.
    """

    settings: ScheduleSettings
    dataset_names: list[str]
    dataset_ids: list[np.ndarray]      # per dataset: object array of record ids
    slot: np.ndarray                   # int32
    dataset: np.ndarray                # int32
    query_row: np.ndarray              # int64
    positive_row: np.ndarray           # int64
    role: np.ndarray                   # int8, index into ROLES
    report: dict[str, Any] = field(default_factory=dict)
    stats: ScheduleStats | None = None  # what the identity-aware planner measured (None: naive)
    label: np.ndarray | None = None     # int64 loss-label code of each member's positive

    @property
    def step(self) -> np.ndarray:
        return np.repeat(np.arange(self.settings.steps, dtype=np.int32), self.settings.global_batch_size)

    def query_ids(self) -> np.ndarray:
        return self._ids(self.query_row)

    def positive_ids(self) -> np.ndarray:
        return self._ids(self.positive_row)

    def _ids(self, rows: np.ndarray) -> np.ndarray:
        out = np.empty(len(rows), dtype=object)
        for d, ids in enumerate(self.dataset_ids):
            mask = self.dataset == d
            out[mask] = ids[rows[mask]]
        return out


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class IdentityDraws:
    """An identity dataset's anchor-identity sampling design (eligible identities only)."""

    codes: np.ndarray        # global identity codes, sorted
    instances: np.ndarray    # instances per identity
    inclusion: np.ndarray    # expected draws per slot (sum = candidates per slot)
    capped: int              # identities whose inclusion is capped at one draw per slot


@dataclass(frozen=True)
class DatasetStats:
    """What planning knew and decided about one sub-dataset."""

    name: str
    kind: str
    num_rows: int
    weight: float
    num_identities: int          # all distinct identities (pairs: incl. unlabelled rows)
    excluded_identities: int     # identities with a single instance (never anchors; may be hard negatives)
    usable_identities: int       # identities usable as members
    skipped: str | None          # why the dataset was left out (small_datasets: skip)
    expected_slots: float        # expected slots per batch
    proportional_share: float    # weight x rows^size_exponent, normalised (before the per-dataset cap)
    hard_negatives_dropped: dict[str, int]
    identity_draws: IdentityDraws | None = None
    anchors_wanting_negatives: int = 0       # accepted anchors with usable designated negatives
    hard_negative_shortfalls: dict[str, int] = field(default_factory=dict)  # anchors short, by cause


@dataclass(frozen=True)
class ScheduleStats:
    """The planner's public statistics, aligned with the schedule's rows where per member."""

    datasets: list[DatasetStats]
    max_slots_per_dataset: int
    hard_negative_groups_truncated: int
    extra_candidate_rounds: int
    member_identity: np.ndarray              # global identity code of each member's query record
    member_designated_negatives: np.ndarray  # designated hard negatives of each member's record
    member_usable_negatives: np.ndarray      # of those, the ones usable as members
    identity_labels: Mapping[int, Any]       # global identity code -> label (labelled ones)
