"""The offline identity-aware batch scheduler (the VisME sampling algorithm).

The scheduler works on a small in-memory description of each sub-dataset
(:class:`SubDataset`: ids, identity labels, hard-negative lists as a CSR, weight), so it is
testable without files and fast: every step is resolved with a handful of vectorised numpy
operations over the ~B candidate members of that step, never a Python loop over members.

Per step (details and guarantees in docs/scheduling.md):

1. **Slots -> datasets.**  ``K = B / M`` slots.  Dataset ``d`` has share
   ``p_d ∝ weight_d × rows_d ** size_exponent``.  Expected slot counts ``e_d = min(cap, λ p_d)``
   (``cap = ceil(K / D)``, so slots come from different datasets whenever ``K <= D``) are
   realised by systematic sampling over a freshly shuffled dataset order: ``d`` gets
   ``floor(e_d)`` or ``ceil(e_d)`` slots and exactly ``e_d`` in expectation.
2. **Anchor candidates.**  Identity datasets: systematic PPS sampling of identities with
   inclusion probability ``min(1, λ × instances)`` (exactly proportional to the number of
   instances unless an identity is so frequent that it would need two places in one slot);
   identities with one instance are never anchors.  The anchor record is uniform among the
   identity's instances.  Pairs datasets: the next rows of a per-epoch random permutation
   (rows are anchors at most once per epoch; unused candidates return to the queue's front,
   and a row that is an anchor candidate of the step is not used as a hard negative).
3. **Members.**  Each candidate anchor is followed by its designated hard negatives in random
   order.  A greedy pass in stream order accepts a member iff its identity is not yet in the
   batch, a hard negative only if its anchor was accepted and fewer than ``k`` of the anchor's
   hard negatives were, and only while its slot has room (``M`` members).  The greedy pass is
   computed as a fixed-point iteration of vectorised operations (each decision depends only
   on earlier entries, so the iteration reaches the sequential result).  Slots left short
   (identity collisions) get another round of candidates; a slot that cannot be filled is an
   error, never a smaller batch.
4. **Positives.**  Identity rows: uniform among the *other* instances of the identity (the
   positive has the anchor's identity, which is therefore also unique in the batch).  Pairs
   rows: the row itself (its ``positive`` side).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from tqdm.auto import tqdm

from vis_embed.errors import ConfigError, DataError

ROLES: tuple[str, str] = ("anchor", "hard_negative")
ROLE_ANCHOR, ROLE_HARD_NEGATIVE = 0, 1
KINDS: tuple[str, str] = ("identity", "pairs")

# Rounds of extra candidates for a slot left short by identity collisions before giving up.
_MAX_TOPUP_ROUNDS = 12
# Hard negatives considered per anchor: k plus a margin for ones already in the batch.
_HARD_NEGATIVE_MARGIN = 5


# --------------------------------------------------------------------------- inputs


@dataclass
class SubDataset:
    """What the scheduler needs to know about one sub-dataset (row ``i`` = record ``i``).

    ``identities``: one label per row (any hashable, or an int array); ``None`` entries (or
    ``identities=None``) mean "no identity" and are only allowed for ``pairs`` rows, each of
    which is then its own identity.  Labels are compared within ``namespace`` (default: the
    dataset's name), so two datasets share identities only if they share a namespace.
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


STRATEGIES = ("identity_aware", "naive")


@dataclass(frozen=True)
class ScheduleSettings:
    """The arguments of a schedule (their fingerprint goes into the file's metadata)."""

    steps: int
    global_batch_size: int
    interleave_batch_size: int
    hard_negatives: int = 5
    seed: int = 0
    # p_d ∝ weight × rows ** size_exponent (1: weight × size, the paper; 0: weight only)
    size_exponent: float = 1.0
    # a dataset too small for one slot: "error" (default) or "skip" (excluded, reported)
    small_datasets: Literal["error", "skip"] = "error"
    # "identity_aware" (VisME) or "naive" (the paper's baseline: one sub-dataset per batch,
    # rows drawn uniformly, no identity constraint, no hard negatives; sampling/naive.py)
    strategy: Literal["identity_aware", "naive"] = "identity_aware"

    def __post_init__(self) -> None:
        for name in ("steps", "global_batch_size", "interleave_batch_size"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.hard_negatives < 0:
            raise ConfigError(f"--hard-negatives must be >= 0, got {self.hard_negatives}")
        if self.global_batch_size % self.interleave_batch_size:
            raise ConfigError(
                f"--global-batch-size {self.global_batch_size} is not a multiple of "
                f"--interleave-batch-size {self.interleave_batch_size} (B = slots x M)")
        if self.hard_negatives and self.hard_negatives + 1 > self.interleave_batch_size:
            raise ConfigError(
                f"--hard-negatives {self.hard_negatives} cannot fit: an anchor and its "
                f"{self.hard_negatives} hard negatives need a slot of at least "
                f"{self.hard_negatives + 1} members, but --interleave-batch-size is "
                f"{self.interleave_batch_size}")
        if self.size_exponent < 0:
            raise ConfigError(f"--size-exponent must be >= 0, got {self.size_exponent}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"--strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.small_datasets not in ("error", "skip"):
            raise ConfigError(f"--small-datasets must be 'error' or 'skip', got {self.small_datasets!r}")

    @property
    def num_slots(self) -> int:
        return self.global_batch_size // self.interleave_batch_size

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "global_batch_size": self.global_batch_size,
                "interleave_batch_size": self.interleave_batch_size,
                "hard_negatives": self.hard_negatives, "seed": self.seed,
                "size_exponent": self.size_exponent, "small_datasets": self.small_datasets,
                "strategy": self.strategy}


# --------------------------------------------------------------------------- output


@dataclass
class Schedule:
    """A computed schedule: ``steps × B`` members in (step, slot, position) order.

    Row ``r`` belongs to step ``r // B``; ``dataset[r]`` indexes ``dataset_names``;
    ``query_row`` / ``positive_row`` are row positions within that dataset.
    """

    settings: ScheduleSettings
    dataset_names: list[str]
    dataset_ids: list[np.ndarray]      # per dataset: object array of record ids
    slot: np.ndarray                   # int32
    dataset: np.ndarray                # int16
    query_row: np.ndarray              # int64
    positive_row: np.ndarray           # int64
    role: np.ndarray                   # int8, index into ROLES
    report: dict[str, Any] = field(default_factory=dict)

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


# --------------------------------------------------------------------------- helpers


def capped_inclusion(weights: np.ndarray, total: float, cap: float = 1.0) -> np.ndarray:
    """Expected counts ``e_i = min(cap, λ w_i)`` with ``sum(e) = total`` (water filling)."""
    weights = np.asarray(weights, dtype=np.float64)
    positive = weights > 0
    if total > cap * positive.sum() + 1e-9:
        raise ValueError(f"cannot place {total} draws on {positive.sum()} items with cap {cap}")
    capped = np.zeros_like(positive)
    while True:
        free = positive & ~capped
        remaining = total - cap * capped.sum()
        if not free.any() or remaining <= 1e-12:
            scale = 0.0
            break
        scale = remaining / weights[free].sum()
        newly = free & (scale * weights >= cap)
        if not newly.any():
            break
        capped |= newly
    expected = np.where(capped, cap, scale * weights * (positive & ~capped))
    return expected


def systematic_sample(expected: np.ndarray, num_draws: int, rng: np.random.Generator) -> np.ndarray:
    """Indices drawn by systematic sampling over ``expected`` (in the given order).

    Item ``i`` is drawn ``floor(e_i)`` or ``ceil(e_i)`` times, ``e_i`` times in expectation.
    """
    cumulative = np.cumsum(expected)
    points = rng.random() + np.arange(num_draws)
    return np.minimum(np.searchsorted(cumulative, points, side="right"), len(expected) - 1)


def _segment_arange(lengths: np.ndarray) -> np.ndarray:
    """``[0..l0-1, 0..l1-1, ...]`` for the given lengths."""
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)


def _factorize(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """Codes (``-1`` for None) and the distinct values in first-seen order."""
    table: dict[Any, int] = {}
    codes = np.fromiter((-1 if v is None else table.setdefault(v, len(table)) for v in values),
                        dtype=np.int64, count=len(values))
    return codes, list(table)


# --------------------------------------------------------------------------- preparation


@dataclass
class _Source:
    """Per-dataset state of the scheduler (indices are global record numbers)."""

    index: int
    name: str
    kind: str
    offset: int                       # first global record number
    num_rows: int
    weight: float
    distinct_identities: int          # identities usable as members (>= 2 instances / pairs rows)
    num_identities: int               # all distinct identities (pairs: incl. unlabelled rows)
    excluded_identities: int          # identity datasets: identities with a single instance
    candidates: int = 0               # anchor candidates drawn per slot
    skipped: str | None = None
    # identity kind: systematic sampling over eligible identities, in a periodically shuffled order
    identity_codes: np.ndarray | None = None   # eligible identity codes (global)
    identity_start: np.ndarray | None = None   # into the global instance list
    identity_count: np.ndarray | None = None
    inclusion: np.ndarray | None = None        # e_i (sum = candidates)
    capped_identities: int = 0
    order: np.ndarray | None = None
    cumulative: dict[int, np.ndarray] = field(default_factory=dict)
    draws_since_shuffle: int = 0
    shuffle_every: int = 1
    # pairs kind: rows without replacement within an epoch
    permutation: np.ndarray | None = None
    cursor: int = 0
    pending: np.ndarray | None = None
    epochs_started: int = 0


@dataclass
class _Prepared:
    sources: list[_Source]
    row_identity: np.ndarray          # global record -> global identity code
    row_dataset: np.ndarray           # global record -> dataset index
    row_is_pairs: np.ndarray
    instance_rows: np.ndarray         # global records grouped by (dataset, identity)
    row_instance_start: np.ndarray    # global record -> start of its identity in instance_rows
    row_instance_count: np.ndarray    # 1 for pairs rows (positive = the row itself)
    row_instance_rank: np.ndarray
    hn_offsets: np.ndarray            # global CSR of usable hard negatives (global records)
    hn_rows: np.ndarray
    designated_hn: np.ndarray         # per global record: number of designated hard negatives
    hn_dropped: dict[str, dict[str, int]]
    identity_labels: dict[int, Any]   # global identity code -> label (for the report)


def _prepare(datasets: Sequence[SubDataset], settings: ScheduleSettings) -> _Prepared:
    names = [ds.name for ds in datasets]
    if len(set(names)) != len(names):
        raise ConfigError(f"dataset names must be unique, got {names}")
    if not datasets:
        raise ConfigError("no datasets to schedule")
    offsets = np.concatenate([[0], np.cumsum([ds.num_rows for ds in datasets])]).astype(np.int64)
    total_rows = int(offsets[-1])

    row_identity, identity_labels = _global_identities(datasets, offsets)
    row_dataset = np.repeat(np.arange(len(datasets), dtype=np.int16), [ds.num_rows for ds in datasets])

    # Rows grouped by (dataset, identity): anchors and positives come from the member's own
    # dataset even when a namespace is shared (the trainer looks ids up in that dataset).
    order = np.lexsort((np.arange(total_rows), row_identity, row_dataset))
    key_identity, key_dataset = row_identity[order], row_dataset[order]
    run_first = np.r_[True, (key_identity[1:] != key_identity[:-1]) | (key_dataset[1:] != key_dataset[:-1])]
    run_starts = np.flatnonzero(run_first)
    run_counts = np.diff(np.r_[run_starts, total_rows])
    run_of_sorted = np.repeat(np.arange(len(run_starts)), run_counts)
    row_instance_start = np.empty(total_rows, dtype=np.int64)
    row_instance_count = np.empty(total_rows, dtype=np.int64)
    row_instance_rank = np.empty(total_rows, dtype=np.int64)
    row_instance_start[order] = run_starts[run_of_sorted]
    row_instance_count[order] = run_counts[run_of_sorted]
    row_instance_rank[order] = np.arange(total_rows) - run_starts[run_of_sorted]
    is_pairs_row = np.repeat(np.array([ds.kind == "pairs" for ds in datasets]),
                             [ds.num_rows for ds in datasets])
    # Pairs rows are their own positive, whatever identity label they carry.
    row_instance_count[is_pairs_row] = 1
    row_instance_rank[is_pairs_row] = 0

    hn_offsets, hn_rows, designated, dropped = _usable_hard_negatives(
        datasets, offsets, row_identity, row_instance_count, is_pairs_row)

    run_dataset = key_dataset[run_starts]
    sources = []
    for index, ds in enumerate(datasets):
        runs = np.flatnonzero(run_dataset == index)
        sources.append(_make_source(index, ds, int(offsets[index]), row_identity, runs_start=run_starts[runs],
                                    runs_count=run_counts[runs], runs_identity=key_identity[run_starts[runs]],
                                    hn_offsets=hn_offsets, settings=settings))
    return _Prepared(sources, row_identity, row_dataset, is_pairs_row, order, row_instance_start,
                     row_instance_count, row_instance_rank, hn_offsets, hn_rows, designated,
                     dropped, identity_labels)


def _global_identities(datasets: Sequence[SubDataset], offsets: np.ndarray
                       ) -> tuple[np.ndarray, dict[int, Any]]:
    """One int64 identity code per global record; datasets share codes only within a namespace."""
    total_rows = int(offsets[-1])
    row_identity = np.full(total_rows, -1, dtype=np.int64)
    labels: dict[int, Any] = {}
    by_namespace: dict[str, list[int]] = {}
    for index, ds in enumerate(datasets):
        if ds.identities is not None:
            scope = ds.namespace if ds.namespace is not None else f"\x00dataset\x00{ds.name}"
            by_namespace.setdefault(scope, []).append(index)
    next_code = 0
    for members in by_namespace.values():
        arrays = [datasets[i].identities for i in members]
        if all(isinstance(a, np.ndarray) and a.dtype.kind in "iu" for a in arrays):
            stacked = np.concatenate(arrays)  # type: ignore[arg-type]
            uniques, codes = np.unique(stacked, return_inverse=True)
            distinct = list(uniques.tolist())
        else:
            stacked_list = [v for a in arrays for v in (a.tolist() if isinstance(a, np.ndarray) else a)]
            codes, distinct = _factorize(stacked_list)
        codes = np.where(codes >= 0, codes + next_code, -1)
        start = 0
        for i in members:
            n = datasets[i].num_rows
            row_identity[offsets[i]:offsets[i] + n] = codes[start:start + n]
            start += n
        labels.update({next_code + c: v for c, v in enumerate(distinct)})
        next_code += len(distinct)
    unlabelled = np.flatnonzero(row_identity < 0)
    for i, ds in enumerate(datasets):
        lo, hi = offsets[i], offsets[i + 1]
        if ds.kind == "identity" and (row_identity[lo:hi] < 0).any():
            row = int(np.flatnonzero(row_identity[lo:hi] < 0)[0])
            raise DataError(f"identity dataset {ds.name!r}: row {row} (id {ds.ids[row]!r}) has no identity",
                            field="identity")
    # A pairs row without identity is an identity of its own.
    row_identity[unlabelled] = next_code + np.arange(len(unlabelled))
    return row_identity, labels


def _usable_hard_negatives(datasets: Sequence[SubDataset], offsets: np.ndarray, row_identity: np.ndarray,
                           row_instance_count: np.ndarray, is_pairs_row: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, dict[str, int]]]:
    """Global CSR of the designated hard negatives that can be full members.

    Dropped (and counted): a negative sharing the anchor's identity (it would be a false
    negative), duplicates within a list, and identity-dataset rows whose identity has a
    single instance (no positive of their own).
    """
    lengths_all, rows_all, dropped = [], [], {}
    designated = []
    for i, ds in enumerate(datasets):
        local_offsets, local_rows = ds.hard_negative_csr()
        lengths = np.diff(local_offsets)
        designated.append(lengths)
        owner = np.repeat(np.arange(ds.num_rows), lengths) + offsets[i]
        negative = local_rows + offsets[i]
        same_identity = row_identity[negative] == row_identity[owner]
        no_positive = (row_instance_count[negative] < 2) & ~is_pairs_row[negative]
        keep = ~same_identity & ~no_positive
        # duplicates within one list
        pair_key = owner * (int(offsets[-1]) + 1) + negative
        first = np.zeros(len(pair_key), dtype=bool)
        first[np.unique(pair_key, return_index=True)[1]] = True
        duplicate = ~first
        keep &= first
        dropped[ds.name] = {"same_identity_as_anchor": int(same_identity.sum()),
                            "single_instance_identity": int((no_positive & ~same_identity).sum()),
                            "duplicate": int((duplicate & ~same_identity & ~no_positive).sum())}
        lengths_all.append(np.bincount(owner[keep] - offsets[i], minlength=ds.num_rows))
        rows_all.append(negative[keep])
    lengths = np.concatenate(lengths_all).astype(np.int64)
    hn_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return hn_offsets, np.concatenate(rows_all).astype(np.int64), np.concatenate(designated), dropped


def _make_source(index: int, ds: SubDataset, offset: int, row_identity: np.ndarray, *,
                 runs_start: np.ndarray, runs_count: np.ndarray, runs_identity: np.ndarray,
                 hn_offsets: np.ndarray, settings: ScheduleSettings) -> _Source:
    """State of one dataset; ``runs_*`` describe its rows grouped by identity."""
    m = settings.interleave_batch_size
    if ds.kind == "identity":
        eligible = runs_count >= 2
        source = _Source(index, ds.name, ds.kind, offset, ds.num_rows, float(ds.weight),
                         distinct_identities=int(eligible.sum()), num_identities=len(runs_count),
                         excluded_identities=int((~eligible).sum()))
        source.identity_codes = runs_identity[eligible]
        source.identity_start = runs_start[eligible]
        source.identity_count = runs_count[eligible]
    else:
        distinct = len(runs_count)
        source = _Source(index, ds.name, ds.kind, offset, ds.num_rows, float(ds.weight),
                         distinct_identities=distinct, num_identities=distinct, excluded_identities=0)
    if source.distinct_identities < m:
        message = (f"dataset {ds.name!r} has only {source.distinct_identities} distinct usable identities"
                   f"{' (identities with >= 2 instances)' if ds.kind == 'identity' else ''}, but a slot "
                   f"needs --interleave-batch-size {m} members with distinct identities")
        if settings.small_datasets == "error":
            raise ConfigError(message + "; lower --interleave-batch-size or pass --small-datasets skip")
        source.skipped = message
    # Hard negatives shrink the number of anchors a slot needs: draw fewer candidates.
    has_hn = np.diff(hn_offsets[offset:offset + ds.num_rows + 1]) > 0
    k = settings.hard_negatives
    share_with_hn = float(has_hn.mean()) if ds.num_rows else 0.0
    needed = m / (1.0 + k * share_with_hn) if k else m
    source.candidates = int(min(m, source.distinct_identities, math.ceil(1.25 * needed) + 2))
    return source


# --------------------------------------------------------------------------- the scheduler


class _Scheduler:
    def __init__(self, datasets: Sequence[SubDataset], settings: ScheduleSettings) -> None:
        self.settings = settings
        self.datasets = list(datasets)
        self.rng = np.random.default_rng(settings.seed)
        self.prep = _prepare(self.datasets, settings)
        self._choose_slot_expectations()
        for source in self.prep.sources:
            if source.skipped is None and source.kind == "identity":
                self._init_identity_sampling(source)
            elif source.skipped is None:
                source.permutation = np.zeros(0, dtype=np.int64)
                source.pending = np.zeros(0, dtype=np.int64)
        self.topup_rounds = 0
        self.truncated_groups = 0
        # scratch flags over all records (membership tests in O(n) instead of sorting)
        self._flag = np.zeros(len(self.prep.row_identity), dtype=bool)

    def _member_of(self, values: np.ndarray, members: np.ndarray) -> np.ndarray:
        """``np.isin(values, members)`` for record numbers, via the scratch flags."""
        self._flag[members] = True
        found = self._flag[values]
        self._flag[members] = False
        return found

    # ---- setup

    def _choose_slot_expectations(self) -> None:
        settings = self.settings
        sources = self.prep.sources
        shares = np.array([0.0 if s.skipped else s.weight * float(s.num_rows) ** settings.size_exponent
                           for s in sources])
        usable = int((shares > 0).sum())
        if usable == 0:
            raise ConfigError("no dataset is large enough for one slot: " +
                              "; ".join(s.skipped or "" for s in sources))
        slots = settings.num_slots
        self.slot_cap = math.ceil(slots / usable)
        self.dataset_share = shares / shares.sum()
        self.slot_expectation = capped_inclusion(shares, slots, cap=self.slot_cap)
        m = settings.interleave_batch_size
        for source, expected in zip(sources, self.slot_expectation):
            most = math.ceil(expected - 1e-9)
            if most * m > source.distinct_identities and not source.skipped:
                raise ConfigError(
                    f"dataset {source.name!r} can receive up to {most} slots per batch ({most} x {m} "
                    f"members with distinct identities) but has only {source.distinct_identities} "
                    f"distinct usable identities; add datasets, lower --interleave-batch-size or "
                    f"raise --global-batch-size less")

    def _init_identity_sampling(self, source: _Source) -> None:
        source.inclusion = self._inclusion(source, 1)
        source.capped_identities = int((source.inclusion >= 1.0 - 1e-12).sum()) \
            if source.candidates < len(source.identity_count) else 0
        source.shuffle_every = max(1, len(source.identity_count) // max(1, source.candidates))
        self._shuffle_identity_order(source)

    def _inclusion(self, source: _Source, slots: int) -> np.ndarray:
        """Inclusion expectations for ``slots`` slots' worth of candidates drawn at once.

        Drawing the candidates of all of a dataset's slots of one step in one systematic
        sample keeps them distinct (no collisions to repair) whenever it is possible.
        """
        cache = source.__dict__.setdefault("_inclusion_cache", {})
        if slots not in cache:
            total = min(slots * source.candidates, len(source.identity_count))
            cache[slots] = capped_inclusion(source.identity_count.astype(np.float64), total, cap=1.0)
        return cache[slots]

    def _shuffle_identity_order(self, source: _Source) -> None:
        # A fixed order makes neighbouring identities never share a slot; reshuffling once the
        # dataset has been swept (~n_identities / candidates slots) keeps the cost O(M) per slot.
        source.order = self.rng.permutation(len(source.identity_count))
        source.cumulative = {}
        source.draws_since_shuffle = 0

    # ---- candidates

    def _identity_candidates(self, source: _Source, slots: int) -> list[np.ndarray]:
        """Candidate anchor rows for ``slots`` slots of ``source`` (random priority order)."""
        if source.draws_since_shuffle >= source.shuffle_every:
            self._shuffle_identity_order(source)
        source.draws_since_shuffle += slots
        if slots not in source.cumulative:
            source.cumulative[slots] = np.cumsum(self._inclusion(source, slots)[source.order])
        cumulative = source.cumulative[slots]
        total = int(round(cumulative[-1]))
        randoms = self.rng.random(2 * total + 1)  # one call: start, priorities, instance picks
        picked = np.searchsorted(cumulative, randoms[0] + np.arange(total), side="right")
        identity = source.order[np.minimum(picked, len(source.order) - 1)]
        identity = identity[np.argsort(randoms[1:total + 1])]  # random priority within the slot
        draws = (randoms[total + 1:] * source.identity_count[identity]).astype(np.int64)
        rows = self.prep.instance_rows[source.identity_start[identity] + draws]
        size = -(-total // slots)
        return [rows[i * size:(i + 1) * size] for i in range(slots)]

    def _pairs_candidates(self, source: _Source, count: int) -> np.ndarray:
        """The next ``count`` rows: pending ones first, then the epoch's permutation."""
        taken = [source.pending[:count]]
        need = count - len(taken[0])
        source.pending = source.pending[len(taken[0]):]
        while need > 0:
            if source.cursor >= len(source.permutation):
                source.permutation = self.rng.permutation(source.num_rows) + source.offset
                source.cursor = 0
                source.epochs_started += 1
            chunk = source.permutation[source.cursor:source.cursor + need]
            source.cursor += len(chunk)
            taken.append(chunk)
            need -= len(chunk)
        return np.concatenate(taken)

    # ---- one step

    def step(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Members of one batch: (slot, query record, positive record, role), slot-ordered."""
        settings = self.settings
        m = settings.interleave_batch_size
        slot_source = self._slot_sources()
        anchor_slot, anchor_rows, pairs_taken = [], [], {}
        self._add_candidates(range(len(slot_source)), slot_source, anchor_slot, anchor_rows, pairs_taken)
        for _round in range(_MAX_TOPUP_ROUNDS + 1):
            stream = self._stream(np.concatenate(anchor_slot), np.concatenate(anchor_rows))
            accepted = self._resolve(stream, len(slot_source))
            filled = np.bincount(stream["slot"][accepted], minlength=len(slot_source))
            short = np.flatnonzero(filled < m)
            if not len(short):
                break
            self.topup_rounds += 1
            self._add_candidates(short, slot_source, anchor_slot, anchor_rows, pairs_taken)
        else:
            names = sorted({self.prep.sources[slot_source[s]].name for s in short})
            raise ConfigError(
                f"cannot fill {len(short)} slot(s) with {m} members of distinct identities from "
                f"dataset(s) {names}: identities collide across slots (shared namespace or several "
                f"slots of one dataset); lower --interleave-batch-size or add data")
        self._return_unused_pairs(pairs_taken, stream, accepted)
        slot = stream["slot"][accepted]
        query = stream["row"][accepted]
        role = np.where(stream["is_anchor"][accepted], ROLE_ANCHOR, ROLE_HARD_NEGATIVE).astype(np.int8)
        anchor_accepted = accepted & stream["is_anchor"]
        group_hn = np.bincount(stream["group"][accepted & ~stream["is_anchor"]],
                               minlength=len(stream["group_start"]))
        truncated = (anchor_accepted[stream["group_start"]] & (group_hn < settings.hard_negatives)
                     & (stream["group_available"] >= settings.hard_negatives))
        self.truncated_groups += int(truncated.sum())
        return slot, query, self._positives(query), role

    def _slot_sources(self) -> np.ndarray:
        order = self.rng.permutation(len(self.slot_expectation))
        picked = systematic_sample(self.slot_expectation[order], self.settings.num_slots, self.rng)
        sources = order[picked]
        return sources[self.rng.permutation(len(sources))]

    def _add_candidates(self, slots: Any, slot_source: np.ndarray, anchor_slot: list[np.ndarray],
                        anchor_rows: list[np.ndarray], pairs_taken: dict[int, list[np.ndarray]]) -> None:
        slots = np.asarray(slots, dtype=np.int64)
        for index in np.unique(slot_source[slots]):
            source = self.prep.sources[index]
            mine = slots[slot_source[slots] == index]
            if source.kind == "identity":
                chunks = self._identity_candidates(source, len(mine))
            else:
                rows = self._pairs_candidates(source, source.candidates * len(mine))
                pairs_taken.setdefault(source.index, []).append(rows)
                # Every slot of the dataset sees the whole list in queue order: the greedy pass
                # then hands out a prefix of the queue (rows taken by an earlier slot are
                # blocked by identity), so no row of the next epoch is used while one of the
                # current epoch is left over.
                chunks = [rows] * len(mine)
            for s, rows in zip(mine, chunks):
                anchor_slot.append(np.full(len(rows), s, dtype=np.int64))
                anchor_rows.append(rows)

    def _stream(self, anchor_slot: np.ndarray, anchor_rows: np.ndarray) -> dict[str, np.ndarray]:
        """Candidate anchors (slot-major, priority order), each followed by its hard negatives."""
        order = np.argsort(anchor_slot, kind="stable")
        anchor_slot, anchor_rows = anchor_slot[order], anchor_rows[order]
        k = self.settings.hard_negatives
        hn_offsets, hn_rows = self.prep.hn_offsets, self.prep.hn_rows
        available = hn_offsets[anchor_rows + 1] - hn_offsets[anchor_rows] if k else \
            np.zeros(len(anchor_rows), dtype=np.int64)
        # random order within each anchor's list, then keep k plus a margin
        within = _segment_arange(available)
        group_of_hn = np.repeat(np.arange(len(anchor_rows)), available)
        negatives = hn_rows[np.repeat(hn_offsets[anchor_rows], available) + within]
        shuffle = np.lexsort((self.rng.random(len(negatives)), group_of_hn))
        negatives = negatives[shuffle]
        # A pairs row that is itself an anchor candidate of this step is not used as a hard
        # negative: it would block its own draw and starve it within the epoch.
        keep = ~(self.prep.row_is_pairs[negatives] & self._member_of(negatives, anchor_rows))
        rank = np.cumsum(keep) - 1
        rank -= np.concatenate(([0], np.cumsum(keep)))[np.repeat(np.cumsum(available) - available, available)]
        keep &= rank < k + _HARD_NEGATIVE_MARGIN
        negatives, group_of_hn = negatives[keep], group_of_hn[keep]
        kept = np.bincount(group_of_hn, minlength=len(anchor_rows)).astype(np.int64)
        sizes = 1 + kept
        group_start = np.cumsum(sizes) - sizes
        total = int(sizes.sum())
        row = np.empty(total, dtype=np.int64)
        is_anchor = np.zeros(total, dtype=bool)
        row[group_start] = anchor_rows
        is_anchor[group_start] = True
        hn_positions = np.repeat(group_start + 1, kept) + _segment_arange(kept)
        row[hn_positions] = negatives
        group = np.repeat(np.arange(len(anchor_rows)), sizes)
        return {"row": row, "is_anchor": is_anchor, "group": group, "group_start": group_start,
                "group_available": available, "slot": np.repeat(anchor_slot, sizes),
                "identity": self.prep.row_identity[row]}

    def _resolve(self, stream: dict[str, np.ndarray], num_slots: int) -> np.ndarray:
        """The greedy acceptance mask, as the fixed point of a vectorised update.

        Entry i is accepted iff (a) no earlier *accepted* entry has its identity, (b) for a
        hard negative: its anchor is accepted and fewer than k of the anchor's earlier hard
        negatives are, (c) fewer than M earlier entries of its slot are accepted.  Every
        condition depends only on earlier entries, so Jacobi iteration from any start reaches
        the sequential answer; collisions are rare, so it converges in 2-3 rounds.
        """
        k, m = self.settings.hard_negatives, self.settings.interleave_batch_size
        n = len(stream["row"])
        identity, is_anchor, group = stream["identity"], stream["is_anchor"], stream["group"]
        group_start, slot = stream["group_start"], stream["slot"]
        by_identity = np.lexsort((np.arange(n), identity))
        sorted_identity = identity[by_identity]
        run_first = np.concatenate(([True], sorted_identity[1:] != sorted_identity[:-1]))
        run_index = np.cumsum(run_first) - 1
        run_first_positions = np.flatnonzero(run_first)
        slot_first = np.searchsorted(slot, np.arange(num_slots))
        active = np.ones(n, dtype=bool)
        for _ in range(n + 1):
            sorted_active = active[by_identity].astype(np.int64)
            before = np.cumsum(sorted_active) - sorted_active
            before -= before[run_first_positions][run_index]
            valid = np.empty(n, dtype=bool)
            valid[by_identity] = before == 0
            anchor_ok = valid[group_start]
            hn_ok = valid & ~is_anchor & anchor_ok[group]
            running = np.cumsum(hn_ok)
            rank = running - (running[group_start] - hn_ok[group_start])[group]
            accepted = (is_anchor & valid) | (hn_ok & (rank <= k))
            running = np.cumsum(accepted)
            at_slot_start = np.concatenate(([0], running))[slot_first]
            position = running - accepted - at_slot_start[slot]
            accepted &= position < m
            if np.array_equal(accepted, active):
                return accepted
            active = accepted
        raise AssertionError("greedy resolution did not converge")  # unreachable: DAG depth <= n

    def _positives(self, query: np.ndarray) -> np.ndarray:
        prep = self.prep
        count = prep.row_instance_count[query]
        other = np.floor(self.rng.random(len(query)) * np.maximum(count - 1, 1)).astype(np.int64)
        offset = (prep.row_instance_rank[query] + 1 + other) % np.maximum(count, 1)
        has_other = count >= 2
        positive = query.copy()
        positive[has_other] = prep.instance_rows[prep.row_instance_start[query[has_other]] + offset[has_other]]
        return positive

    def _return_unused_pairs(self, pairs_taken: dict[int, list[np.ndarray]], stream: dict[str, np.ndarray],
                             accepted: np.ndarray) -> None:
        """Rows drawn as candidates but not used as anchors go back to the front of the queue."""
        used = stream["row"][accepted & stream["is_anchor"]]
        for index, chunks in pairs_taken.items():
            source = self.prep.sources[index]
            taken = np.concatenate(chunks)
            # Multiset difference: across an epoch boundary a row can be taken twice (end of one
            # permutation, start of the next); only the copy that became an anchor is consumed.
            sorter = np.argsort(taken, kind="stable")
            ordered = taken[sorter]
            first_copy = np.empty(len(taken), dtype=bool)
            first_copy[sorter] = np.concatenate(([True], ordered[1:] != ordered[:-1]))
            unused = taken[~(first_copy & self._member_of(taken, used))]
            source.pending = np.concatenate([unused, source.pending])


def plan_schedule(datasets: Sequence[SubDataset], settings: ScheduleSettings,
                  show_progress: bool = False) -> Schedule:
    """Compute the whole schedule in memory (see the module docstring for the algorithm)."""
    from vis_embed.sampling.report import build_report

    scheduler = _Scheduler(datasets, settings)
    batch = settings.global_batch_size
    total = settings.steps * batch
    slot = np.empty(total, dtype=np.int32)
    dataset = np.empty(total, dtype=np.int16)
    query = np.empty(total, dtype=np.int64)
    positive = np.empty(total, dtype=np.int64)
    role = np.empty(total, dtype=np.int8)
    for step in tqdm(range(settings.steps), desc="scheduling", unit="step", disable=not show_progress):
        s, q, p, r = scheduler.step()
        rows = slice(step * batch, (step + 1) * batch)
        slot[rows], query[rows], positive[rows], role[rows] = s, q, p, r
    dataset[:] = scheduler.prep.row_dataset[query]
    offsets = np.array([src.offset for src in scheduler.prep.sources], dtype=np.int64)
    local_query = query - offsets[dataset]
    local_positive = positive - offsets[dataset]
    schedule = Schedule(settings=settings, dataset_names=[ds.name for ds in datasets],
                        dataset_ids=[np.asarray(ds.ids, dtype=object) for ds in datasets],
                        slot=slot, dataset=dataset, query_row=local_query,
                        positive_row=local_positive, role=role)
    schedule.report = build_report(scheduler, schedule, global_query=query)
    return schedule
