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

The modules by role: :mod:`.slot_plan` (1), :mod:`.identity_candidates` and :mod:`.pairs_queue`
(2), :mod:`.member_stream` (the stream of 3, and 4), :mod:`.greedy` (3's acceptance pass),
:mod:`.packing` (3's slot filling: whole groups, other orders, cuts); this module runs the steps
(:class:`_Scheduler`) and the whole schedule (:func:`plan_schedule`), and counts what the
report shows.  Each is given the state it works on; none reaches into another's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tqdm.auto import tqdm

from vis_embed.errors import ConfigError
from vis_embed.sampling.greedy import SHORTFALL_CAUSES, shortfalls
from vis_embed.sampling.identity_candidates import IdentitySampler
from vis_embed.sampling.member_stream import draw_positives
from vis_embed.sampling.packing import Candidates, SlotPacker, StepSlots
from vis_embed.sampling.pairs_queue import PairsQueue
from vis_embed.sampling.record_tables import build_record_tables
from vis_embed.sampling.report import build_report
from vis_embed.sampling.settings import ScheduleSettings
from vis_embed.sampling.slot_plan import plan_slots
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
# Rounds of more candidates a slot tries before cutting (on the overlapping pairs set of
# tests/test_schedule_slot_end.py, 3 rounds left 2 anchors of 20 seeds short, 5 none).
_PACKING_ROUNDS = 5


class _Scheduler:
    def __init__(self, datasets: Sequence[SubDataset], settings: ScheduleSettings) -> None:
        self.settings = settings
        self.datasets = list(datasets)
        self.rng = np.random.default_rng(settings.seed)
        self.tables = build_record_tables(self.datasets, settings)
        self.slot_plan = plan_slots(self.tables, settings)
        self.identities = IdentitySampler(self.rng, self.tables.instance_rows)
        for source in self.tables.sources:
            if source.skipped is None and source.kind == "identity":
                self.identities.start(source)
            elif source.skipped is None:
                PairsQueue.start(source)
        self.topup_rounds = 0
        # per dataset: accepted anchors with usable negatives, and their shortfalls by cause
        self.anchors_wanting = np.zeros(len(self.tables.sources), dtype=np.int64)
        self.shortfall_counts = np.zeros((len(self.tables.sources), len(SHORTFALL_CAUSES)), dtype=np.int64)
        self.pairs_datasets = np.array([source.kind == "pairs" for source in self.tables.sources])
        self.queue = PairsQueue(self.rng, self.tables, settings.steps)
        self.packer = SlotPacker(settings, self.tables, self.queue, self.rng)

    # ---- statistics

    def stats(self, query: np.ndarray) -> ScheduleStats:
        """The public statistics of the planned schedule (``query``: global record of each member)."""
        tables = self.tables
        datasets = [DatasetStats(
            name=source.name, kind=source.kind, num_rows=source.num_rows, weight=source.weight,
            num_identities=source.num_identities, excluded_identities=source.excluded_identities,
            usable_identities=source.distinct_identities, skipped=source.skipped,
            expected_slots=float(self.slot_plan.expectation[source.index]),
            proportional_share=float(self.slot_plan.share[source.index]),
            hard_negatives_dropped=tables.hn_dropped[source.name],
            anchors_wanting_negatives=int(self.anchors_wanting[source.index]),
            hard_negative_shortfalls=dict(zip(SHORTFALL_CAUSES, self.shortfall_counts[source.index].tolist())),
            identity_draws=IdentityDraws(codes=source.identity_codes, instances=source.identity_count,
                                         inclusion=source.inclusion, capped=source.capped_identities)
            if source.kind == "identity" and source.skipped is None else None)
            for source in tables.sources]
        return ScheduleStats(
            datasets=datasets, max_slots_per_dataset=self.slot_plan.cap,
            hard_negative_groups_truncated=int(self.shortfall_counts[:, SHORTFALL_CAUSES.index("slot_end")].sum()),
            extra_candidate_rounds=self.topup_rounds,
            member_identity=tables.row_identity[query], member_designated_negatives=tables.designated_hn[query],
            member_usable_negatives=tables.hn_offsets[query + 1] - tables.hn_offsets[query],
            identity_labels=tables.identity_labels)

    # ---- one step

    def step(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Members of one batch: (slot, query record, positive record, role), slot-ordered."""
        m = self.settings.interleave_batch_size
        slots = StepSlots.drawn(self.slot_plan.draw(self.settings.num_slots, self.rng), self.pairs_datasets)
        candidates, pairs_taken = Candidates([], []), {}
        # slots filled with whole groups (datasets where that rarely works cut groups at once;
        # pairs slots take their queue in order, so no row is skipped for its group's size)
        strict = self.packer.strict(slots)
        self._add_candidates(np.arange(len(slots.source)), slots, candidates, pairs_taken)
        for _round in range(_MAX_TOPUP_ROUNDS + 1):
            stream = self.packer.stream(candidates)
            accepted, short = self.packer.fill(stream, strict.copy(), slots, relax=False)
            if len(short):
                self.packer.packing_now.update(slots.source[short[strict[short]]].tolist())
                # enough candidates but whole groups do not add up to M (a packing problem):
                # other orders, else cut a last group; too few candidates: another round
                relaxed, relaxed_short = self.packer.fill(stream, strict.copy(), slots, relax=True,
                                                          full=slots.full.copy())
                if not len(relaxed_short):
                    stream, accepted, short = self.packer.repack(candidates, short, strict, slots, stream, relaxed,
                                                                 more=_round < _PACKING_ROUNDS)
                else:  # cutting groups elsewhere can leave other slots short: top them all up
                    short = np.union1d(short, relaxed_short)
            if not len(short):
                break
            self.topup_rounds += 1
            self._add_candidates(short, slots, candidates, pairs_taken, in_batch=stream["identity"][accepted])
        else:
            names = sorted({self.tables.sources[slots.source[s]].name for s in short})
            raise ConfigError(
                f"cannot fill {len(short)} slot(s) with {m} members of distinct identities from "
                f"dataset(s) {names}: identities collide across slots (shared namespace or several "
                f"slots of one dataset); lower interleave_batch_size or add data")
        self.queue.return_unused(pairs_taken, stream, accepted, slots.pairs)
        self._count_shortfalls(stream, accepted)
        slot = stream["slot"][accepted]
        query = stream["row"][accepted]
        role = np.where(stream["is_anchor"][accepted], ROLE_ANCHOR, ROLE_HARD_NEGATIVE).astype(np.int8)
        return slot, query, draw_positives(self.tables, query, self.rng), role

    def _count_shortfalls(self, stream: dict[str, np.ndarray], accepted: np.ndarray) -> None:
        wanting, cause = shortfalls(stream, accepted, self.settings.hard_negatives)
        dataset = self.tables.row_dataset[stream["row"][stream["group_start"]]]
        np.add.at(self.anchors_wanting, dataset[wanting], 1)
        short = cause >= 0
        np.add.at(self.shortfall_counts, (dataset[short], cause[short]), 1)
        self.packer.record_cuts(np.bincount(dataset[cause == SHORTFALL_CAUSES.index("slot_end")],
                                            minlength=len(self.tables.sources)))

    def _add_candidates(self, slots: np.ndarray, step: StepSlots, candidates: Candidates,
                        pairs_taken: dict[int, list[np.ndarray]], in_batch: np.ndarray | None = None) -> None:
        """Candidates for ``slots``; a top-up round (``in_batch``: the identities already in the
        batch) draws identity-dataset candidates among the identities not yet in the batch."""
        slots = np.asarray(slots, dtype=np.int64)
        for index in np.unique(step.source[slots]):
            source = self.tables.sources[index]
            mine = slots[step.source[slots] == index]
            if source.kind == "identity" and in_batch is not None:
                chunks = self.identities.free_candidates(source, len(mine), in_batch)
            elif source.kind == "identity":
                chunks = self.identities.candidates(source, len(mine))
            else:
                rows = self.queue.candidates(source, source.candidates * len(mine))
                pairs_taken.setdefault(source.index, []).append(rows)
                # Every slot of the dataset sees the whole list in queue order: the greedy pass
                # then hands out a prefix of the queue (rows taken by an earlier slot are
                # blocked by identity), so no row of the next epoch is used while one of the
                # current epoch is left over.
                chunks = [rows] * len(mine)
            for s, rows in zip(mine, chunks):
                candidates.slot.append(np.full(len(rows), s, dtype=np.int64))
                candidates.rows.append(rows)


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
    dataset = np.empty(total, dtype=np.int32)
    query = np.empty(total, dtype=np.int64)
    positive = np.empty(total, dtype=np.int64)
    role = np.empty(total, dtype=np.int8)
    for step in tqdm(range(settings.steps), desc="scheduling", unit="step", disable=not show_progress):
        s, q, p, r = scheduler.step()
        rows = slice(step * batch, (step + 1) * batch)
        slot[rows], query[rows], positive[rows], role[rows] = s, q, p, r
    dataset[:] = scheduler.tables.row_dataset[query]
    offsets = np.array([src.offset for src in scheduler.tables.sources], dtype=np.int64)
    local_query = query - offsets[dataset]
    local_positive = positive - offsets[dataset]
    schedule = Schedule(settings=settings, dataset_names=[ds.name for ds in datasets],
                        dataset_ids=[np.asarray(ds.ids, dtype=object) for ds in datasets],
                        slot=slot, dataset=dataset, query_row=local_query,
                        positive_row=local_positive, role=role, stats=scheduler.stats(query))
    schedule.report = build_report(schedule, schedule.stats)
    return schedule
