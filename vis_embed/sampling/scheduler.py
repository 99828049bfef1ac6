"""The offline identity-aware batch scheduler (the VisME sampling algorithm).

The scheduler works on a small in-memory description of each sub-dataset
(:class:`SubDataset`: ids, identity labels, hard-negative lists as a CSR, weight), so it is
testable without files and fast: every step is resolved with a handful of vectorised numpy
operations over the ~B candidate members of that step, never a Python loop over members.

Per step (details and guarantees in docs/scheduling.md):

1. **Slots -> datasets.**  ``K = B / M`` slots.  Dataset ``d`` has share
   ``p_d ∝ weight_d × rows_d ** size_exponent`` and expects ``e_d = K p_d`` slots per batch
   (several slots of one batch when its share needs them; at most the ``usable identities //
   M`` slots it can fill with distinct identities).  They are realised by systematic sampling
   over a freshly shuffled dataset order: ``d`` gets ``floor(e_d)`` or ``ceil(e_d)`` slots and
   exactly ``e_d`` in expectation.
2. **Anchor candidates.**  Identity datasets: systematic PPS sampling of identities with
   inclusion probability ``min(1, λ × instances)`` (exactly proportional to the number of
   instances unless an identity is so frequent that it would need two places in one slot);
   identities with one instance are never anchors.  The anchor record is uniform among the
   identity's instances.  Pairs datasets: the next rows of a per-epoch random permutation
   (each row is drawn once per epoch: as an anchor, or placed as another anchor's hard
   negative while drawn; candidates not in the batch return to the queue's front).
3. **Members.**  Each candidate anchor is followed by its designated hard negatives in random
   order.  A greedy pass in stream order accepts a member iff its identity is not yet in the
   batch, a hard negative only if its anchor was accepted and fewer than ``k`` of the anchor's
   hard negatives were, and only while its slot has room (``M`` members); an anchor only if
   its slot has room for its whole group, unless the slot cannot be filled otherwise; in a
   pairs slot, first only anchors whose free look-alikes make a full group (designated sets
   overlap, and a group cut short loses the look-alikes it exists for); a row passed over once
   (or from an older epoch) is placed at its next draw where its group fits, or waits at the
   queue's front while the counted once-per-epoch bound allows (else the slots take the queue
   in order).  The greedy pass is
   computed as a fixed-point iteration of vectorised operations (each decision depends only
   on earlier entries, so the iteration reaches the sequential result).  Slots left short
   (identity collisions) get another round of candidates; a slot that cannot be filled is an
   error, never a smaller batch.
4. **Positives.**  Identity rows: uniform among the *other* instances of the identity (the
   positive has the anchor's identity, which is therefore also unique in the batch).  Pairs
   rows: the row itself (its ``positive`` side).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from vis_embed.errors import ConfigError
from vis_embed.sampling.draws import segment_arange, slot_expectations, systematic_sample
from vis_embed.sampling.effort import worth
from vis_embed.sampling.greedy import SHORTFALL_CAUSES, resolve, shortfalls
from vis_embed.sampling.identity_candidates import IdentityCandidates
from vis_embed.sampling.pairs_queue import PairsQueue
from vis_embed.sampling.prepare import prepare
from vis_embed.sampling.report import build_report
from vis_embed.sampling.settings import ScheduleSettings
from vis_embed.sampling.types import (
    ROLE_ANCHOR,
    ROLE_HARD_NEGATIVE,
    DatasetStats,
    IdentityDraws,
    Schedule,
    ScheduleStats,
    SubDataset,
)

# Rounds of extra candidates for a slot left short by identity collisions before giving up.
_MAX_TOPUP_ROUNDS = 12
# A slot that whole groups cannot fill tries other candidate orders, and in the first rounds
# more candidates, before it cuts a group.
_REPACK_TRIES = 4
# Rounds of more candidates a slot tries before cutting (on the overlapping pairs set of
# tests/test_schedule_slot_end.py, 3 rounds left 2 anchors of 20 seeds short, 5 none).
_PACKING_ROUNDS = 5
# Hard negatives considered per anchor: k plus a margin for ones already in the batch.
_HARD_NEGATIVE_MARGIN = 5



class _Scheduler(IdentityCandidates, PairsQueue):
    def __init__(self, datasets: Sequence[SubDataset], settings: ScheduleSettings) -> None:
        self.settings = settings
        self.datasets = list(datasets)
        self.rng = np.random.default_rng(settings.seed)
        self.prep = prepare(self.datasets, settings)
        self._choose_slot_expectations()
        for source in self.prep.sources:
            if source.skipped is None and source.kind == "identity":
                self._init_identity_sampling(source)
            elif source.skipped is None:
                source.permutation = np.zeros(0, dtype=np.int64)
                source.pending = np.zeros(0, dtype=np.int64)
        self.topup_rounds = 0
        # per dataset: accepted anchors with usable negatives, and their shortfalls by cause
        self.anchors_wanting = np.zeros(len(self.prep.sources), dtype=np.int64)
        self.shortfall_counts = np.zeros((len(self.prep.sources), len(SHORTFALL_CAUSES)), dtype=np.int64)
        # per dataset: steps in which packing whole groups was tried, and those it avoided cuts
        self.packing = np.zeros((len(self.prep.sources), 2), dtype=np.int64)
        # per dataset: other orders tried (_repack) and how often they filled the short slots
        self.reordering = np.zeros((len(self.prep.sources), 2), dtype=np.int64)
        self.packing_now: set[int] = set()
        self.prep_kinds_pairs = np.array([source.kind == "pairs" for source in self.prep.sources])
        # scratch flags over all records (membership tests in O(n) instead of sorting)
        self._flag = np.zeros(len(self.prep.row_identity), dtype=bool)
        self._init_pairs_queue()

    def _member_of(self, values: np.ndarray, members: np.ndarray) -> np.ndarray:
        """``np.isin(values, members)`` for record numbers, via the scratch flags."""
        self._flag[members] = True
        found = self._flag[values]
        self._flag[members] = False
        return found

    # ---- setup

    def _choose_slot_expectations(self) -> None:
        """Expected slots per batch ``e_d = K p_d``: a dataset takes several slots of one batch when
        its share needs them, up to the ``usable identities // M`` slots it can fill with distinct
        identities (the capacity; the rest of its share goes to the others, reported)."""
        settings = self.settings
        sources = self.prep.sources
        shares = np.array([0.0 if s.skipped else s.weight * float(s.num_rows) ** settings.size_exponent
                           for s in sources])
        usable = int((shares > 0).sum())
        if usable == 0:
            raise ConfigError("no dataset is large enough for one slot: " +
                              "; ".join(s.skipped or "" for s in sources))
        slots, m = settings.num_slots, settings.interleave_batch_size
        capacity = np.array([0.0 if s.skipped else float(s.distinct_identities // m) for s in sources])
        if capacity.sum() < slots:
            detail = ", ".join(f"{s.name!r}: {int(c)}" for s, c in zip(sources, capacity) if not s.skipped)
            raise ConfigError(
                f"the datasets can fill at most {int(capacity.sum())} of the {slots} slots per batch with "
                f"members of distinct identities (slots per batch a dataset can fill = its usable "
                f"identities // interleave_batch_size {m}: {detail}); add datasets, lower "
                f"interleave_batch_size or lower global_batch_size")
        self.dataset_share = shares / shares.sum()
        self.slot_expectation = slot_expectations(shares, slots, capacity)
        self.slot_cap = int(math.ceil(float(self.slot_expectation.max()) - 1e-9))

    # ---- statistics

    def stats(self, query: np.ndarray) -> ScheduleStats:
        """The public statistics of the planned schedule (``query``: global record of each member)."""
        prep = self.prep
        datasets = [DatasetStats(
            name=source.name, kind=source.kind, num_rows=source.num_rows, weight=source.weight,
            num_identities=source.num_identities, excluded_identities=source.excluded_identities,
            usable_identities=source.distinct_identities, skipped=source.skipped,
            expected_slots=float(self.slot_expectation[source.index]),
            proportional_share=float(self.dataset_share[source.index]),
            hard_negatives_dropped=prep.hn_dropped[source.name],
            anchors_wanting_negatives=int(self.anchors_wanting[source.index]),
            hard_negative_shortfalls=dict(zip(SHORTFALL_CAUSES, self.shortfall_counts[source.index].tolist())),
            identity_draws=IdentityDraws(codes=source.identity_codes, instances=source.identity_count,
                                         inclusion=source.inclusion, capped=source.capped_identities)
            if source.kind == "identity" and source.skipped is None else None)
            for source in prep.sources]
        return ScheduleStats(
            datasets=datasets, max_slots_per_dataset=self.slot_cap,
            hard_negative_groups_truncated=int(self.shortfall_counts[:, SHORTFALL_CAUSES.index("slot_end")].sum()),
            extra_candidate_rounds=self.topup_rounds,
            member_identity=prep.row_identity[query], member_designated_negatives=prep.designated_hn[query],
            member_usable_negatives=prep.hn_offsets[query + 1] - prep.hn_offsets[query],
            identity_labels=prep.identity_labels)

    # ---- one step

    def step(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Members of one batch: (slot, query record, positive record, role), slot-ordered."""
        m = self.settings.interleave_batch_size
        slot_source = self._slot_source = self._slot_sources()
        anchor_slot, anchor_rows, pairs_taken = [], [], {}
        # slots filled with whole groups (datasets where that rarely works cut groups at once;
        # pairs slots take their queue in order, so no row is skipped for its group's size)
        strict = worth(self.packing)[slot_source]
        self._pairs_slot = self.prep_kinds_pairs[slot_source]
        self._in_order = np.zeros(len(slot_source), dtype=bool)
        self._add_candidates(range(len(slot_source)), slot_source, anchor_slot, anchor_rows, pairs_taken)
        for _round in range(_MAX_TOPUP_ROUNDS + 1):
            stream = self._stream(np.concatenate(anchor_slot), np.concatenate(anchor_rows))
            accepted, short = self._fill(stream, strict.copy(), relax=False)
            if len(short):
                self.packing_now.update(slot_source[short[strict[short]]].tolist())
                # enough candidates but whole groups do not add up to M (a packing problem):
                # other orders, else cut a last group; too few candidates: another round
                relaxed, relaxed_short = self._fill(stream, strict.copy(), relax=True, full=self._full.copy())
                if not len(relaxed_short):
                    stream, accepted, short = self._repack(anchor_slot, anchor_rows, short, strict,
                                                           stream, relaxed, more=_round < _PACKING_ROUNDS)
                else:  # cutting groups elsewhere can leave other slots short: top them all up
                    short = np.union1d(short, relaxed_short)
            if not len(short):
                break
            self.topup_rounds += 1
            self._add_candidates(short, slot_source, anchor_slot, anchor_rows, pairs_taken,
                                 in_batch=stream["identity"][accepted])
        else:
            names = sorted({self.prep.sources[slot_source[s]].name for s in short})
            raise ConfigError(
                f"cannot fill {len(short)} slot(s) with {m} members of distinct identities from "
                f"dataset(s) {names}: identities collide across slots (shared namespace or several "
                f"slots of one dataset); lower interleave_batch_size or add data")
        self._return_unused_pairs(pairs_taken, stream, accepted)
        self._count_shortfalls(stream, accepted)
        slot = stream["slot"][accepted]
        query = stream["row"][accepted]
        role = np.where(stream["is_anchor"][accepted], ROLE_ANCHOR, ROLE_HARD_NEGATIVE).astype(np.int8)
        return slot, query, self._positives(query), role

    def _fill(self, stream: dict[str, np.ndarray], strict: np.ndarray, relax: bool,
              full: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Accepted entries and the slots left short.  ``strict`` slots are filled with whole
        groups (no group cut at the slot's end), first with anchors whose free look-alikes make
        a full group (``full``), then, in a slot those cannot fill, with any whole groups; with
        ``relax`` a slot that cannot be filled so may cut its last group.  ``full`` (default: every
        strict pairs slot) is where full groups are preferred; the mask it ends with is kept in
        ``self._full`` so that refills of the same step start from it (one resolve, not two)."""
        m = self.settings.interleave_batch_size
        num_slots = len(strict)
        # identity slots: whole groups suffice (their anchors are drawn ∝ instances; cheaper)
        strict &= ~self._in_order  # slots that take their queue in order (once per epoch first)
        full = strict & self._pairs_slot if full is None else full & strict
        strict_given, full_given = strict.copy(), full.copy()
        while True:
            accepted = self._resolve(stream, num_slots, strict, full)
            filled = np.bincount(stream["slot"][accepted], minlength=num_slots)
            if (full & (filled < m)).any():
                full &= filled >= m  # anchors with short groups may take the room they left
                continue
            relax_now = strict & (filled < m)
            if relax and relax_now.any() and self.settings.hard_negatives:
                strict &= ~relax_now
                continue
            late = self._breaks_epoch_bound(stream, accepted) & ~self._in_order
            if late.any():  # once per epoch first: those datasets' slots take their queue in order
                self._in_order |= late
                strict, full = strict_given & ~self._in_order, full_given & ~self._in_order
                continue
            self._full = full
            return accepted, np.flatnonzero(filled < m)

    def _repack(self, anchor_slot: list[np.ndarray], anchor_rows: list[np.ndarray], short: np.ndarray,
                strict: np.ndarray, stream: dict[str, np.ndarray], relaxed: np.ndarray,
                more: bool) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """``short`` (strict) slots whole groups cannot fill in priority order: try other orders
        of their candidates (groups of other sizes may add up to M); failing
        that, with ``more``, return those slots as short (a round of more candidates), else keep
        ``relaxed`` (the slot cuts its last group).  A dataset where this rarely helps (e.g. every
        group has k + 1 members and M is no multiple of it) is not tried again: it would only cost time;
        nor are other orders (and more candidates) for a dataset where they rarely filled its slots
        (``self.reordering``, the same ``effort.worth`` rule): its slots cut at once."""
        slots, rows = np.concatenate(anchor_slot), np.concatenate(anchor_rows)
        # A pairs row that must be placed at this draw stays ahead of the others, in queue order;
        # the others are all of their dataset's current epoch, so any order of them keeps each
        # row's draw in its epoch.  (``_stream`` keeps this order within each slot.)
        is_movable = np.isin(slots, short) & ~self._in_queue_order(rows)
        movable, fixed = np.flatnonzero(is_movable), np.flatnonzero(~is_movable)
        datasets = np.unique(self._slot_source[short])
        if not len(movable):
            return stream, relaxed, short if more else np.zeros(0, dtype=np.int64)
        if not worth(self.reordering[datasets]).any():  # neither other orders nor more candidates
            return stream, relaxed, np.zeros(0, dtype=np.int64)  # have been filling these: cut now
        full = self._full.copy()
        for _try in range(_REPACK_TRIES):
            order = np.concatenate([fixed, self.rng.permutation(movable)])
            candidate = self._stream(slots[order], rows[order])
            accepted, still_short = self._fill(candidate, strict.copy(), relax=False, full=full.copy())
            if not len(still_short):
                self.reordering[datasets] += (1, 1)
                return candidate, accepted, still_short
        self.reordering[datasets] += (1, 0)
        return stream, relaxed, short if more else np.zeros(0, dtype=np.int64)

    def _count_shortfalls(self, stream: dict[str, np.ndarray], accepted: np.ndarray) -> None:
        wanting, cause = shortfalls(stream, accepted, self.settings.hard_negatives)
        dataset = self.prep.row_dataset[stream["row"][stream["group_start"]]]
        np.add.at(self.anchors_wanting, dataset[wanting], 1)
        short = cause >= 0
        np.add.at(self.shortfall_counts, (dataset[short], cause[short]), 1)
        cut = np.bincount(dataset[cause == SHORTFALL_CAUSES.index("slot_end")], minlength=len(self.packing))
        for d in self.packing_now:  # packing was tried for d in this step: did it avoid cuts?
            self.packing[d] += (1, cut[d] == 0)
        self.packing_now = set()

    def _slot_sources(self) -> np.ndarray:
        order = self.rng.permutation(len(self.slot_expectation))
        picked = systematic_sample(self.slot_expectation[order], self.settings.num_slots, self.rng)
        sources = order[picked]
        return sources[self.rng.permutation(len(sources))]

    def _add_candidates(self, slots: Any, slot_source: np.ndarray, anchor_slot: list[np.ndarray],
                        anchor_rows: list[np.ndarray], pairs_taken: dict[int, list[np.ndarray]],
                        in_batch: np.ndarray | None = None) -> None:
        """Candidates for ``slots``; a top-up round (``in_batch``: the identities already in the
        batch) draws identity-dataset candidates among the identities not yet in the batch."""
        slots = np.asarray(slots, dtype=np.int64)
        for index in np.unique(slot_source[slots]):
            source = self.prep.sources[index]
            mine = slots[slot_source[slots] == index]
            if source.kind == "identity" and in_batch is not None:
                chunks = self._free_identity_candidates(source, len(mine), in_batch)
            elif source.kind == "identity":
                chunks = self._identity_candidates(source, len(mine))
            else:
                rows = self._pairs_candidates(source, source.candidates * len(mine))
                pairs_taken.setdefault(source.index, []).append(rows)
                # Every slot of the dataset sees the whole list in queue order: the greedy pass
                # then hands out a prefix of the queue (rows taken by an earlier slot are
                # blocked by identity), so no row of the next epoch is used while one of the
                # current epoch is left over.
                chunks = [rows] * len(mine)
            for s, rows in zip(mine, chunks):
                anchor_slot.append(np.full(len(rows), s, dtype=np.int64))
                anchor_rows.append(rows)

    def _stream(self, anchor_slot: np.ndarray, anchor_rows: np.ndarray) -> dict[str, np.ndarray]:
        """Candidate anchors (slot-major, priority order), each followed by its hard negatives."""
        order = np.argsort(anchor_slot, kind="stable")
        anchor_slot, anchor_rows = anchor_slot[order], anchor_rows[order]
        k = self.settings.hard_negatives
        hn_offsets, hn_rows = self.prep.hn_offsets, self.prep.hn_rows
        available = hn_offsets[anchor_rows + 1] - hn_offsets[anchor_rows] if k else \
            np.zeros(len(anchor_rows), dtype=np.int64)
        # random order within each anchor's list, then keep k plus a margin
        within = segment_arange(available)
        group_of_hn = np.repeat(np.arange(len(anchor_rows)), available)
        negatives = hn_rows[np.repeat(hn_offsets[anchor_rows], available) + within]
        shuffle = np.lexsort((self.rng.random(len(negatives)), group_of_hn))
        negatives = negatives[shuffle]
        # Any designated negative may be placed; only the batch's accepted members block one
        # (a pairs row that is also an anchor candidate and is placed as a negative has had its
        # draw of the epoch, see _return_unused_pairs).
        keep = within < k + _HARD_NEGATIVE_MARGIN
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
                "identity": self.prep.row_identity[row], "redrawn": self._in_queue_order(row) & is_anchor}

    def _resolve(self, stream: dict[str, np.ndarray], num_slots: int,
                 strict: np.ndarray | None = None, full: np.ndarray | None = None) -> np.ndarray:
        """The greedy acceptance mask (``greedy.resolve``) under this schedule's k and M."""
        return resolve(stream, num_slots, self.settings.hard_negatives, self.settings.interleave_batch_size,
                       strict, full)

    def _positives(self, query: np.ndarray) -> np.ndarray:
        prep = self.prep
        count = prep.row_instance_count[query]
        other = np.floor(self.rng.random(len(query)) * np.maximum(count - 1, 1)).astype(np.int64)
        offset = (prep.row_instance_rank[query] + 1 + other) % np.maximum(count, 1)
        has_other = count >= 2
        positive = query.copy()
        positive[has_other] = prep.instance_rows[prep.row_instance_start[query[has_other]] + offset[has_other]]
        return positive

def plan_schedule(datasets: Sequence[SubDataset], settings: ScheduleSettings,
                  show_progress: bool = False) -> Schedule:
    """Compute the whole schedule in memory (see the module docstring for the algorithm).

    The returned schedule carries the planner's statistics (``schedule.stats``) and the
    report built from them (``schedule.report``).
    """
    scheduler = _Scheduler(datasets, settings)
    batch = settings.global_batch_size
    total = settings.steps * batch
    slot = np.empty(total, dtype=np.int32)
    dataset = np.empty(total, dtype=np.int16)
    query = np.empty(total, dtype=np.int64)
    positive = np.empty(total, dtype=np.int64)
    role = np.empty(total, dtype=np.int8)
    for step in tqdm(range(settings.steps), desc="scheduling", unit="step", disable=not show_progress):
        s, q, p, r = scheduler.step()
        rows = slice(step * batch, (step + 1) * batch)
        slot[rows], query[rows], positive[rows], role[rows] = s, q, p, r
    dataset[:] = scheduler.prep.row_dataset[query]
    offsets = np.array([src.offset for src in scheduler.prep.sources], dtype=np.int64)
    local_query = query - offsets[dataset]
    local_positive = positive - offsets[dataset]
    schedule = Schedule(settings=settings, dataset_names=[ds.name for ds in datasets],
                        dataset_ids=[np.asarray(ds.ids, dtype=object) for ds in datasets],
                        slot=slot, dataset=dataset, query_row=local_query,
                        positive_row=local_positive, role=role, stats=scheduler.stats(query))
    schedule.report = build_report(schedule, schedule.stats)
    return schedule
