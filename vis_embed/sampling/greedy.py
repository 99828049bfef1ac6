"""The scheduler's member selection: the greedy pass over a step's candidate stream, computed
with vectorised numpy, and the causes of hard-negative shortfalls.

A *stream* is a dict of aligned arrays over candidate entries in priority order, slot-major:
``row`` (global record), ``identity``, ``slot``, ``is_anchor``, ``group`` (index of the
entry's anchor group), ``group_start`` (first entry of each group) and, for the shortfall
analysis, ``group_available`` (usable designated negatives of the group's anchor).
"""

from __future__ import annotations

import numpy as np

SHORTFALL_CAUSES: tuple[str, ...] = ("identity_in_batch", "slot_end", "beyond_margin")


def resolve(stream: dict[str, np.ndarray], num_slots: int, k: int, m: int,
            strict: np.ndarray | None = None) -> np.ndarray:
    """The greedy acceptance mask, as the fixed point of a vectorised update.

    Entry i is accepted iff (a) no earlier *accepted* entry has its identity, (b) for a hard
    negative: its anchor is accepted and fewer than k of the anchor's earlier hard negatives
    are, (c) fewer than M earlier entries of its slot are accepted, and (d) in a ``strict``
    slot, an anchor only if its slot still has room for it and min(k, its listed negatives):
    a group is never cut at the slot's end while another candidate could take the room.
    Every condition depends only on earlier entries (and the static group sizes), so Jacobi
    iteration from any start reaches the sequential answer; collisions are rare, so it
    converges in 2-3 rounds.
    """
    n = len(stream["row"])
    identity, is_anchor, group = stream["identity"], stream["is_anchor"], stream["group"]
    group_start, slot = stream["group_start"], stream["slot"]
    need = np.minimum(k, np.diff(np.r_[group_start, n]) - 1)
    strict_entry = np.zeros(n, dtype=bool) if strict is None else strict[slot] & is_anchor
    room_needed = np.where(strict_entry, 1 + need[group], 1)
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
        accepted &= position + room_needed <= m
        if np.array_equal(accepted, active):
            return accepted
        active = accepted
    raise AssertionError("greedy resolution did not converge")  # unreachable: DAG depth <= n


def identity_free(stream: dict[str, np.ndarray], accepted: np.ndarray) -> np.ndarray:
    """Per entry: no *earlier* accepted entry has its identity (the identity rule allows it)."""
    n = len(accepted)
    identity = stream["identity"]
    by_identity = np.lexsort((np.arange(n), identity))
    sorted_identity = identity[by_identity]
    run_first = np.concatenate(([True], sorted_identity[1:] != sorted_identity[:-1]))
    run_index = np.cumsum(run_first) - 1
    sorted_accepted = accepted[by_identity].astype(np.int64)
    before = np.cumsum(sorted_accepted) - sorted_accepted
    before -= before[np.flatnonzero(run_first)][run_index]
    free = np.empty(n, dtype=bool)
    free[by_identity] = before == 0
    return free


def shortfalls(stream: dict[str, np.ndarray], accepted: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per anchor group: whether it wanted negatives (accepted anchor, >= 1 usable) and why it
    got fewer than ``min(k, usable)`` (-1: it did not; else an index into ``SHORTFALL_CAUSES``).

    ``identity_in_batch``: too few of its negatives were free of the batch's identities (the
    identity rule forbids the rest); ``beyond_margin``: free ones existed only past the
    negatives considered per anchor; ``slot_end``: free ones existed but the slot was full.
    """
    group_start, group, is_anchor = stream["group_start"], stream["group"], stream["is_anchor"]
    num_groups = len(group_start)
    available = stream["group_available"]
    want = np.minimum(k, available)
    wanting = accepted[group_start] & (want > 0)
    negative = ~is_anchor
    got = np.bincount(group[accepted & negative], minlength=num_groups)
    considered = np.bincount(group[negative], minlength=num_groups)
    free = np.bincount(group[negative & identity_free(stream, accepted)], minlength=num_groups)
    cause = np.full(num_groups, -1, dtype=np.int64)
    short = wanting & (got < want)
    cause[short & (free + available - considered < want)] = 0
    cause[short & (free + available - considered >= want) & (free < want)] = 2
    cause[short & (free >= want)] = 1
    return wanting, cause
