"""The naive baseline schedule of the paper's sampling ablation (its Table 2, first row).

Batches are interleaved like the paper's (its global batch is 16 sub-batches of 64): each of
the ``B / M`` slots comes from ONE sub-dataset, chosen exactly as the identity-aware scheduler
chooses slot datasets (shares ∝ weight × rows^size_exponent, all rows counted, so a dataset
with half the rows takes half the slots; no identity capacity bound), and its M members are
rows drawn uniformly without replacement within the slot -- with no identity constraint, so
two photos of the same identity can share a batch and be pushed apart as negatives (unless
the loss's same-identity mask, ``loss.identity_mask``, is on), and no structured hard
negatives.  With one slot per batch (M = B) the draws are those of the original
single-dataset baseline, so its schedules are unchanged (for data without single-instance
identities, whose rows it once left out of the dataset shares).  It exists to measure what
identity-aware scheduling buys; train with ``sampling.strategy: identity_aware`` otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from vis_embed.data.factorize import MISSING, factorize
from vis_embed.errors import ConfigError
from vis_embed.sampling.draws import dataset_shares, slot_expectations, systematic_sample
from vis_embed.sampling.settings import ScheduleSettings
from vis_embed.sampling.types import ROLES, Schedule, SubDataset


Lookup = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _positive_lookup(ds: SubDataset) -> Lookup:
    """Per row: identity code, the rows of every identity grouped (CSR: ``order``, ``offsets``)
    for drawing positives, and each row's rank among its identity's rows."""
    if ds.kind == "pairs" or ds.identities is None:
        codes = np.arange(ds.num_rows)
    else:
        codes, distinct = factorize(list(ds.identities), none_is_missing=True)
        missing = codes == MISSING  # a row without identity is an identity of its own
        codes[missing] = len(distinct) + np.arange(int(missing.sum()))
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    rank = np.empty(len(codes), dtype=np.int64)
    rank[order] = np.arange(len(codes)) - offsets[codes[order]]
    return codes, order, offsets, rank


def _identity_keys(datasets: Sequence[SubDataset]) -> list[np.ndarray]:
    """Per dataset, per row: the global identity code, or a negative number unique to the row.

    The codes are shared across datasets (``subdatasets_from_config`` merges them), so two
    slots of one batch are compared too; rows without identity never repeat.
    """
    keys, first_row = [], 0
    for ds in datasets:
        own = -(first_row + 1 + np.arange(ds.num_rows, dtype=np.int64))
        if ds.identities is not None:
            codes = np.asarray(ds.identities, dtype=np.int64)
            own = np.where(codes >= 0, codes, own)
        keys.append(own)
        first_row += ds.num_rows
    return keys


def _slot_datasets(rng: np.random.Generator, shares: np.ndarray, settings: ScheduleSettings) -> np.ndarray:
    """(steps, slots) dataset index of every slot."""
    slots = settings.num_slots
    if slots == 1:
        # one weighted draw per batch: the original baseline's draws, so its schedules stay as they were
        return rng.choice(len(shares), size=(settings.steps, 1), p=shares)
    # as the identity-aware scheduler: slots x share expected slots per dataset, systematic
    # sampling per step over a fresh dataset order, slots shuffled -- the two strategies see
    # the same dataset mix (no identity capacity here: a naive slot may repeat identities)
    expected = slot_expectations(shares, slots)
    chosen = np.empty((settings.steps, slots), dtype=np.int64)
    for step in range(settings.steps):
        order = rng.permutation(len(shares))
        picked = order[systematic_sample(expected[order], slots, rng)]
        chosen[step] = picked[rng.permutation(slots)]
    return chosen


def plan_naive_schedule(datasets: Sequence[SubDataset], settings: ScheduleSettings,
                        show_progress: bool = False) -> Schedule:
    """Compute the naive schedule in memory (same output type and file format as the real one).

    ``settings`` never asks for hard negatives here: ScheduleSettings refuses them with ``naive``."""
    rng = np.random.default_rng(settings.seed)
    batch, slot_size = settings.global_batch_size, settings.interleave_batch_size
    lookups = [_positive_lookup(ds) for ds in datasets]
    # Rows that can be anchors: pairs rows, and identity rows whose identity has another instance.
    anchors = []
    for ds, (codes, _order, offsets, _rank) in zip(datasets, lookups):
        sizes = np.diff(offsets)[codes]
        usable = np.flatnonzero(sizes >= 2) if ds.kind == "identity" else np.arange(ds.num_rows)
        if len(usable) < slot_size:
            raise ConfigError(f"dataset {ds.name!r} has {len(usable)} usable rows, fewer than one naive "
                              f"slot of {slot_size}")
        anchors.append(usable)
    # rows, not usable rows, as the identity-aware scheduler: the ablation's arms see one dataset mix
    shares = dataset_shares(np.array([ds.weight for ds in datasets]), np.array([ds.num_rows for ds in datasets]),
                            settings.size_exponent)
    shares = shares / shares.sum()
    identity_keys = _identity_keys(datasets)

    total = settings.steps * batch
    slot_dataset = _slot_datasets(rng, shares, settings)
    dataset = np.repeat(slot_dataset.reshape(-1).astype(np.int32), slot_size)
    query = np.empty(total, dtype=np.int64)
    positive = np.empty(total, dtype=np.int64)
    repeated_identities = 0
    for step in tqdm(range(settings.steps), desc="scheduling (naive)", unit="step", disable=not show_progress):
        batch_keys = []
        for slot, d in enumerate(slot_dataset[step].tolist()):
            rows, partners = _draw_slot(rng, datasets[d], lookups[d], anchors[d], slot_size)
            first = step * batch + slot * slot_size
            query[first:first + slot_size] = rows
            positive[first:first + slot_size] = partners
            batch_keys.append(identity_keys[d][rows])
        repeated_identities += batch - len(np.unique(np.concatenate(batch_keys)))
    schedule = Schedule(settings=settings, dataset_names=[ds.name for ds in datasets],
                        dataset_ids=[np.asarray(ds.ids, dtype=object) for ds in datasets],
                        slot=np.tile(np.arange(batch, dtype=np.int32) // settings.interleave_batch_size,
                                     settings.steps),
                        dataset=dataset, query_row=query, positive_row=positive,
                        role=np.full(total, ROLES.index("anchor"), dtype=np.int8))
    schedule.report = _report(datasets, settings, dataset, repeated_identities)
    return schedule


def _draw_slot(rng: np.random.Generator, ds: SubDataset, lookup: Lookup,
               anchors: np.ndarray, slot_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``slot_size`` anchor rows drawn uniformly without replacement, and their positives."""
    codes, order, offsets, rank = lookup
    rows = rng.choice(anchors, size=slot_size, replace=False)
    if ds.kind == "pairs":
        return rows, rows
    ident = codes[rows]
    start, size = offsets[ident], offsets[ident + 1] - offsets[ident]
    # uniform among the identity's OTHER instances: draw one of the size-1 places and shift the
    # places at or after the anchor's rank up by one (skipping the anchor).  Replacing a hit on
    # the anchor by the next instance instead (as this sampler once did) doubled that
    # instance's chance and starved the last one.
    place = (rng.random(slot_size) * (size - 1)).astype(np.int64)
    place += place >= rank[rows]
    return rows, order[start + place]


def _report(datasets: Sequence[SubDataset], settings: ScheduleSettings, dataset: np.ndarray,
            repeated_identities: int) -> dict[str, Any]:
    slot_datasets = dataset[:: settings.interleave_batch_size]
    return {
        "strategy": "naive",
        "settings": settings.to_json(),
        # "batches": slots of the dataset (one slot per batch when M = B)
        "datasets": {ds.name: {"rows": ds.num_rows, "batches": int((slot_datasets == d).sum())}
                     for d, ds in enumerate(datasets)},
        # members whose identity already appeared earlier in the same batch: what the
        # identity-aware scheduler drives to zero
        "repeated_identity_members": repeated_identities,
        "repeated_identity_fraction": repeated_identities / max(1, settings.steps * settings.global_batch_size),
    }


def format_naive_report(report: dict[str, Any]) -> str:
    lines = [f"{'dataset':<24} {'rows':>9} {'slots':>8}", "-" * 43]
    lines += [f"{name[:24]:<24} {entry['rows']:>9} {entry['batches']:>8}"
              for name, entry in report["datasets"].items()]
    lines.append(f"naive strategy: {report['repeated_identity_members']} members "
                 f"({report['repeated_identity_fraction']:.2%}) repeat an identity already in their batch")
    return "\n".join(lines)
