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
            strict: np.ndarray | None = None, full: np.ndarray | None = None) -> np.ndarray:
    """The greedy acceptance mask, as the fixed point of a vectorised update.

    Entry i is accepted iff (a) no earlier *accepted* entry has its identity, (b) for a hard
    negative: its anchor is accepted and fewer than k of the anchor's earlier hard negatives
    are, (c) fewer than M earlier entries of its slot are accepted, and (d) in a ``strict``
    slot, an anchor only if its slot still has room for it and the negatives it will get:
    min(k, its negatives whose identity is neither accepted before the anchor nor repeated
    earlier in its list).  So a group is never cut at the slot's end while another candidate
    could take the room; and (e) in a ``full`` slot (a strict one that prefers whole groups),
    an anchor only if those free negatives reach min(k, its designated negatives): an anchor
    whose look-alikes are already in the batch is left for a later batch while others fill
    the slot.  A pairs row that must be placed at this draw (``redrawn``: passed over once, or
    from an older epoch; sampling/pairs_queue.py) is exempt from (e), not from (d): a row that
    does not fit goes to a later slot of its dataset or waits at the queue's front.  Every
    condition depends only on earlier entries, so Jacobi iteration from any start reaches the
    sequential answer; collisions are rare, so it converges in 2-3 rounds.
    """
    n = len(stream["row"])
    identity, is_anchor, group = stream["identity"], stream["is_anchor"], stream["group"]
    group_start, slot = stream["group_start"], stream["slot"]
    # a pairs row that must be placed at this draw (``redrawn``) takes whatever negatives are free:
    # never deferred for its look-alikes; but it needs room for them like any anchor (a row that
    # does not fit the slot's rest goes to the dataset's next slot, or waits at the queue's front)
    redrawn = stream.get("redrawn", np.zeros(n, dtype=bool))
    strict_entry = np.zeros(n, dtype=bool) if strict is None else strict[slot] & is_anchor
    full_entry = np.zeros(n, dtype=bool) if full is None else full[slot] & strict_entry & ~redrawn
    wanted = np.minimum(k, stream["group_available"]) if full is not None else None
    by_identity = np.lexsort((np.arange(n), identity))
    sorted_identity = identity[by_identity]
    run_first = np.concatenate(([True], sorted_identity[1:] != sorted_identity[:-1]))
    run_index = np.cumsum(run_first) - 1
    run_first_positions = np.flatnonzero(run_first)
    dense_identity = np.empty(n, dtype=np.int64)
    dense_identity[by_identity] = run_index
    # a negative repeating an identity earlier in its own list can never be placed
    first_in_group = np.zeros(n, dtype=bool)
    first_in_group[np.unique(group * (int(run_index[-1]) + 1 if n else 1) + dense_identity,
                             return_index=True)[1]] = True
    candidate_negative = ~is_anchor & first_in_group
    accepted_at = np.full(int(run_index[-1]) + 1 if n else 0, n, dtype=np.int64)
    slot_first = np.searchsorted(slot, np.arange(num_slots))
    active = np.ones(n, dtype=bool)
    for _ in range(n + 1):
        sorted_active = active[by_identity].astype(np.int64)
        before = np.cumsum(sorted_active) - sorted_active
        before -= before[run_first_positions][run_index]
        valid = np.empty(n, dtype=bool)
        valid[by_identity] = before == 0
        anchor_ok = active[group_start]  # the anchor is earlier: its acceptance in the last iterate
        hn_ok = valid & ~is_anchor & anchor_ok[group]
        running = np.cumsum(hn_ok)
        rank = running - (running[group_start] - hn_ok[group_start])[group]
        accepted = (is_anchor & valid) | (hn_ok & (rank <= k))
        accepted_at[:] = n
        positions = np.flatnonzero(active)[::-1]  # written last to first: the earliest one stays
        accepted_at[dense_identity[positions]] = positions
        free_negative = candidate_negative & (accepted_at[dense_identity] >= group_start[group]) \
            & (identity != identity[group_start[group]])
        need = np.minimum(k, np.bincount(group[free_negative], minlength=len(group_start)))
        room_needed = np.where(strict_entry, 1 + need[group], 1)
        if wanted is not None:
            accepted &= ~(full_entry & (need[group] < wanted[group]))
        # a slot position counts the earlier entries *accepted* (last iterate), not those that
        # pass the identity and group rules but find no room (an anchor skipped in a strict slot)
        running = np.cumsum(active)
        at_slot_start = np.concatenate(([0], running))[slot_first]
        position = running - active - at_slot_start[slot]
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

    ``slot_end``: negatives free of the batch's identities were left out because the slot
    was full; ``identity_in_batch``: all free ones were placed and the identity rule forbids
    the rest; ``beyond_margin``: free ones may exist past the negatives considered per anchor.
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
    cut = short & (got < np.minimum(want, free))
    cause[cut] = SHORTFALL_CAUSES.index("slot_end")
    cause[short & ~cut & (free + available - considered < want)] = SHORTFALL_CAUSES.index("identity_in_batch")
    cause[short & ~cut & (free + available - considered >= want)] = SHORTFALL_CAUSES.index("beyond_margin")
    return wanting, cause
