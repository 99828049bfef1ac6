"""A scheduled step -> this rank's prepared items: the trainer's data side.

:class:`StepItems` turns one whole step of the schedule (every rank reads all B members: the
loss needs every label) into this rank's :class:`PreparedStep` -- its contiguous shard of
slots, each member's query item (``query_instruction``) and candidate item
(``candidate_instruction``), prepared in ``num_workers`` processes (a
:class:`~vis_embed.model.runtime.prepare_pool.PreparePool`) or in this one; plus the batch's loss
labels, designated hard-negative pairs and explicit negatives (extra_candidates.py).  A bad
item stops the run (training data was validated at load: one that still fails is a real error).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from vis_embed.errors import ConfigError
from vis_embed.model.runtime.item_feed import accepted
from vis_embed.model.runtime.prepare_pool import PreparePool, PrepareTask
from vis_embed.training.extra_candidates import column_order, extra_count, prepare_extras
from vis_embed.training.losses import designated_negatives
from vis_embed.training.losses.diagnostics import own_image_matrix

if TYPE_CHECKING:
    from vis_embed.data.train import TrainDataConfig, TrainDataset
    from vis_embed.model.network.embedding_model import EmbeddingModel
    from vis_embed.sampling.schedule_io import ScheduledBatch


@dataclass
class PreparedStep:
    step: int
    queries: list[Any]
    candidates: list[Any]
    query_lengths: list[int]
    candidate_lengths: list[int]
    labels: torch.Tensor  # (global batch,) int64 loss-label codes in slot order (the schedule's `label`)
    designated: torch.Tensor | None = None  # (global batch,)*2 designated hard-negative pairs
    candidate_order: torch.Tensor | None = None  # loss columns in the gathered candidates (explicit negatives)
    own_image: torch.Tensor | None = None  # (global batch,)*2: candidate j's positive is query i's record


class StepItems:
    """Prepares this rank's shard of each scheduled step for ``model``."""

    def __init__(self, model: EmbeddingModel, data: TrainDataConfig, shard: slice, world_size: int, *,
                 schedule_name: str, data_name: str) -> None:
        self.model = model
        self.data = data
        self.shard = shard
        self.world_size = world_size
        self.schedule_name, self.data_name = schedule_name, data_name  # named in errors
        self._pool: PreparePool | None = None  # start(num_workers > 0)

    def start(self, num_workers: int) -> None:
        """Prepare in ``num_workers`` processes from now on (0: in this process)."""
        if num_workers > 0 and self._pool is None:
            self._pool = PreparePool(self.model.preparer(), num_workers)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def prepare_step(self, batch: ScheduledBatch) -> PreparedStep:
        """This rank's shard of one scheduled step, prepared (images loaded, prompts built)."""
        members = batch.members()
        labels = torch.tensor(batch.label, dtype=torch.long)  # computed once, at data load
        shard = members[self.shard]
        queries: list[Any] = [None] * len(shard)
        candidates: list[Any] = [None] * len(shard)
        by_dataset: dict[str, list[int]] = {}
        for position, member in enumerate(shard):
            by_dataset.setdefault(member.dataset, []).append(position)
        for name, positions in by_dataset.items():
            dataset = self._dataset(name)
            query_items = [dataset.query_item(dataset.get(shard[p].query_id)) for p in positions]
            candidate_items = [dataset.positive_item(dataset.get(shard[p].positive_id)) for p in positions]
            prepared_q = self._prepare(query_items, instruction=dataset.query_instruction)
            prepared_c = self._prepare(candidate_items, instruction=dataset.candidate_instruction)
            for p, q, c in zip(positions, prepared_q, prepared_c):
                queries[p], candidates[p] = q, c
        designated = designated_negatives([m.role for m in members], [m.slot for m in members])
        # rows' explicit negatives: extra candidates after this rank's positives (extra_candidates.py)
        padded, order = column_order([extra_count(self._dataset(m.dataset), m.query_id) for m in members],
                                     self.world_size)
        if order is not None:
            candidates += prepare_extras(shard, self._dataset, self._prepare, padded, candidates[-1])
        own_image = own_image_matrix([(m.dataset, m.query_id) for m in members],
                                     [(m.dataset, m.positive_id) for m in members])
        return PreparedStep(batch.step, queries, candidates, [q.length for q in queries],
                            [c.length for c in candidates], labels, designated, order, own_image)

    def _prepare(self, items: list[Any], instruction: str | None = None) -> list[Any]:
        """``model.prepare`` in the recipe's ``num_workers`` processes (0: in this process)."""
        if self._pool is None:
            return self.model.prepare(items, instruction=instruction)
        results = self._pool.prepare(PrepareTask(index, item, instruction) for index, item in enumerate(items))
        # training has no skip mode: a bad item raises, by the encode path's own rule
        return [self.model.count_truncated(result) for index, result in enumerate(results)
                if accepted(index, result, "raise", {})]

    def _dataset(self, name: str) -> TrainDataset:
        try:
            return self.data.dataset(name)
        except KeyError:
            raise ConfigError(f"schedule {self.schedule_name} names dataset {name!r}, which is not in "
                              f"{self.data_name}") from None
