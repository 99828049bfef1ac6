"""The queue of pairs datasets: rows of a per-epoch random permutation, each drawn once per
epoch (as an anchor, or placed as another anchor's hard negative while drawn); rows drawn but
not in the batch go back to the queue's front.  :class:`PairsQueue` owns the queue's state
across steps; a step gives it which of its slots take a pairs dataset (``pairs_slot``).

Strict pairs slots may pass a row over for its look-alikes (a group cut short loses the
look-alikes it exists for) or for room (a group is never cut at a slot's end while it could
wait).  A row passed over once
(``_skipped``) and a row of an epoch older than its dataset's current one (``_row_epoch``)
must be placed at this draw (``redrawn`` in the stream): never deferred again for its
look-alikes, but, like any anchor, placed only where its group fits; one that fits nowhere in
this batch waits at the queue's front.  That wait is bounded by the once-per-epoch guarantee
itself, counted (``EpochBound``): where a batch would anchor a row more than once more often
than another row of its dataset has been in batches, that dataset's slots take their queue in
order instead (groups may then be cut at a slot's end).
"""

from __future__ import annotations

import numpy as np

from vis_embed.sampling.epoch_bound import EpochBound
from vis_embed.sampling.record_tables import RecordTables, SourceState

_NEVER = np.iinfo(np.int64).max


class PairsQueue:
    def __init__(self, rng: np.random.Generator, tables: RecordTables, steps: int) -> None:
        self.rng = rng
        self.tables = tables
        records = len(tables.row_identity)
        # scratch flags over all records (membership tests in O(n) instead of sorting)
        self._flag = np.zeros(records, dtype=bool)
        self._skipped = np.zeros(records, dtype=bool)           # passed over by a slot, not yet placed
        self._row_epoch = np.full(records, _NEVER, dtype=np.int64)  # epoch of a waiting row's first draw
        self._source_epochs = np.zeros(len(self.tables.sources), dtype=np.int64)
        pairs_rows = np.array([source.num_rows if source.kind == "pairs" else 0 for source in self.tables.sources])
        self._epoch_bound = EpochBound(self.tables.row_dataset, pairs_rows, steps)

    @staticmethod
    def start(source: SourceState) -> None:
        """An empty queue for ``source`` (its first draw starts an epoch)."""
        source.permutation = np.zeros(0, dtype=np.int64)
        source.pending = np.zeros(0, dtype=np.int64)

    def _member_of(self, values: np.ndarray, members: np.ndarray) -> np.ndarray:
        """``np.isin(values, members)`` for record numbers, via the scratch flags."""
        self._flag[members] = True
        found = self._flag[values]
        self._flag[members] = False
        return found

    def candidates(self, source: SourceState, count: int) -> np.ndarray:
        """The next ``count`` rows: pending ones first, then the epoch's permutation."""
        taken = [source.pending[:count]]
        need = count - len(taken[0])
        source.pending = source.pending[len(taken[0]):]
        while need > 0:
            if source.cursor >= len(source.permutation):
                source.permutation = self.rng.permutation(source.num_rows) + source.offset
                source.cursor = 0
                source.epochs_started += 1
                self._source_epochs[source.index] = source.epochs_started
            chunk = source.permutation[source.cursor:source.cursor + need]
            source.cursor += len(chunk)
            # the oldest draw counts: a row taken at the end of one epoch and the start of the next
            self._row_epoch[chunk] = np.minimum(self._row_epoch[chunk], source.epochs_started)
            taken.append(chunk)
            need -= len(chunk)
        return np.concatenate(taken)

    def _overdue(self, rows: np.ndarray) -> np.ndarray:
        """Pairs rows drawn in an epoch older than their dataset's current one."""
        return self._row_epoch[rows] < self._source_epochs[self.tables.row_dataset[rows]]

    def in_queue_order(self, rows: np.ndarray) -> np.ndarray:
        """Pairs rows that must be placed at this draw (see ``_skipped`` / ``_row_epoch``)."""
        return self._skipped[rows] | self._overdue(rows)

    def breaks_epoch_bound(self, stream: dict[str, np.ndarray], accepted: np.ndarray,
                           pairs_slot: np.ndarray) -> np.ndarray:
        """Per slot: its dataset would anchor a row more than once more often than another of its
        rows has been in batches (rows waited for room too long): the slots that must take their
        queue in order (no room rule, so no row is passed over)."""
        slot, row = stream["slot"], stream["row"]
        placed = accepted & pairs_slot[slot]
        breaks = self._epoch_bound.would_break(row[placed], row[placed & stream["is_anchor"]])
        in_order = np.zeros(len(pairs_slot), dtype=bool)
        in_order[slot[breaks[self.tables.row_dataset[row]]]] = True
        return in_order

    def return_unused(self, pairs_taken: dict[int, list[np.ndarray]], stream: dict[str, np.ndarray],
                      accepted: np.ndarray, pairs_slot: np.ndarray) -> None:
        """Rows drawn as candidates but not in the batch go back to the front of the queue.

        A drawn row placed as another anchor's hard negative is a full member (its query with its
        own positive), so that counts as its draw of the epoch: each row is drawn once per epoch.
        """
        used = stream["row"][accepted]
        pairs = accepted & pairs_slot[stream["slot"]]
        self._epoch_bound.record(stream["row"][pairs], stream["row"][pairs & stream["is_anchor"]])
        self._skipped[used] = False
        self._row_epoch[used] = _NEVER
        self._skipped[self._passed_over(stream, accepted, pairs_slot)] = True
        for index, chunks in pairs_taken.items():
            source = self.tables.sources[index]
            taken = np.concatenate(chunks)
            # Multiset difference: across an epoch boundary a row can be taken twice (end of one
            # permutation, start of the next); only the copy that became an anchor is consumed.
            sorter = np.argsort(taken, kind="stable")
            ordered = taken[sorter]
            first_copy = np.empty(len(taken), dtype=bool)
            first_copy[sorter] = np.concatenate(([True], ordered[1:] != ordered[:-1]))
            unused = taken[~(first_copy & self._member_of(taken, used))]
            # a second copy of a used row was drawn from the newest permutation
            self._row_epoch[unused[self._member_of(unused, used)]] = source.epochs_started
            source.pending = np.concatenate([unused, source.pending])

    def _passed_over(self, stream: dict[str, np.ndarray], accepted: np.ndarray, pairs_slot: np.ndarray) -> np.ndarray:
        """Pairs anchor candidates left out although a later candidate of their slot was placed
        (deferred for their group's size or look-alikes): their next draw places them in order."""
        is_anchor = stream["is_anchor"]
        slot = stream["slot"]
        last_accepted = np.full(int(slot.max()) + 1 if len(slot) else 0, -1)
        positions = np.flatnonzero(accepted & is_anchor)
        np.maximum.at(last_accepted, slot[positions], positions)
        passed = is_anchor & ~accepted & (np.arange(len(slot)) < last_accepted[slot]) & pairs_slot[slot]
        rows = stream["row"][passed]
        return rows[~self._member_of(rows, stream["row"][accepted])]
