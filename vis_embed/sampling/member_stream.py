"""A step's members as a stream: candidate anchors (slot-major, priority order), each followed by
its designated hard negatives in random order; and the positive drawn for each accepted member.

The greedy pass (:mod:`.greedy`) decides which stream entries the batch takes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vis_embed.sampling.draws import segment_arange
from vis_embed.sampling.record_tables import RecordTables

# Hard negatives considered per anchor: k plus a margin for ones already in the batch.
HARD_NEGATIVE_MARGIN = 5


def member_stream(anchor_slot: np.ndarray, anchor_rows: np.ndarray, tables: RecordTables, k: int,
                  rng: np.random.Generator,
                  in_queue_order: Callable[[np.ndarray], np.ndarray]) -> dict[str, np.ndarray]:
    """The stream of ``anchor_rows`` (candidates of ``anchor_slot``), each followed by up to
    k + margin of its hard negatives; ``in_queue_order`` marks the pairs rows that must be placed
    at this draw (``redrawn``)."""
    order = np.argsort(anchor_slot, kind="stable")
    anchor_slot, anchor_rows = anchor_slot[order], anchor_rows[order]
    hn_offsets, hn_rows = tables.hn_offsets, tables.hn_rows
    available = hn_offsets[anchor_rows + 1] - hn_offsets[anchor_rows] if k else \
        np.zeros(len(anchor_rows), dtype=np.int64)
    # random order within each anchor's list, then keep k plus a margin
    within = segment_arange(available)
    group_of_hn = np.repeat(np.arange(len(anchor_rows)), available)
    negatives = hn_rows[np.repeat(hn_offsets[anchor_rows], available) + within]
    shuffle = np.lexsort((rng.random(len(negatives)), group_of_hn))
    negatives = negatives[shuffle]
    # Any designated negative may be placed; only the batch's accepted members block one
    # (a pairs row that is also an anchor candidate and is placed as a negative has had its
    # draw of the epoch, see PairsQueue.return_unused).
    keep = within < k + HARD_NEGATIVE_MARGIN
    negatives, group_of_hn = negatives[keep], group_of_hn[keep]
    kept = np.bincount(group_of_hn, minlength=len(anchor_rows)).astype(np.int64)
    sizes = 1 + kept
    group_start = np.cumsum(sizes) - sizes
    total = int(sizes.sum())
    row = np.empty(total, dtype=np.int64)
    is_anchor = np.zeros(total, dtype=bool)
    row[group_start] = anchor_rows
    is_anchor[group_start] = True
    hn_positions = np.repeat(group_start + 1, kept) + segment_arange(kept)
    row[hn_positions] = negatives
    group = np.repeat(np.arange(len(anchor_rows)), sizes)
    return {"row": row, "is_anchor": is_anchor, "group": group, "group_start": group_start,
            "group_available": available, "slot": np.repeat(anchor_slot, sizes),
            "identity": tables.row_identity[row], "redrawn": in_queue_order(row) & is_anchor}


def draw_positives(tables: RecordTables, query: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Identity rows: uniform among the *other* instances of the identity; a row without another
    instance (a pairs row): itself (its ``positive`` side)."""
    count = tables.row_instance_count[query]
    other = np.floor(rng.random(len(query)) * np.maximum(count - 1, 1)).astype(np.int64)
    offset = (tables.row_instance_rank[query] + 1 + other) % np.maximum(count, 1)
    has_other = count >= 2
    positive = query.copy()
    positive[has_other] = tables.instance_rows[tables.row_instance_start[query[has_other]] + offset[has_other]]
    return positive
