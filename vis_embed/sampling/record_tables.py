"""The global record tables of a schedule's datasets (:func:`build_record_tables`) and each
dataset's sampling state (:class:`SourceState`).

All datasets are laid end to end as *global record numbers* (dataset ``d``'s row ``i`` is
record ``offset_d + i``).  Identities are encoded once into one int64 code per record
(datasets share codes only within a namespace); rows are grouped by (dataset, identity) so
that anchors and positives are drawn with array lookups; the designated hard negatives
become one global CSR of those usable as members.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vis_embed.data.factorize import factorize
from vis_embed.errors import ConfigError, DataError
from vis_embed.sampling.settings import ScheduleSettings
from vis_embed.sampling.types import SubDataset


@dataclass
class SourceState:
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
class RecordTables:
    sources: list[SourceState]
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


def build_record_tables(datasets: Sequence[SubDataset], settings: ScheduleSettings) -> RecordTables:
    names = [ds.name for ds in datasets]
    if len(set(names)) != len(names):
        raise ConfigError(f"dataset names must be unique, got {names}")
    if not datasets:
        raise ConfigError("no datasets to schedule")
    offsets = np.concatenate([[0], np.cumsum([ds.num_rows for ds in datasets])]).astype(np.int64)
    total_rows = int(offsets[-1])

    row_identity, identity_labels = _global_identities(datasets, offsets)
    row_dataset = np.repeat(np.arange(len(datasets), dtype=np.int32), [ds.num_rows for ds in datasets])

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

    hn_offsets, hn_rows, designated, dropped = _usable_hard_negatives(datasets, offsets, row_identity)

    run_dataset = key_dataset[run_starts]
    sources = []
    for index, ds in enumerate(datasets):
        runs = np.flatnonzero(run_dataset == index)
        sources.append(_make_source(index, ds, int(offsets[index]), row_identity, runs_start=run_starts[runs],
                                    runs_count=run_counts[runs], runs_identity=key_identity[run_starts[runs]],
                                    hn_offsets=hn_offsets, settings=settings))
    return RecordTables(sources, row_identity, row_dataset, is_pairs_row, order, row_instance_start,
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
    for scope, members in by_namespace.items():
        codes, distinct = _namespace_codes([datasets[i] for i in members], scope)
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


def _namespace_codes(members: Sequence[SubDataset], scope: str) -> tuple[np.ndarray, list[Any]]:
    """Codes (0.., -1: no identity) of the concatenated rows of one namespace, and their labels.

    Two inputs: codes with ``identity_names`` (kept as ints, renumbered densely) or any
    hashable labels (``None``: no identity).  Both go through the one encoding
    (:func:`~vis_embed.data.factorize.factorize`, first-seen order); codes from
    ``subdatasets_from_config`` are already numbered in first-seen order, so they keep their order.
    """
    arrays = [ds.identities for ds in members]
    with_names = [ds.identity_names is not None for ds in members]
    if any(with_names):
        if not all(with_names):
            raise ConfigError(f"datasets sharing identity namespace {scope!r} mix identity codes "
                              f"(identity_names) and labels: give all of them codes or all labels")
        stacked = np.concatenate(arrays).astype(np.int64)  # type: ignore[arg-type]
        codes, distinct = factorize([None if code < 0 else code for code in stacked.tolist()],
                                    none_is_missing=True)
        names = np.asarray(members[0].identity_names, dtype=object)
        return codes, names[np.asarray(distinct, dtype=np.int64)].tolist()
    return factorize([v for a in arrays for v in (a.tolist() if isinstance(a, np.ndarray) else a)],
                     none_is_missing=True)


def _usable_hard_negatives(datasets: Sequence[SubDataset], offsets: np.ndarray, row_identity: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, dict[str, int]]]:
    """Global CSR of the designated hard negatives that can be full members.

    Dropped (and counted): a negative sharing the anchor's identity (it would be a false
    negative) and duplicates within a list.  A row whose identity has a single instance is
    never an anchor but may be a negative: its positive is its own candidate side.
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
        keep = ~same_identity
        # duplicates within one list
        pair_key = owner * (int(offsets[-1]) + 1) + negative
        first = np.zeros(len(pair_key), dtype=bool)
        first[np.unique(pair_key, return_index=True)[1]] = True
        duplicate = ~first
        keep &= first
        dropped[ds.name] = {"same_identity_as_anchor": int(same_identity.sum()),
                            "duplicate": int((duplicate & ~same_identity).sum())}
        lengths_all.append(np.bincount(owner[keep] - offsets[i], minlength=ds.num_rows))
        rows_all.append(negative[keep])
    lengths = np.concatenate(lengths_all).astype(np.int64)
    hn_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return hn_offsets, np.concatenate(rows_all).astype(np.int64), np.concatenate(designated), dropped


def _make_source(index: int, ds: SubDataset, offset: int, row_identity: np.ndarray, *,
                 runs_start: np.ndarray, runs_count: np.ndarray, runs_identity: np.ndarray,
                 hn_offsets: np.ndarray, settings: ScheduleSettings) -> SourceState:
    """State of one dataset; ``runs_*`` describe its rows grouped by identity."""
    m = settings.interleave_batch_size
    if ds.kind == "identity":
        eligible = runs_count >= 2
        source = SourceState(index, ds.name, ds.kind, offset, ds.num_rows, float(ds.weight),
                         distinct_identities=int(eligible.sum()), num_identities=len(runs_count),
                         excluded_identities=int((~eligible).sum()))
        source.identity_codes = runs_identity[eligible]
        source.identity_start = runs_start[eligible]
        source.identity_count = runs_count[eligible]
    else:
        distinct = len(runs_count)
        source = SourceState(index, ds.name, ds.kind, offset, ds.num_rows, float(ds.weight),
                         distinct_identities=distinct, num_identities=distinct, excluded_identities=0)
    if source.distinct_identities < m:
        message = (f"dataset {ds.name!r} has only {source.distinct_identities} distinct usable identities"
                   f"{' (identities with >= 2 instances)' if ds.kind == 'identity' else ''}, but a slot "
                   f"needs interleave_batch_size = {m} members with distinct identities")
        if settings.small_datasets == "error":
            raise ConfigError(message + "; lower interleave_batch_size or set small_datasets to 'skip'")
        source.skipped = message
    # Hard negatives shrink the number of anchors a slot needs: draw fewer candidates.
    has_hn = np.diff(hn_offsets[offset:offset + ds.num_rows + 1]) > 0
    k = settings.hard_negatives
    share_with_hn = float(has_hn.mean()) if ds.num_rows else 0.0
    needed = m / (1.0 + k * share_with_hn) if k else m
    source.candidates = int(min(m, source.distinct_identities, math.ceil(1.25 * needed) + 2))
    return source
