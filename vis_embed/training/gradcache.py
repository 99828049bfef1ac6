"""GradCache: contrastive training on a global batch far larger than fits in memory.

One step (Gao et al., 2021, adapted to multi-rank training and DeepSpeed):

1. encode the local queries and candidates chunk by chunk **without grad**, remembering the
   RNG state before each chunk (LoRA dropout draws random numbers);
2. gather the embeddings of all ranks and compute the loss of the full global batch on
   detached leaves; ``backward`` gives d(loss)/d(embedding) for the local members (the
   "cache") and the temperature's gradient;
3. re-encode each chunk **with grad**, replaying its RNG state so the dropout masks -- hence
   the embeddings -- are exactly those of pass 1, and back-propagate ``<embedding, cached
   grad>`` through the backend (DDP ``no_sync`` / DeepSpeed accumulation boundary on all
   chunks but the last); the optimiser steps once afterwards.

The parameter gradient equals that of plain full-batch back-propagation (chain rule), while
activation memory is that of one chunk.  Members are sorted by length before chunking and
each chunk is padded only to its own longest member, so chunks waste little compute on pads.

Two savings keep GradCache close to a plain step when the batch is small:

- a step whose sides each fit in one chunk (at most ``chunk_size`` queries and at most
  ``chunk_size`` candidates) runs the plain path outright: replaying would cost a forward
  per member for nothing.  That forward holds both sides, up to ``2 * chunk_size``
  members, where chunked encoding would hold one chunk;
- the last chunk of pass 1 is encoded *with* grad and its graph is kept: its cached gradient
  is back-propagated through that graph (first, before the replays, so DDP and DeepSpeed see
  it as one more accumulation micro-step) and it is never replayed.  Memory stays that of one
  chunk (the no-grad chunks hold no activations), the RNG draws are those of the all-no-grad
  pass 1, and with one chunk per side a step costs three forwards instead of four.

``chunk_size == 0`` runs the plain path (one forward with grad over the local batch) -- the
reference GradCache is tested against.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from vis_embed.model.inputs.batching import chunk_order
from vis_embed.training.backends import TrainBackend
from vis_embed.distributed import all_gather_object, gather_with_local_grad, get_world_size

if TYPE_CHECKING:
    from vis_embed.training.recipe import GradCacheConfig

Batch = dict[str, Tensor]
LossFn = Callable[[Tensor, Tensor], Tensor]  # (global queries, global candidates) -> scalar loss


@dataclass
class StepResult:
    loss: float
    padded_fraction: list[float] = field(default_factory=list)  # per forward chunk
    replay_max_abs_diff: float | None = None                     # only with check_replay


class RandomState:
    """Snapshot of the torch RNGs a forward pass may draw from (CPU and the current GPU)."""

    def __init__(self) -> None:
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda)


def padded_fraction(batch: Batch) -> float:
    mask = batch.get("attention_mask")
    if mask is None or mask.numel() == 0:
        return 0.0
    return float((mask == 0).sum()) / mask.numel()


def _to_device(batch: Batch, device: torch.device | str | None) -> Batch:
    if device is None:
        return batch
    return {k: (v.to(device, non_blocking=True) if isinstance(v, Tensor) else v) for k, v in batch.items()}


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; multiplies the incoming gradient by ``factor`` (see backends.py)."""

    @staticmethod
    def forward(ctx: Any, tensor: Tensor, factor: float) -> Tensor:
        ctx.factor = factor
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad * ctx.factor, None


def runs_plain(queries: int, candidates: int, chunk_size: int) -> bool:
    """Whether a step of this rank's ``queries`` and ``candidates`` runs the plain path: no
    chunking asked for, or each side fits in one chunk (the forward then holds both sides)."""
    return chunk_size <= 0 or max(queries, candidates) <= chunk_size


def contrastive_step(backend: TrainBackend, collate: Callable[[list[Any]], Batch],
                     queries: Sequence[Any], candidates: Sequence[Any], loss_fn: LossFn, *,
                     gradcache: GradCacheConfig, query_lengths: Sequence[int] | None = None,
                     candidate_lengths: Sequence[int] | None = None,
                     device: torch.device | str | None = None, check_replay: bool = False) -> StepResult:
    """Forward + backward of one global batch (this rank's shard); does not step the optimiser.

    ``queries[i]`` / ``candidates[i]`` are this rank's prepared members (what ``collate``
    takes), in schedule order; ``loss_fn`` receives the *global* (gathered) embeddings.
    ``candidates`` may be longer than ``queries`` (extra candidates after the positives, the
    same count on every rank).  ``gradcache``: the recipe's ``gradcache:`` section, its
    ``chunk_size`` a number (``auto`` resolved by the memory plan: ``MemoryPlan.gradcache``).
    """
    if len(candidates) < len(queries):
        raise ValueError(f"{len(queries)} queries but {len(candidates)} candidates (need one per query)")
    chunk_size = gradcache.chunk_size
    if not isinstance(chunk_size, int):
        raise ValueError(f"gradcache.chunk_size {chunk_size!r} is not resolved (training/memory_plan.py)")
    if runs_plain(len(queries), len(candidates), chunk_size):
        return _plain_step(backend, collate, queries, candidates, loss_fn, device)
    return _gradcache_step(backend, collate, queries, candidates, loss_fn, chunk_size,
                           query_lengths, candidate_lengths, device, check_replay, gradcache.max_padding)


def _plain_step(backend: TrainBackend, collate: Callable[[list[Any]], Batch], queries: Sequence[Any],
                candidates: Sequence[Any], loss_fn: LossFn, device: Any) -> StepResult:
    # One forward for both sides: DDP expects one forward per backward.
    batch = _to_device(collate(list(queries) + list(candidates)), device)
    with backend.accumulate(is_last=True):
        embeddings = backend.forward(batch)
        # The global loss is summed by every rank; the reducers average, so scale by world
        # size (only the model's path -- the temperature's gradient is already complete).
        embeddings = _ScaleGrad.apply(embeddings, float(get_world_size()))
        local_queries, local_candidates = embeddings[:len(queries)], embeddings[len(queries):]
        loss = loss_fn(gather_with_local_grad(local_queries), gather_with_local_grad(local_candidates))
        backend.backward(loss)
    return StepResult(loss=float(loss.detach()), padded_fraction=[padded_fraction(batch)])


def _equal_chunk_counts(plans: list[list[list[int]]]) -> list[list[list[int]]]:
    """Each side's chunks (:func:`chunk_order`), the largest split in two until this rank has as
    many per side as the rank with the most.  Every forward and backward is a collective under
    DeepSpeed (ZeRO-2 reduces each backward's gradients, ZeRO-3 gathers the weights of each
    forward), so all ranks must run the same number; ``max_padding`` closes chunks early by
    each rank's own lengths (ranks once ran 4 and 10 chunks: gloo aborted, NCCL would hang)."""
    counts = all_gather_object([len(plan) for plan in plans])
    equal = []
    for side, plan in enumerate(plans):
        plan = [list(chunk) for chunk in plan]
        while len(plan) < max(count[side] for count in counts):
            largest = max(range(len(plan)), key=lambda i: len(plan[i]))  # > 1 member: counts <= members
            chunk = plan[largest]
            plan[largest:largest + 1] = [chunk[:(len(chunk) + 1) // 2], chunk[(len(chunk) + 1) // 2:]]
        equal.append(plan)
    return equal


def _gradcache_step(backend: TrainBackend, collate: Callable[[list[Any]], Batch], queries: Sequence[Any],
                    candidates: Sequence[Any], loss_fn: LossFn, chunk_size: int,
                    query_lengths: Sequence[int] | None, candidate_lengths: Sequence[int] | None,
                    device: Any, check_replay: bool, max_padding: float) -> StepResult:
    sides = [list(queries), list(candidates)]
    lengths = [query_lengths or [0] * len(queries), candidate_lengths or [0] * len(candidates)]
    # (side, member indices, collated batch) for every chunk, in encoding order
    plans = _equal_chunk_counts([chunk_order(lengths[side], chunk_size, max_padding) for side in (0, 1)])
    chunks: list[tuple[int, list[int], Batch]] = []
    for side, members in enumerate(sides):
        for indices in plans[side]:
            chunks.append((side, indices, collate([members[i] for i in indices])))
    *replayed, (kept_side, kept_indices, kept_batch) = chunks

    # Pass 1: no-grad embeddings + RNG snapshots of the replayed chunks; the kept chunk with grad.
    states: list[RandomState] = []
    no_grad_embeddings: list[Tensor] = []
    with torch.no_grad():
        for _side, _indices, batch in replayed:
            states.append(RandomState())
            no_grad_embeddings.append(backend.forward(_to_device(batch, device)).float())
    # not the last accumulation micro-step: the replays follow (DDP no_sync covers forward and backward)
    with backend.accumulate(is_last=False):
        kept_embeddings = backend.forward(_to_device(kept_batch, device))
        state_after_pass1 = RandomState()

        # Loss on the full global batch, gradient w.r.t. the (local) embeddings.
        dim = kept_embeddings.shape[1]
        local = [torch.empty(len(sides[s]), dim, dtype=torch.float32, device=kept_embeddings.device) for s in (0, 1)]
        for (side, indices, _batch), embeddings in zip(replayed, no_grad_embeddings):
            local[side][indices] = embeddings
        local[kept_side][kept_indices] = kept_embeddings.detach().float()
        leaves = [t.detach().requires_grad_(True) for t in local]
        loss = loss_fn(gather_with_local_grad(leaves[0]), gather_with_local_grad(leaves[1]))
        loss.backward()  # fills the temperature's .grad too (identical on every rank, not reduced)
        if not math.isfinite(float(loss.detach())):
            # Caller's guard handles it; do not waste a second pass on a NaN batch.
            return StepResult(loss=float(loss.detach()))
        cached = [leaf.grad * get_world_size() for leaf in leaves]  # see backends.py: reducers average
        backend.backward((kept_embeddings.float() * cached[kept_side][kept_indices]).sum())
    del kept_embeddings  # frees the kept chunk's graph before the replays

    # Pass 2: replay each other chunk with grad and back-propagate its cached gradient.
    max_diff = 0.0
    fractions = [padded_fraction(kept_batch)]
    last = len(replayed) - 1  # the micro-step whose backward reduces the gradients (DDP, DeepSpeed)
    for position, ((side, indices, batch), state) in enumerate(zip(replayed, states)):
        state.restore()
        device_batch = _to_device(batch, device)
        fractions.append(padded_fraction(batch))
        with backend.accumulate(is_last=position == last):
            embeddings = backend.forward(device_batch)
            if check_replay:
                difference = embeddings.detach().float() - no_grad_embeddings[position]
                max_diff = max(max_diff, float(difference.abs().max()))
            surrogate = (embeddings.float() * cached[side][indices]).sum()
            backend.backward(surrogate)
    state_after_pass1.restore()
    return StepResult(loss=float(loss.detach()), padded_fraction=fractions,
                      replay_max_abs_diff=max_diff if check_replay else None)
