"""When the scheduler gives up an effort that rarely pays (one rule, two uses).

Filling a dataset's slots with whole hard-negative groups, and trying other candidate orders
(and more candidates) for a dataset's short slots, both cost time on every step; on data
where they seldom succeed (e.g. every group has k + 1 members and M is no multiple of it) they
only cost time -- at the paper's scale six times the whole schedule (docs/scheduling.md).
"""

from __future__ import annotations

import numpy as np

TRIAL = 20  # attempts before an effort that rarely succeeds stops being tried
MIN_SUCCESS_RATE = 0.1


def worth(tries: np.ndarray) -> np.ndarray:
    """Per row of ``(attempts, successes)``: still worth trying -- fewer than :data:`TRIAL`
    attempts, or at least :data:`MIN_SUCCESS_RATE` of them succeeded."""
    attempts, successes = tries[:, 0], tries[:, 1]
    return (attempts < TRIAL) | (successes >= MIN_SUCCESS_RATE * attempts)
