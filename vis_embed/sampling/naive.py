"""The naive baseline schedule of the paper's sampling ablation (its Table 2, first row).

Each batch comes from ONE sub-dataset chosen in proportion to weight × rows^size_exponent,
and its B members are rows drawn uniformly without replacement within the batch — with no
identity constraint, so two photos of the same identity can share a batch and be pushed
apart as negatives (the loss's same-identity mask is the only safety net), and no structured
hard negatives.  It exists to measure what identity-aware scheduling buys; train with
``sampling.strategy: identity_aware`` otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from vis_embed.errors import ConfigError
from vis_embed.sampling.settings import ScheduleSettings
from vis_embed.sampling.types import ROLES, Schedule, SubDataset


def _positive_lookup(ds: SubDataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: identity code, and the rows of every identity grouped (CSR) for drawing positives."""
    if ds.kind == "pairs" or ds.identities is None:
        codes = np.arange(ds.num_rows)
    else:
        labels = np.asarray([repr(x) if x is not None else f"\\0row{i}" for i, x in enumerate(ds.identities)],
                            dtype=object)
        _, codes = np.unique(labels, return_inverse=True)
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return codes, order, offsets


def plan_naive_schedule(datasets: Sequence[SubDataset], settings: ScheduleSettings,
                        show_progress: bool = False) -> Schedule:
    """Compute the naive schedule in memory (same output type and file format as the real one)."""
    if settings.hard_negatives:
        raise ConfigError("the naive strategy places no hard negatives: set hard_negatives to 0")
    rng = np.random.default_rng(settings.seed)
    batch = settings.global_batch_size
    lookups = [_positive_lookup(ds) for ds in datasets]
    # Rows that can be anchors: pairs rows, and identity rows whose identity has another instance.
    anchors = []
    for ds, (codes, _order, offsets) in zip(datasets, lookups):
        sizes = np.diff(offsets)[codes]
        usable = np.flatnonzero(sizes >= 2) if ds.kind == "identity" else np.arange(ds.num_rows)
        if len(usable) < batch:
            raise ConfigError(f"dataset {ds.name!r} has {len(usable)} usable rows, fewer than one naive "
                              f"batch of {batch}")
        anchors.append(usable)
    shares = np.array([ds.weight * len(a) ** settings.size_exponent for ds, a in zip(datasets, anchors)])
    shares = shares / shares.sum()

    total = settings.steps * batch
    dataset = np.repeat(rng.choice(len(datasets), size=settings.steps, p=shares).astype(np.int16), batch)
    query = np.empty(total, dtype=np.int64)
    positive = np.empty(total, dtype=np.int64)
    repeated_identities = 0
    for step in tqdm(range(settings.steps), desc="scheduling (naive)", unit="step", disable=not show_progress):
        d = int(dataset[step * batch])
        codes, order, offsets = lookups[d]
        rows = rng.choice(anchors[d], size=batch, replace=False)
        ident = codes[rows]
        start, size = offsets[ident], offsets[ident + 1] - offsets[ident]
        if datasets[d].kind == "pairs":
            partners = rows
        else:
            # uniform among the identity's OTHER instances: draw from size-1 and skip the anchor
            pick = start + (rng.random(batch) * (size - 1)).astype(np.int64)
            partners = order[pick]
            partners = np.where(partners == rows, order[pick + 1], partners)
        query[step * batch:(step + 1) * batch] = rows
        positive[step * batch:(step + 1) * batch] = partners
        repeated_identities += batch - len(np.unique(ident))
    schedule = Schedule(settings=settings, dataset_names=[ds.name for ds in datasets],
                        dataset_ids=[np.asarray(ds.ids, dtype=object) for ds in datasets],
                        slot=np.tile(np.arange(batch, dtype=np.int32) // settings.interleave_batch_size,
                                     settings.steps),
                        dataset=dataset, query_row=query, positive_row=positive,
                        role=np.full(total, ROLES.index("anchor"), dtype=np.int8))
    schedule.report = _report(datasets, settings, dataset, repeated_identities)
    return schedule


def _report(datasets: Sequence[SubDataset], settings: ScheduleSettings, dataset: np.ndarray,
            repeated_identities: int) -> dict[str, Any]:
    batch_datasets = dataset[:: settings.global_batch_size]
    return {
        "strategy": "naive",
        "settings": settings.to_json(),
        "datasets": {ds.name: {"rows": ds.num_rows, "batches": int((batch_datasets == d).sum())}
                     for d, ds in enumerate(datasets)},
        # members whose identity already appeared earlier in the same batch: what the
        # identity-aware scheduler drives to zero
        "repeated_identity_members": repeated_identities,
        "repeated_identity_fraction": repeated_identities / max(1, settings.steps * settings.global_batch_size),
    }


def format_naive_report(report: dict[str, Any]) -> str:
    lines = [f"{'dataset':<24} {'rows':>9} {'batches':>8}", "-" * 43]
    lines += [f"{name[:24]:<24} {entry['rows']:>9} {entry['batches']:>8}"
              for name, entry in report["datasets"].items()]
    lines.append(f"naive strategy: {report['repeated_identity_members']} members "
                 f"({report['repeated_identity_fraction']:.2%}) repeat an identity already in their batch")
    return "\n".join(lines)
