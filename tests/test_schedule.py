"""The scheduler's invariants, checked exactly on every batch of seeded random configurations.

Each configuration is checked by an independent, slow, per-member reference checker
(``check_invariants``) written from the scheduler's guarantees (docs/scheduling.md), not from the
implementation.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from vis_embed.errors import ConfigError
from vis_embed.sampling.draws import capped_inclusion
from vis_embed.sampling.scheduler import plan_schedule
from vis_embed.sampling.settings import ScheduleSettings
from vis_embed.sampling.types import ROLE_ANCHOR, Schedule, SubDataset

MARGIN = 5  # hard-negative lists no longer than k + MARGIN are considered in full by the scheduler


# --------------------------------------------------------------------------- reference checker


def _identity_key(ds: SubDataset, row: int):
    label = None if ds.identities is None else ds.identities[row]
    if label is None:
        return ("row", ds.name, row)
    scope = ds.namespace if ds.namespace is not None else ("dataset", ds.name)
    return (scope, label.item() if isinstance(label, np.generic) else label)


def _hard_negative_lists(ds: SubDataset) -> list[list[int]]:
    offsets, rows = ds.hard_negative_csr()
    return [rows[offsets[i]:offsets[i + 1]].tolist() for i in range(ds.num_rows)]


def check_invariants(schedule: Schedule, datasets: list[SubDataset]) -> None:
    settings = schedule.settings
    b, m, k = settings.global_batch_size, settings.interleave_batch_size, settings.hard_negatives
    slots_per_batch = b // m
    keys = [[_identity_key(ds, r) for r in range(ds.num_rows)] for ds in datasets]
    instances = [Counter(ks) for ks in keys]
    negatives = [_hard_negative_lists(ds) for ds in datasets]
    # expected slots per batch of each dataset (checked against weight x size elsewhere)
    expected_slots = [entry["expected_slot_share"] * slots_per_batch for entry in schedule.report["datasets"]]
    assert len(schedule.slot) == settings.steps * b
    pairs_counts = {d: np.zeros(ds.num_rows, dtype=np.int64) for d, ds in enumerate(datasets)
                    if ds.kind == "pairs" and ds.identities is None}
    pairs_negative = {d: np.zeros_like(counts) for d, counts in pairs_counts.items()}
    for step in range(settings.steps):
        rows = range(step * b, (step + 1) * b)
        slot = schedule.slot[rows.start:rows.stop]
        assert (slot == np.repeat(np.arange(slots_per_batch), m)).all(), "B = slots x M, slot-major"
        batch_keys = []
        slot_datasets = []
        for s in range(slots_per_batch):
            members = list(range(rows.start + s * m, rows.start + (s + 1) * m))
            ds_of_slot = {int(schedule.dataset[i]) for i in members}
            assert len(ds_of_slot) == 1, "a slot's members come from one sub-dataset"
            d = ds_of_slot.pop()
            slot_datasets.append(d)
            ds = datasets[d]
            assert schedule.role[members[0]] == ROLE_ANCHOR, "a slot starts with an anchor"
            anchor = None
            group: list[int] = []
            groups = []
            for i in members:
                q, p = int(schedule.query_row[i]), int(schedule.positive_row[i])
                key = keys[d][q]
                batch_keys.append(key)
                if ds.kind == "identity" and instances[d][key] == 1:
                    assert schedule.role[i] != ROLE_ANCHOR, "single-instance identities are never anchors"
                    assert p == q, "a single-instance hard negative is its own positive"
                elif ds.kind == "identity":
                    assert p != q and keys[d][p] == key, "positive: another instance of the identity"
                else:
                    assert p == q, "a pairs member's positive is the row itself"
                if schedule.role[i] == ROLE_ANCHOR:
                    if anchor is not None:
                        groups.append((anchor, group))
                    anchor, group = q, []
                    if d in pairs_counts:
                        pairs_counts[d][q] += 1
                else:
                    assert q in negatives[d][anchor], "a hard negative is one designated for its anchor"
                    if d in pairs_negative:
                        pairs_negative[d][q] += 1
                    group.append(q)
            groups.append((anchor, group))
            for position, (anchor, group) in enumerate(groups):
                assert len(group) <= k
                last = position == len(groups) - 1
                # only the last group of a slot may be cut by the slot's end; any other group
                # leaves out a designated negative only if its identity is in the batch
                if len(group) < k and not last and len(negatives[d][anchor]) <= k + MARGIN:
                    step_keys = {keys[int(schedule.dataset[i])][int(schedule.query_row[i])] for i in rows}
                    for negative in set(negatives[d][anchor]) - set(group):
                        key = keys[d][negative]
                        assert key == keys[d][anchor] or key in step_keys, "a usable hard negative was left out"
        assert len(set(batch_keys)) == b, "each identity at most once per batch"
        counts = Counter(slot_datasets)
        for d, expected in enumerate(expected_slots):
            assert math.floor(expected + 1e-9) <= counts[d] <= math.ceil(expected - 1e-9), \
                "a dataset gets floor or ceil of its expected slots per batch"
        for d, anchors in pairs_counts.items():
            # each row is drawn once per epoch: as an anchor or, when drawn while placed as
            # another anchor's hard negative, as that member; so no row is anchored twice more
            # than another row has been in batches
            assert anchors.max() <= (anchors + pairs_negative[d]).min() + 1, \
                "pairs rows: without replacement per epoch"


# --------------------------------------------------------------------------- configurations


def _random_config(seed: int) -> tuple[list[SubDataset], ScheduleSettings]:
    rng = np.random.default_rng(seed)
    num_datasets = int(rng.integers(1, 5))
    m = int(rng.choice([2, 3, 4, 6, 8]))
    k = int(rng.integers(0, min(4, m - 1) + 1))
    slots = int(rng.integers(1, 2 * num_datasets + 2))  # often more slots than datasets
    cap = math.ceil(slots / num_datasets)
    datasets = []
    for index in range(num_datasets):
        kind = "identity" if rng.random() < 0.6 else "pairs"
        need = cap * m
        # "tiny": exactly M identities; only with one slot per dataset per batch (with several,
        # collisions between them may need more extra rounds than the scheduler allows)
        style = rng.choice(["tiny", "skewed", "plain"] if cap == 1 else ["skewed", "plain"])
        if kind == "identity":
            num_identities = need + (0 if style == "tiny" else int(rng.integers(1, 30)))
            if style == "skewed":  # one huge identity, many small ones
                counts = np.r_[int(rng.integers(50, 200)), rng.integers(2, 4, num_identities - 1)]
            else:
                counts = rng.integers(2, 6, num_identities)
            labels = np.repeat(np.arange(num_identities), counts)
            singles = int(rng.integers(0, 4))  # single-instance identities: never anchors
            labels = np.r_[labels, np.arange(num_identities, num_identities + singles)]
            labels = rng.permutation(labels)
            identities = [f"id{x}" for x in labels]
        else:
            n = need + (0 if style == "tiny" else int(rng.integers(0, 40)))
            identities = None
            labels = np.arange(n)
        n = len(labels)
        hard_negatives = None
        if k and rng.random() < 0.6:
            hard_negatives = [rng.choice(n, size=int(rng.integers(0, min(n, k + MARGIN) + 1)),
                                         replace=False).tolist() for _ in range(n)]
            hard_negatives = [[h for h in lst if h != row] for row, lst in enumerate(hard_negatives)]
        datasets.append(SubDataset(f"ds{index}", kind, [f"ds{index}-{i}" for i in range(n)], identities,
                                   hard_negatives, weight=float(rng.uniform(0.2, 3.0))))
    settings = ScheduleSettings(steps=int(rng.integers(5, 25)), global_batch_size=slots * m,
                                interleave_batch_size=m, hard_negatives=k, seed=seed)
    return datasets, settings


@pytest.mark.parametrize("seed", range(40))
def test_invariants_hold_on_every_batch_of_random_configurations(seed: int) -> None:
    datasets, settings = _random_config(seed)
    schedule = plan_schedule(datasets, settings)
    check_invariants(schedule, datasets)


def test_shared_namespace_makes_identities_collide_across_datasets() -> None:
    rng = np.random.default_rng(3)
    shared = [f"person{x}" for x in rng.permutation(np.repeat(np.arange(12), 3))]
    other = [f"person{x}" for x in rng.permutation(np.repeat(np.arange(6, 18), 2))]
    datasets = [SubDataset("a", "identity", [f"a{i}" for i in range(len(shared))], shared, namespace="people"),
                SubDataset("b", "identity", [f"b{i}" for i in range(len(other))], other, namespace="people")]
    settings = ScheduleSettings(steps=60, global_batch_size=12, interleave_batch_size=6, hard_negatives=0, seed=1)
    schedule = plan_schedule(datasets, settings)
    check_invariants(schedule, datasets)  # keys are (namespace, label): person7 of a == person7 of b
    # without the shared namespace the same labels are different identities and may co-occur
    scoped = [SubDataset(ds.name, ds.kind, ds.ids, ds.identities) for ds in datasets]
    loose = plan_schedule(scoped, settings)
    labels = [shared, other]
    both = 0
    for step in range(settings.steps):
        rows = slice(step * 12, (step + 1) * 12)
        seen = [labels[d][q] for d, q in zip(loose.dataset[rows], loose.query_row[rows])]
        both += len(seen) - len(set(seen))
    assert both > 0


def test_hard_negatives_are_members_with_their_own_positives() -> None:
    n = 60
    labels = [f"p{i // 3}" for i in range(n)]  # 20 identities x 3 instances
    # row i's hard negatives: one row of each of the next 5 identities
    hard_negatives = [[(i + 3 * j) % n for j in range(1, 6)] for i in range(n)]
    datasets = [SubDataset("ids", "identity", [f"r{i}" for i in range(n)], labels, hard_negatives),
                SubDataset("pairs", "pairs", [f"q{i}" for i in range(40)], None,
                           [[(i + j) % 40 for j in range(1, 6)] for i in range(40)])]
    settings = ScheduleSettings(steps=30, global_batch_size=24, interleave_batch_size=12, hard_negatives=5, seed=4)
    schedule = plan_schedule(datasets, settings)
    check_invariants(schedule, datasets)
    is_anchor = schedule.role == ROLE_ANCHOR
    assert (~is_anchor).sum() > 0
    group = np.cumsum(is_anchor) - 1
    per_anchor = np.bincount(group[~is_anchor], minlength=is_anchor.sum())
    assert per_anchor.max() == 5
    for d in (0, 1):  # both kinds bring hard negatives in as members
        assert ((schedule.dataset == d) & ~is_anchor).any()


def test_truncated_hard_negative_groups_are_reported() -> None:
    # pairs rows with 5 negatives each, M = 8 = 6 + 2: whole groups cannot fill a slot, so the
    # slot's second group is cut at the slot's end (the one fallback that is not the identity rule)
    n = 60
    hard_negatives = [[(i + 7 * j) % n for j in range(1, 6)] for i in range(n)]
    datasets = [SubDataset("pairs", "pairs", [f"r{i}" for i in range(n)], None, hard_negatives)]
    settings = ScheduleSettings(steps=10, global_batch_size=8, interleave_batch_size=8, hard_negatives=5, seed=0)
    schedule = plan_schedule(datasets, settings)
    check_invariants(schedule, datasets)
    is_anchor = schedule.role == ROLE_ANCHOR
    got = np.bincount((np.cumsum(is_anchor) - 1)[~is_anchor], minlength=int(is_anchor.sum()))
    shortfalls = schedule.report["datasets"][0]["hard_negatives"]["shortfalls"]
    assert sum(shortfalls.values()) == int((got < 5).sum()) >= 10  # every anchor has 5 usable
    assert shortfalls["slot_end"] >= 5
    assert schedule.report["fallbacks"]["hard_negative_groups_truncated"] == shortfalls["slot_end"]


def test_slots_are_filled_with_whole_groups_when_other_candidates_fit() -> None:
    # half the rows have 3 negatives (groups of 4), half none: M = 6 = 4 + 1 + 1 always packs,
    # so no group is ever cut at a slot's end
    n = 80
    labels = [f"p{i // 2}" for i in range(n)]
    hard_negatives = [[(i + 2 * j) % n for j in range(1, 4)] if i % 4 < 2 else [] for i in range(n)]
    datasets = [SubDataset("ids", "identity", [f"r{i}" for i in range(n)], labels, hard_negatives)]
    schedule = plan_schedule(datasets, ScheduleSettings(steps=40, global_batch_size=12, interleave_batch_size=6,
                                                        hard_negatives=3, seed=2))
    check_invariants(schedule, datasets)
    assert schedule.report["datasets"][0]["hard_negatives"]["shortfalls"]["slot_end"] == 0
    assert (schedule.role != ROLE_ANCHOR).sum() > 0


# --------------------------------------------------------------------------- frequencies


def test_identity_draws_are_proportional_to_instances_chi_square() -> None:
    rng = np.random.default_rng(11)
    counts = rng.integers(2, 15, 50)
    labels = rng.permutation(np.repeat(np.arange(50), counts))
    datasets = [SubDataset("ids", "identity", [f"r{i}" for i in range(len(labels))], labels)]
    settings = ScheduleSettings(steps=600, global_batch_size=16, interleave_batch_size=8, hard_negatives=0, seed=5)
    schedule = plan_schedule(datasets, settings)
    drawn = np.bincount(labels[schedule.query_row[schedule.role == ROLE_ANCHOR]], minlength=50)
    expected = counts / counts.sum() * drawn.sum()
    assert stats.chisquare(drawn, expected).pvalue > 1e-3
    # a uniform-over-identities sampler would be rejected by the same test on this data
    assert stats.chisquare(drawn, np.full(50, drawn.sum() / 50)).pvalue < 1e-6
    report = schedule.report["datasets"][0]["draw_frequencies"]
    assert report["anchor_draws"] == drawn.sum() and report["capped_identities"] == 0


def test_positive_is_uniform_among_other_instances() -> None:
    labels = np.array([0] * 4 + list(np.repeat(np.arange(1, 30), 2)))
    datasets = [SubDataset("ids", "identity", [f"r{i}" for i in range(len(labels))], labels)]
    settings = ScheduleSettings(steps=1500, global_batch_size=4, interleave_batch_size=4, hard_negatives=0, seed=2)
    schedule = plan_schedule(datasets, settings)
    pick = schedule.query_row == 0
    positives = np.bincount(schedule.positive_row[pick], minlength=4)
    assert positives[0] == 0
    assert stats.chisquare(positives[1:]).pvalue > 1e-3


def test_datasets_are_chosen_proportionally_to_weight_times_size() -> None:
    sizes, weights = [20, 40, 80, 30], [1.0, 1.0, 0.5, 3.0]
    datasets = [SubDataset(f"d{i}", "pairs", [f"d{i}-{j}" for j in range(n)], weight=w)
                for i, (n, w) in enumerate(zip(sizes, weights))]
    settings = ScheduleSettings(steps=2000, global_batch_size=2, interleave_batch_size=2, hard_negatives=0, seed=9)
    schedule = plan_schedule(datasets, settings)
    chosen = np.bincount(schedule.dataset[::2], minlength=4)
    share = np.array(sizes) * np.array(weights)
    assert stats.chisquare(chosen, share / share.sum() * chosen.sum()).pvalue > 1e-3
    # size_exponent=0: weight only
    by_weight = plan_schedule(datasets, ScheduleSettings(steps=2000, global_batch_size=2, interleave_batch_size=2,
                                                         hard_negatives=0, seed=9, size_exponent=0.0))
    chosen = np.bincount(by_weight.dataset[::2], minlength=4)
    assert stats.chisquare(chosen, np.array(weights) / sum(weights) * chosen.sum()).pvalue > 1e-3


def test_heavy_identity_is_capped_at_one_per_slot_and_reported() -> None:
    labels = np.r_[np.zeros(500, dtype=np.int64), np.repeat(np.arange(1, 40), 2)]
    datasets = [SubDataset("skew", "identity", [f"r{i}" for i in range(len(labels))], labels)]
    settings = ScheduleSettings(steps=50, global_batch_size=8, interleave_batch_size=8, hard_negatives=0, seed=0)
    schedule = plan_schedule(datasets, settings)
    check_invariants(schedule, datasets)
    report = schedule.report["datasets"][0]["draw_frequencies"]
    assert report["capped_identities"] == 1
    # the huge identity is in every batch, exactly once
    assert all((labels[schedule.query_row[s * 8:(s + 1) * 8]] == 0).sum() == 1 for s in range(50))


def test_single_instance_identities_are_excluded_and_counted() -> None:
    labels = list(np.repeat(np.arange(10), 2)) + [100, 101, 102]
    datasets = [SubDataset("ids", "identity", [f"r{i}" for i in range(len(labels))], labels)]
    schedule = plan_schedule(datasets, ScheduleSettings(steps=40, global_batch_size=4, interleave_batch_size=4,
                                                        hard_negatives=0))
    assert schedule.report["datasets"][0]["excluded_identities"] == 3
    assert not np.isin(schedule.query_row, [20, 21, 22]).any()
    assert not np.isin(schedule.positive_row, [20, 21, 22]).any()


def test_pairs_rows_are_drawn_without_replacement_within_an_epoch() -> None:
    datasets = [SubDataset("p", "pairs", [f"p{i}" for i in range(37)])]
    schedule = plan_schedule(datasets, ScheduleSettings(steps=30, global_batch_size=5, interleave_batch_size=5,
                                                        hard_negatives=0, seed=3))
    anchors = schedule.query_row[schedule.role == ROLE_ANCHOR]
    for epoch in range(len(anchors) // 37):
        assert sorted(anchors[epoch * 37:(epoch + 1) * 37].tolist()) == list(range(37))


def test_capped_inclusion_sums_and_caps() -> None:
    expected = capped_inclusion(np.array([100.0, 1, 1, 1, 1]), 3)
    assert expected.sum() == pytest.approx(3) and expected[0] == 1.0
    assert expected[1:] == pytest.approx([0.5] * 4)


# --------------------------------------------------------------------------- determinism and errors


def test_same_seed_gives_identical_schedule_and_other_seed_differs() -> None:
    datasets, settings = _random_config(7)
    first, second = plan_schedule(datasets, settings), plan_schedule(datasets, settings)
    for name in ("slot", "dataset", "query_row", "positive_row", "role"):
        assert np.array_equal(getattr(first, name), getattr(second, name))
    other = plan_schedule(datasets, ScheduleSettings(**{**settings.to_json(), "seed": settings.seed + 1}))
    assert not np.array_equal(first.query_row, other.query_row)


def test_interleave_batch_larger_than_distinct_identities_is_an_error() -> None:
    small = SubDataset("small", "identity", [f"r{i}" for i in range(6)], ["a", "a", "b", "b", "c", "c"])
    big = SubDataset("big", "pairs", [f"q{i}" for i in range(50)])
    settings = ScheduleSettings(steps=3, global_batch_size=8, interleave_batch_size=4, hard_negatives=0)
    with pytest.raises(ConfigError, match="'small' has only 3 distinct usable identities"):
        plan_schedule([small, big], settings)
    skipping = ScheduleSettings(steps=3, global_batch_size=8, interleave_batch_size=4, hard_negatives=0,
                                small_datasets="skip")
    schedule = plan_schedule([small, big], skipping)
    assert (schedule.dataset == 1).all()
    assert schedule.report["fallbacks"]["skipped_datasets"] == ["small"]


def test_too_many_slots_for_a_dataset_is_an_error() -> None:
    only = SubDataset("only", "pairs", [f"q{i}" for i in range(10)])
    with pytest.raises(ConfigError, match="can fill at most 2 of the 3 slots per batch"):
        plan_schedule([only], ScheduleSettings(steps=2, global_batch_size=12, interleave_batch_size=4,
                                               hard_negatives=0))


@pytest.mark.parametrize("kwargs, message", [
    ({"global_batch_size": 10, "interleave_batch_size": 4}, "not a multiple"),
    ({"global_batch_size": 8, "interleave_batch_size": 4, "hard_negatives": 5}, "cannot fit"),
    ({"global_batch_size": 8, "interleave_batch_size": 4, "hard_negatives": -1},
     "field 'hard_negatives': .*greater than or equal to 0"),
])
def test_impossible_settings_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ScheduleSettings(steps=1, **kwargs)


def test_identity_dataset_without_labels_is_rejected() -> None:
    from vis_embed.errors import DataError

    with pytest.raises(DataError, match="needs an identity label"):
        SubDataset("x", "identity", ["a", "b"])
    datasets = [SubDataset("x", "identity", ["a", "b", "c"], ["p", None, "p"])]
    with pytest.raises(DataError, match="has no identity"):
        plan_schedule(datasets, ScheduleSettings(steps=1, global_batch_size=1, interleave_batch_size=1,
                                                 hard_negatives=0))


def test_report_counts_hard_negative_coverage() -> None:
    n = 30
    labels = [f"p{i // 2}" for i in range(n)]
    # half the rows have 3 designated negatives, one of which shares the anchor's identity
    hard_negatives = [[i ^ 1, (i + 2) % n, (i + 4) % n] if i % 2 == 0 else [] for i in range(n)]
    datasets = [SubDataset("ids", "identity", [f"r{i}" for i in range(n)], labels, hard_negatives)]
    schedule = plan_schedule(datasets, ScheduleSettings(steps=20, global_batch_size=6, interleave_batch_size=6,
                                                        hard_negatives=2, seed=1))
    check_invariants(schedule, datasets)
    entry = schedule.report["datasets"][0]["hard_negatives"]
    assert entry["designated_dropped"]["same_identity_as_anchor"] == 15
    is_anchor = schedule.role == ROLE_ANCHOR
    with_designated = int(np.isin(schedule.query_row[is_anchor], np.arange(0, n, 2)).sum())
    assert entry["anchors_with_designated"] == with_designated == entry["anchors_with_usable"]
    assert entry["anchors_with_k"] <= entry["anchors_with_usable"]


# --------------------------------------------------------------------------- building blocks


def _sequential_greedy(stream: dict, k: int, m: int, num_slots: int, strict: np.ndarray | None = None) -> np.ndarray:
    """The acceptance rule written as the obvious one-entry-at-a-time loop.

    In a ``strict`` slot an anchor is taken only if the slot has room for it and for the
    negatives it will get: min(k, its distinct negative identities not yet in the batch).
    """
    accepted = np.zeros(len(stream["row"]), dtype=bool)
    seen: set[int] = set()
    filled = [0] * num_slots
    taken_by_group: dict[int, int] = {}
    for i in range(len(stream["row"])):
        group, slot, identity = int(stream["group"][i]), int(stream["slot"][i]), int(stream["identity"][i])
        if identity in seen or filled[slot] >= m:
            continue
        if stream["is_anchor"][i] and strict is not None and strict[slot]:
            members = np.flatnonzero(stream["group"] == group)
            free = {int(stream["identity"][j]) for j in members[1:]} - seen - {identity}
            if filled[slot] + 1 + min(k, len(free)) > m:
                continue
        if not stream["is_anchor"][i]:
            anchor = int(stream["group_start"][group])
            if not accepted[anchor] or taken_by_group.get(group, 0) >= k:
                continue
            taken_by_group[group] = taken_by_group.get(group, 0) + 1
        accepted[i] = True
        seen.add(identity)
        filled[slot] += 1
    return accepted


@pytest.mark.parametrize("seed", range(30))
def test_vectorised_resolution_equals_the_sequential_greedy_pass(seed: int) -> None:
    from vis_embed.sampling.greedy import resolve

    rng = np.random.default_rng(seed)
    num_slots, m, k = int(rng.integers(1, 5)), int(rng.integers(2, 9)), int(rng.integers(0, 4))
    group_sizes = rng.integers(1, 6, int(rng.integers(num_slots, 6 * num_slots)))
    slots_of_groups = np.sort(rng.integers(0, num_slots, len(group_sizes)))
    group_start = np.cumsum(group_sizes) - group_sizes
    total = int(group_sizes.sum())
    is_anchor = np.zeros(total, dtype=bool)
    is_anchor[group_start] = True
    stream = {"row": np.arange(total), "is_anchor": is_anchor, "group_start": group_start,
              "group": np.repeat(np.arange(len(group_sizes)), group_sizes),
              "slot": np.repeat(slots_of_groups, group_sizes),
              "identity": rng.integers(0, max(2, total // 2), total)}  # many collisions
    k = ScheduleSettings(steps=1, global_batch_size=m, interleave_batch_size=m,
                         hard_negatives=k if k + 1 <= m else 0).hard_negatives
    expected = _sequential_greedy(stream, k, m, num_slots)
    assert np.array_equal(resolve(stream, num_slots, k, m), expected)
    strict = rng.random(num_slots) < 0.7
    expected = _sequential_greedy(stream, k, m, num_slots, strict)
    assert np.array_equal(resolve(stream, num_slots, k, m, strict), expected)


def test_systematic_sampling_draws_each_item_its_expected_number_of_times() -> None:
    from vis_embed.sampling.draws import systematic_sample

    rng = np.random.default_rng(0)
    expected = capped_inclusion(np.array([9.0, 5, 3, 1, 1, 1]), 3)
    counts = np.zeros(6)
    for _ in range(4000):
        picked = systematic_sample(expected[(order := rng.permutation(6))], 3, rng)
        drawn = np.bincount(order[picked], minlength=6)
        assert (drawn <= np.ceil(expected)).all() and (drawn >= np.floor(expected)).all()
        counts += drawn
    assert counts / 4000 == pytest.approx(expected, abs=0.03)
