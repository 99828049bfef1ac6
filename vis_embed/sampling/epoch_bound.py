"""The once-per-epoch bound of pairs datasets, counted: no row is an anchor more than once more
often than any other row of its dataset has been in batches (as anchor or hard negative).

The pairs queue (sampling/pairs_queue.py) keeps it by drawing each row once per epoch; a row
it lets wait for room (so that its group is not cut at a slot's end) may only wait while this
bound holds.  ``would_break`` tells, for a proposed batch, the datasets where it would not.
"""

from __future__ import annotations

import numpy as np


class EpochBound:
    def __init__(self, row_dataset: np.ndarray, pairs_rows: np.ndarray, steps: int) -> None:
        """``row_dataset``: dataset of each global record; ``pairs_rows``: per dataset, its number
        of rows if it is a pairs dataset, else 0 (never bounded)."""
        self.row_dataset = row_dataset
        self.bounded = pairs_rows > 0
        self.anchors = np.zeros(len(row_dataset), dtype=np.int64)
        self.placed = np.zeros(len(row_dataset), dtype=np.int64)
        # per dataset: how many of its rows have been placed c times (c <= steps: once per batch)
        self.rows_placed = np.zeros((len(pairs_rows), steps + 2), dtype=np.int64)
        self.rows_placed[:, 0] = pairs_rows
        self.fewest = np.zeros(len(pairs_rows), dtype=np.int64)        # min placements of a row
        self.most_anchored = np.zeros(len(pairs_rows), dtype=np.int64)  # max anchorings of a row

    def _after(self, placed: np.ndarray, anchors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(fewest placements, most anchorings) per dataset once ``placed`` rows (distinct: a row is
        in a batch once) are in a batch, ``anchors`` of them as anchors."""
        dataset = self.row_dataset[placed]
        at_fewest = self.placed[placed] == self.fewest[dataset]
        leaving = np.bincount(dataset[at_fewest], minlength=len(self.fewest))
        fewest = self.fewest + (self.bounded & (leaving == self.rows_placed[np.arange(len(self.fewest)), self.fewest]))
        most = self.most_anchored.copy()
        np.maximum.at(most, self.row_dataset[anchors], self.anchors[anchors] + 1)
        return fewest, most

    def would_break(self, placed: np.ndarray, anchors: np.ndarray) -> np.ndarray:
        """Per dataset: the batch would anchor a row more than once more often than another row of
        its dataset has been in batches."""
        fewest, most = self._after(placed, anchors)
        return self.bounded & (most > fewest + 1)

    def record(self, placed: np.ndarray, anchors: np.ndarray) -> None:
        """Count a batch's rows (``placed``: all its rows of pairs datasets; ``anchors``: its anchors)."""
        self.fewest, self.most_anchored = self._after(placed, anchors)
        dataset = self.row_dataset[placed]
        np.subtract.at(self.rows_placed, (dataset, self.placed[placed]), 1)
        self.placed[placed] += 1
        np.add.at(self.rows_placed, (dataset, self.placed[placed]), 1)
        self.anchors[anchors] += 1
