"""Anchor candidates of identity datasets: systematic PPS sampling of identities (exactly
proportional to their number of instances, capped at one draw per slot) in a periodically
reshuffled order, and the top-up draws among identities not yet in the batch.

:class:`IdentitySampler` is given what it draws with (the schedule's random generator and the
instance list); each dataset's sampling state lives in its :class:`SourceState`.
"""

from __future__ import annotations

import numpy as np

from vis_embed.sampling.draws import capped_inclusion
from vis_embed.sampling.record_tables import SourceState


class IdentitySampler:
    def __init__(self, rng: np.random.Generator, instance_rows: np.ndarray) -> None:
        self.rng = rng
        self.instance_rows = instance_rows  # global instance list: rows grouped by identity

    def start(self, source: SourceState) -> None:
        """Set up ``source``'s inclusion expectations and its first identity order."""
        source.inclusion = self._inclusion(source, 1)
        source.capped_identities = int((source.inclusion >= 1.0 - 1e-12).sum()) \
            if source.candidates < len(source.identity_count) else 0
        source.shuffle_every = max(1, len(source.identity_count) // max(1, source.candidates))
        self._shuffle_identity_order(source)

    @staticmethod
    def _inclusion(source: SourceState, slots: int) -> np.ndarray:
        """Inclusion expectations for ``slots`` slots' worth of candidates drawn at once.

        Drawing the candidates of all of a dataset's slots of one step in one systematic
        sample keeps them distinct (no collisions to repair) whenever it is possible.
        """
        cache = source.__dict__.setdefault("_inclusion_cache", {})
        if slots not in cache:
            total = min(slots * source.candidates, len(source.identity_count))
            cache[slots] = capped_inclusion(source.identity_count.astype(np.float64), total, cap=1.0)
        return cache[slots]

    def _shuffle_identity_order(self, source: SourceState) -> None:
        # A fixed order makes neighbouring identities never share a slot; reshuffling once the
        # dataset has been swept (~n_identities / candidates slots) keeps the cost O(M) per slot.
        source.order = self.rng.permutation(len(source.identity_count))
        source.cumulative = {}
        source.draws_since_shuffle = 0

    # ---- candidates

    def candidates(self, source: SourceState, slots: int) -> list[np.ndarray]:
        """Candidate anchor rows for ``slots`` slots of ``source`` (random priority order)."""
        if source.draws_since_shuffle >= source.shuffle_every:
            self._shuffle_identity_order(source)
        source.draws_since_shuffle += slots
        if slots not in source.cumulative:
            source.cumulative[slots] = np.cumsum(self._inclusion(source, slots)[source.order])
        cumulative = source.cumulative[slots]
        total = int(round(cumulative[-1]))
        randoms = self.rng.random(2 * total + 1)  # one call: start, priorities, instance picks
        picked = np.searchsorted(cumulative, randoms[0] + np.arange(total), side="right")
        identity = source.order[np.minimum(picked, len(source.order) - 1)]
        identity = identity[np.argsort(randoms[1:total + 1])]  # random priority within the slot
        draws = (randoms[total + 1:] * source.identity_count[identity]).astype(np.int64)
        rows = self.instance_rows[source.identity_start[identity] + draws]
        size = -(-total // slots)
        return [rows[i * size:(i + 1) * size] for i in range(slots)]

    def free_candidates(self, source: SourceState, slots: int, in_batch: np.ndarray) -> list[np.ndarray]:
        """Top-up candidates: identities not in the batch, ∝ instances, without replacement.

        Once hard negatives and other slots hold most of a dataset's identities, drawing from
        all of them again would mostly collide; these always fill a slot when enough are free.
        """
        free = np.flatnonzero(~np.isin(source.identity_codes, in_batch))
        if not len(free):
            return [np.zeros(0, dtype=np.int64)] * slots
        weights = source.identity_count[free].astype(np.float64)
        count = min(len(free), slots * source.candidates)
        identity = self.rng.choice(free, size=count, replace=False, p=weights / weights.sum())
        draws = (self.rng.random(count) * source.identity_count[identity]).astype(np.int64)
        rows = self.instance_rows[source.identity_start[identity] + draws]
        return [rows] * slots  # like pairs: each short slot takes the next free ones in order
