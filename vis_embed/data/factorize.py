"""Labels -> integer codes, the one implementation (identities, classes, groups)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def factorize(labels: Sequence[Any]) -> tuple[np.ndarray, list[Any]]:
    """``(codes, distinct)``: ``distinct[codes[i]] == labels[i]``, codes numbered in order of
    first appearance (not sorted), so code 0 is the first row's label and numbering -- hence
    anything seeded or ordered by code -- does not depend on how labels sort."""
    if len(labels) == 0:
        return np.zeros(0, dtype=np.int64), []
    distinct, first, inverse = np.unique(np.asarray(labels, dtype=object), return_index=True,
                                         return_inverse=True)
    order = np.argsort(first, kind="stable")   # distinct labels by first appearance
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)], [distinct[i] for i in order]
