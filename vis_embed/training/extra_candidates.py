"""Explicit negative candidates (a pairs row's ``negatives``) as extra columns of the loss.

Every rank encodes the extras of its own shard's members after its positives, padded to the
same count on every rank (``all_gather`` needs equal shapes), so the gathered candidate side
is ``[positives_0, extras_0 (+ padding), positives_1, extras_1, ...]``.  :func:`column_order`
turns that into the loss's layout: the N positives in batch order (column i is query i's
positive), then the real extras; padding is left out.  Every rank knows every member of the
global batch, so all ranks compute the same layout without communicating.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from vis_embed.data.train import TrainDataset


def column_order(extra_counts: Sequence[int], world_size: int) -> tuple[int, torch.Tensor | None]:
    """Extras each rank encodes (padded) and the gathered-candidate index of the loss's columns.

    ``extra_counts``: explicit negatives of each member of the global batch (batch order; rank
    r's shard is the r-th of ``world_size`` equal contiguous parts).  ``None`` order: no extras
    anywhere in the batch (the candidate side is the positives alone, as without this module).
    """
    total = len(extra_counts)
    if world_size <= 0 or total % world_size:
        raise ValueError(f"{total} members cannot be split over {world_size} ranks")
    shard = total // world_size
    per_rank = [sum(extra_counts[r * shard:(r + 1) * shard]) for r in range(world_size)]
    padded = max(per_rank, default=0)
    if padded == 0:
        return 0, None
    block = shard + padded
    positives = [r * block + i for r in range(world_size) for i in range(shard)]
    extras = [r * block + shard + j for r in range(world_size) for j in range(per_rank[r])]
    return padded, torch.tensor(positives + extras, dtype=torch.long)


def extra_count(dataset: TrainDataset, record_id: str) -> int:
    """Explicit negatives of a member's row (pairs rows' ``negatives``; 0 otherwise)."""
    return len(dataset.get(record_id).get("negatives", ())) if dataset.kind == "pairs" else 0


def prepare_extras(shard: Sequence[Any], dataset_of: Callable[[str], Any], prepare: Callable[..., list[Any]],
                   padded: int, filler: Any) -> list[Any]:
    """This rank's explicit negatives, prepared with their dataset's candidate instruction, padded
    to ``padded`` with ``filler`` (a prepared item; the padding never reaches the loss)."""
    by_dataset: dict[str, list[Any]] = {}
    for member in shard:
        dataset = dataset_of(member.dataset)
        by_dataset.setdefault(member.dataset, []).extend(dataset.negative_items(dataset.get(member.query_id)))
    prepared: list[Any] = []
    for name, items in by_dataset.items():
        if items:
            prepared.extend(prepare(items, instruction=dataset_of(name).candidate_instruction))
    return prepared + [filler] * (padded - len(prepared))
