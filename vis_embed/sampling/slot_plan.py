"""Slots -> datasets: each dataset's expected slots per batch, and one step's draw of them.

Dataset ``d`` has share ``p_d ∝ weight_d × rows_d ** size_exponent`` and expects ``e_d = K p_d``
slots per batch (several slots of one batch when its share needs them; at most the ``usable
identities // M`` slots it can fill with distinct identities).  A step realises them by
systematic sampling over a freshly shuffled dataset order: ``d`` gets ``floor(e_d)`` or
``ceil(e_d)`` slots and exactly ``e_d`` in expectation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vis_embed.errors import ConfigError
from vis_embed.sampling.draws import dataset_shares, slot_expectations, systematic_sample
from vis_embed.sampling.record_tables import RecordTables
from vis_embed.sampling.settings import ScheduleSettings


@dataclass(frozen=True)
class SlotPlan:
    share: np.ndarray        # per dataset: its proportional share p_d
    expectation: np.ndarray  # per dataset: expected slots per batch e_d (capacity-capped)
    cap: int                 # most slots one dataset takes in a batch

    def draw(self, num_slots: int, rng: np.random.Generator) -> np.ndarray:
        """The dataset of each of one batch's ``num_slots`` slots, in random slot order."""
        order = rng.permutation(len(self.expectation))
        picked = systematic_sample(self.expectation[order], num_slots, rng)
        sources = order[picked]
        return sources[rng.permutation(len(sources))]


def plan_slots(tables: RecordTables, settings: ScheduleSettings) -> SlotPlan:
    """Expected slots per batch ``e_d = K p_d``: a dataset takes several slots of one batch when
    its share needs them, up to the ``usable identities // M`` slots it can fill with distinct
    identities (the capacity; the rest of its share goes to the others, reported)."""
    sources = tables.sources
    shares = dataset_shares(np.array([0.0 if s.skipped else s.weight for s in sources]),
                            np.array([s.num_rows for s in sources]), settings.size_exponent)
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
    expectation = slot_expectations(shares, slots, capacity)
    return SlotPlan(share=shares / shares.sum(), expectation=expectation,
                    cap=int(math.ceil(float(expectation.max()) - 1e-9)))
