"""Checks of a finished schedule, from its rows alone (not from the scheduler's own report).

Used by tests/test_schedule_slot_end.py and benchmarks/slot_end_configs.py (how often a group is
cut at a slot's end); kept in the library because both need it.
"""

from __future__ import annotations

import numpy as np

from vis_embed.sampling.types import ROLE_ANCHOR, Schedule, SubDataset


def short_beside_a_free_negative(schedule: Schedule, dataset: SubDataset, k: int,
                                 batch_size: int) -> tuple[int, int]:
    """(anchors wanting negatives, anchors short of min(k, designated) while one of their
    designated negatives was not in the batch) for a schedule of ``dataset`` alone."""
    offsets, negatives = dataset.hard_negative_csr()
    is_anchor = schedule.role == ROLE_ANCHOR
    anchors = np.flatnonzero(is_anchor)
    ends = np.r_[anchors[1:], len(is_anchor)]
    wanting = missed = 0
    for row, end in zip(anchors, ends):
        query = int(schedule.query_row[row])
        designated = set(negatives[offsets[query]:offsets[query + 1]].tolist())
        if not designated:
            continue
        wanting += 1
        step = row // batch_size
        in_batch = set(schedule.query_row[step * batch_size:(step + 1) * batch_size].tolist())
        missed += end - row - 1 < min(k, len(designated)) and bool(designated - in_batch)
    return wanting, missed
