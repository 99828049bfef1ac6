"""Filling one step's slots from a member stream: whole hard-negative groups where that works,
full look-alike groups first in pairs slots, other candidate orders, else a last group cut.

:class:`StepSlots` is the step's slot state (each slot's dataset, which take a pairs queue and
which must take it in order); :class:`SlotPacker` holds what lasts across steps: how often
packing whole groups and trying other orders paid off per dataset (:func:`worth` decides
whether they are still tried).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vis_embed.sampling.greedy import resolve
from vis_embed.sampling.member_stream import member_stream
from vis_embed.sampling.pairs_queue import PairsQueue
from vis_embed.sampling.record_tables import RecordTables
from vis_embed.sampling.settings import ScheduleSettings

# A slot that whole groups cannot fill tries other candidate orders, and in the first rounds
# more candidates, before it cuts a group.
REPACK_TRIES = 4

# When an effort that rarely pays is given up (one rule, both efforts): filling a dataset's
# slots with whole hard-negative groups, and trying other candidate orders for its short slots,
# cost time on every step; on data where they seldom succeed (e.g. every group has k + 1 members
# and M is no multiple of it) they only cost time -- at the paper's scale six times the whole
# schedule (docs/scheduling.md).
TRIAL = 20  # attempts before an effort that rarely succeeds stops being tried
MIN_SUCCESS_RATE = 0.1


def worth(tries: np.ndarray) -> np.ndarray:
    """Per row of ``(attempts, successes)``: still worth trying -- fewer than :data:`TRIAL`
    attempts, or at least :data:`MIN_SUCCESS_RATE` of them succeeded."""
    attempts, successes = tries[:, 0], tries[:, 1]
    return (attempts < TRIAL) | (successes >= MIN_SUCCESS_RATE * attempts)


@dataclass
class StepSlots:
    """One step's slots."""

    source: np.ndarray    # the dataset of each slot
    pairs: np.ndarray     # the slot takes a pairs dataset's queue
    in_order: np.ndarray  # the slot takes its queue in order (the once-per-epoch bound first)
    full: np.ndarray | None = None  # where the last fill preferred full look-alike groups

    @classmethod
    def drawn(cls, source: np.ndarray, pairs_datasets: np.ndarray) -> StepSlots:
        return cls(source=source, pairs=pairs_datasets[source], in_order=np.zeros(len(source), dtype=bool))


@dataclass
class Candidates:
    """A step's anchor candidates so far: (slot, row) chunks in draw order."""

    slot: list[np.ndarray]
    rows: list[np.ndarray]

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.concatenate(self.slot), np.concatenate(self.rows)


class SlotPacker:
    def __init__(self, settings: ScheduleSettings, tables: RecordTables, queue: PairsQueue,
                 rng: np.random.Generator) -> None:
        self.settings, self.tables, self.queue, self.rng = settings, tables, queue, rng
        datasets = len(tables.sources)
        # per dataset: steps in which packing whole groups was tried, and those it avoided cuts
        self.packing = np.zeros((datasets, 2), dtype=np.int64)
        # per dataset: other orders tried (repack) and how often they filled the short slots
        self.reordering = np.zeros((datasets, 2), dtype=np.int64)
        self.packing_now: set[int] = set()

    def strict(self, slots: StepSlots) -> np.ndarray:
        """Slots filled with whole groups (datasets where that rarely works cut groups at once)."""
        return worth(self.packing)[slots.source]

    def record_cuts(self, cut: np.ndarray) -> None:
        """``cut``: groups cut at a slot's end this step, per dataset; did packing avoid them?"""
        for d in self.packing_now:
            self.packing[d] += (1, cut[d] == 0)
        self.packing_now = set()

    def stream(self, candidates: Candidates) -> dict[str, np.ndarray]:
        slot, rows = candidates.arrays()
        return self._stream(slot, rows)

    def _stream(self, slot: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
        return member_stream(slot, rows, self.tables, self.settings.hard_negatives, self.rng,
                             self.queue.in_queue_order)

    def fill(self, stream: dict[str, np.ndarray], strict: np.ndarray, slots: StepSlots, relax: bool,
             full: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Accepted entries and the slots left short.  ``strict`` slots are filled with whole
        groups (no group cut at the slot's end), first with anchors whose free look-alikes make
        a full group (``full``), then, in a slot those cannot fill, with any whole groups; with
        ``relax`` a slot that cannot be filled so may cut its last group.  ``full`` (default: every
        strict pairs slot) is where full groups are preferred; the mask it ends with is kept in
        ``slots.full`` so that refills of the same step start from it (one resolve, not two)."""
        m, k = self.settings.interleave_batch_size, self.settings.hard_negatives
        num_slots = len(strict)
        # identity slots: whole groups suffice (their anchors are drawn ∝ instances; cheaper)
        strict &= ~slots.in_order  # slots that take their queue in order (once per epoch first)
        full = strict & slots.pairs if full is None else full & strict
        strict_given, full_given = strict.copy(), full.copy()
        while True:
            accepted = resolve(stream, num_slots, k, m, strict, full)
            filled = np.bincount(stream["slot"][accepted], minlength=num_slots)
            if (full & (filled < m)).any():
                full &= filled >= m  # anchors with short groups may take the room they left
                continue
            relax_now = strict & (filled < m)
            if relax and relax_now.any() and k:
                strict &= ~relax_now
                continue
            late = self.queue.breaks_epoch_bound(stream, accepted, slots.pairs) & ~slots.in_order
            if late.any():  # once per epoch first: those datasets' slots take their queue in order
                slots.in_order |= late
                strict, full = strict_given & ~slots.in_order, full_given & ~slots.in_order
                continue
            slots.full = full
            return accepted, np.flatnonzero(filled < m)

    def repack(self, candidates: Candidates, short: np.ndarray, strict: np.ndarray, slots: StepSlots,
               stream: dict[str, np.ndarray], relaxed: np.ndarray,
               more: bool) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """``short`` (strict) slots whole groups cannot fill in priority order: try other orders
        of their candidates (groups of other sizes may add up to M); failing
        that, with ``more``, return those slots as short (a round of more candidates), else keep
        ``relaxed`` (the slot cuts its last group).  A dataset where this rarely helps (e.g. every
        group has k + 1 members and M is no multiple of it) is not tried again: it would only cost time;
        nor are other orders (and more candidates) for a dataset where they rarely filled its slots
        (``self.reordering``, the same :func:`worth` rule): its slots cut at once."""
        slot, rows = candidates.arrays()
        # A pairs row that must be placed at this draw stays ahead of the others, in queue order;
        # the others are all of their dataset's current epoch, so any order of them keeps each
        # row's draw in its epoch.  (``member_stream`` keeps this order within each slot.)
        is_movable = np.isin(slot, short) & ~self.queue.in_queue_order(rows)
        movable, fixed = np.flatnonzero(is_movable), np.flatnonzero(~is_movable)
        datasets = np.unique(slots.source[short])
        if not len(movable):
            return stream, relaxed, short if more else np.zeros(0, dtype=np.int64)
        if not worth(self.reordering[datasets]).any():  # neither other orders nor more candidates
            return stream, relaxed, np.zeros(0, dtype=np.int64)  # have been filling these: cut now
        full = slots.full.copy()
        for _try in range(REPACK_TRIES):
            order = np.concatenate([fixed, self.rng.permutation(movable)])
            candidate = self._stream(slot[order], rows[order])
            accepted, still_short = self.fill(candidate, strict.copy(), slots, relax=False, full=full.copy())
            if not len(still_short):
                self.reordering[datasets] += (1, 1)
                return candidate, accepted, still_short
        self.reordering[datasets] += (1, 0)
        return stream, relaxed, short if more else np.zeros(0, dtype=np.int64)
