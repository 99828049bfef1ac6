"""The counted once-per-epoch bound of pairs datasets (sampling/epoch_bound.py): no row is an
anchor more than once more often than any other row of its dataset has been in batches.  The
scheduler lets a pairs row wait for room only while this bound holds (issue 38)."""

from __future__ import annotations

import numpy as np
import pytest

from vis_embed.sampling.epoch_bound import EpochBound


def _bound(steps: int = 10) -> EpochBound:
    # records 0-2: pairs dataset 0; records 3-4: an identity dataset (never bounded)
    return EpochBound(np.array([0, 0, 0, 1, 1]), np.array([3, 0]), steps)


def _rows(*rows: int) -> np.ndarray:
    return np.array(rows, dtype=np.int64)


def test_a_second_anchoring_breaks_the_bound_while_another_row_was_never_in_a_batch() -> None:
    bound = _bound()
    assert not bound.would_break(_rows(0), _rows(0)).any()
    bound.record(_rows(0), _rows(0))
    assert bound.would_break(_rows(0), _rows(0)).tolist() == [True, False]
    assert not bound.would_break(_rows(1), _rows(1)).any()
    # the same batch placing rows 1 and 2 lifts the fewest placements to 1
    assert not bound.would_break(_rows(0, 1, 2), _rows(0)).any()


def test_a_place_as_hard_negative_counts_as_being_in_a_batch() -> None:
    bound = _bound()
    bound.record(_rows(0, 1, 2), _rows(0))  # rows 1 and 2 as row 0's hard negatives
    assert not bound.would_break(_rows(0), _rows(0)).any()
    bound.record(_rows(0), _rows(0))
    assert bound.would_break(_rows(0), _rows(0)).any()


def test_rows_of_an_identity_dataset_are_never_bounded() -> None:
    bound = _bound()
    for _ in range(3):
        assert not bound.would_break(_rows(3), _rows(3)).any()
        bound.record(_rows(3), _rows(3))


@pytest.mark.parametrize("seed", range(5))
def test_would_break_equals_the_bound_recounted_from_all_batches(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows, steps = 7, 40
    bound = EpochBound(np.zeros(rows, dtype=np.int64), np.array([rows]), steps)
    anchors, placed = np.zeros(rows, dtype=np.int64), np.zeros(rows, dtype=np.int64)
    for _ in range(steps):
        batch = rng.choice(rows, size=int(rng.integers(1, rows + 1)), replace=False)
        anchored = batch[rng.random(len(batch)) < 0.5]
        after_anchors, after_placed = anchors.copy(), placed.copy()
        after_anchors[anchored] += 1
        after_placed[batch] += 1
        expected = after_anchors.max() > after_placed.min() + 1
        assert bool(bound.would_break(batch, anchored)[0]) == expected
        if not expected:  # the scheduler never records a batch that breaks the bound
            bound.record(batch, anchored)
            anchors, placed = after_anchors, after_placed
