"""Which members of a global batch are each other's designated hard negatives.

The offline scheduler places an anchor's designated hard negatives right after it, in its
slot, with ``role == "hard_negative"`` (docs/scheduling.md).  The near-identity losses
(:mod:`~vis_embed.training.losses.two_tier`, :mod:`~vis_embed.training.losses.triplet_hinge`)
need that relation as a matrix over the batch's rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

HARD_NEGATIVE = "hard_negative"


def designated_negatives(roles: Sequence[str], slots: Sequence[int]) -> Tensor:
    """(N, N) bool: ``[i, j]`` is True when row j is a designated hard negative of anchor i,
    or row i one of anchor j.

    Symmetric because look-alikes are look-alikes both ways: the hard negative's own query is
    just as confusable with the anchor's candidate.  A hard-negative row belongs to the last
    anchor seen in its slot (rows are in slot order); one with no anchor before it in its slot
    is left out.  A naive schedule (every row an anchor) gives an all-False matrix.
    """
    if len(roles) != len(slots):
        raise ValueError(f"{len(roles)} roles but {len(slots)} slots")
    designated = torch.zeros(len(roles), len(roles), dtype=torch.bool)
    anchor_of_slot: dict[int, int] = {}
    for row, (role, slot) in enumerate(zip(roles, slots)):
        if role != HARD_NEGATIVE:
            anchor_of_slot[int(slot)] = row
            continue
        anchor = anchor_of_slot.get(int(slot))
        if anchor is not None:
            designated[anchor, row] = designated[row, anchor] = True
    return designated


def pad_columns(mask: Tensor, columns: int) -> Tensor:
    """``mask`` (N, N) widened with False to (N, columns): extra candidates beyond the N
    positives (explicit negatives) are never designated."""
    if mask.shape[1] == columns:
        return mask
    if mask.shape[1] > columns:
        raise ValueError(f"mask has {mask.shape[1]} columns, more than the {columns} candidates")
    return torch.cat([mask, mask.new_zeros(mask.shape[0], columns - mask.shape[1])], dim=1)
