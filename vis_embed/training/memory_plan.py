"""``gradcache.chunk_size: auto`` and ``model_options.gradient_checkpointing: auto``.

Gradient checkpointing recomputes every block's forward in the backward pass (about a third
more compute per chunk); GradCache's chunks only bound memory.  Both are wasted where the
memory is there, so ``auto`` decides from a measurement instead of a guess:

1. A probe: the longest members of the run's first step (``PROBE_MEMBERS`` of them), one
   forward with graph and its backward, without checkpointing; the peak of CUDA memory above
   what was allocated before is the cost of those members.  Per member = that / members.
2. The budget: the card's free memory (``torch.cuda.mem_get_info``) plus what torch's caching
   allocator holds unused, times ``HEADROOM`` (fragmentation; later steps' members may be
   longer than the first step's), less an allowance for the optimiser (``OPTIMISER_COPIES``
   x the trainable parameters' bytes: their gradients and AdamW's two moments, created at the
   first step).
3. The choice, checkpointing only when needed: the local batch's two sides in one forward
   (GradCache's plain path, no replay at all) if they fit; else the largest chunk that fits,
   as long as it holds at least ``MIN_CHUNK`` members; else checkpointing on (probed again
   with it) and the largest chunk that fits then.  Nothing fits: a ConfigError with the figures.

A setting given as a number or a boolean is kept; only ``auto`` is decided.  Off CUDA there
is no allocator to measure: ``auto`` keeps today's defaults there (chunk = the local batch,
i.e. one plain forward as ``chunk_size: 0``; checkpointing off).  Ranks agree on the most
careful plan (smallest chunk; checkpointing if any rank needs it).  The plan is logged and
written to ``OUTPUT_DIR/memory_plan.json``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from vis_embed.errors import ConfigError
from vis_embed.training.gradcache import runs_plain

if TYPE_CHECKING:
    from vis_embed.model.network.embedding_model import EmbeddingModel
    from vis_embed.training.recipe import GradCacheConfig

log = logging.getLogger(__name__)

AUTO = "auto"
PROBE_MEMBERS = 4  # members in the probe chunk (the longest of the first step)
HEADROOM = 0.8  # share of the free memory a plan may fill
MIN_CHUNK = 8  # below this many members per chunk, checkpointing is preferred to tiny chunks
OPTIMISER_COPIES = 3  # gradients + AdamW's two moments, per trainable parameter
PLAN_FILE = "memory_plan.json"


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    chunk_size: int  # as GradCacheConfig.chunk_size takes it (0: off)
    gradient_checkpointing: bool
    reason: str
    measured: dict[str, Any] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def gradcache(self, config: GradCacheConfig) -> GradCacheConfig:
        """The recipe's ``gradcache:`` section with this plan's chunk size (``auto`` resolved)."""
        return config.model_copy(update={"chunk_size": self.chunk_size})


def needs_plan(chunk_size: int | str, gradient_checkpointing: bool | str) -> bool:
    return chunk_size == AUTO or gradient_checkpointing == AUTO


def plan_memory(model: EmbeddingModel, collate: Callable[[list[Any]], dict[str, torch.Tensor]],
                first_members: Callable[[], Sequence[Any]], *, chunk_size: int | str,
                gradient_checkpointing: bool | str, local_batch_size: int, device: torch.device) -> MemoryPlan:
    """Decide the ``auto`` settings (see the module docstring); turns checkpointing on in
    ``model`` when ``auto`` decides for it.  ``first_members()``: prepared members (with ``.length``)
    of the run's first step, asked for only when a probe runs."""
    if not needs_plan(chunk_size, gradient_checkpointing):
        return MemoryPlan(int(chunk_size), bool(gradient_checkpointing), "given in the recipe")
    if device.type != "cuda":
        chunk = local_batch_size if chunk_size == AUTO else int(chunk_size)
        return MemoryPlan(chunk, gradient_checkpointing is True,
                          f"{device.type}: no memory probe; auto keeps the defaults "
                          "(the local batch in one forward, checkpointing off)")
    members = sorted(first_members(), key=lambda member: member.length, reverse=True)[:PROBE_MEMBERS]
    budget = _budget(model, device)
    measured: dict[str, Any] = {"budget_bytes": budget, "probe_members": len(members),
                                "probe_tokens": [int(member.length) for member in members]}
    if gradient_checkpointing is not True:
        measured["bytes_per_member"] = _probe(model, collate, members, device)
        plan = _choose(chunk_size, local_batch_size, budget, measured["bytes_per_member"],
                       allow_smaller=gradient_checkpointing is False)
        if plan is not None:
            return MemoryPlan(plan[0], False, plan[1], measured)
        if gradient_checkpointing is False:
            raise _does_not_fit(chunk_size, measured)
    if gradient_checkpointing == AUTO:  # a given true is on already (model_setup.build_training_model)
        model.enable_gradient_checkpointing()
    measured["bytes_per_member_checkpointed"] = _probe(model, collate, members, device)
    plan = _choose(chunk_size, local_batch_size, budget, measured["bytes_per_member_checkpointed"],
                   allow_smaller=True)
    if plan is None:
        raise _does_not_fit(chunk_size, measured)
    return MemoryPlan(plan[0], True, plan[1] + " with gradient checkpointing", measured)


def _choose(chunk_size: int | str, local: int, budget: float, per_member: float,
            allow_smaller: bool) -> tuple[int, str] | None:
    """(chunk_size, why) that fits ``budget``, or None.  ``allow_smaller``: a chunk below
    MIN_CHUNK is acceptable (checkpointing is already on, or was ruled out)."""
    fits = max(0, math.floor(budget / per_member)) if per_member > 0 else 2 * local
    if chunk_size != AUTO:  # a given chunk: does it fit as it is?
        chunk = int(chunk_size)
        held = 2 * local if chunk <= 0 or chunk >= local else chunk  # GradCache's plain path holds both sides
        return (chunk, f"chunk_size {chunk} holds {held} members; {fits} fit") if held <= fits else None
    if fits >= 2 * local:
        return local, f"the local batch's {2 * local} members fit one forward ({fits} would)"
    chunk = min(fits, local - 1)  # a chunk of the whole side would run the plain path (both sides)
    if chunk >= MIN_CHUNK or (allow_smaller and chunk >= 1):
        return chunk, f"{fits} members fit one forward"
    return None


def _budget(model: EmbeddingModel, device: torch.device) -> float:
    free, _total = torch.cuda.mem_get_info(device)
    cached_unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return (free + cached_unused) * HEADROOM - OPTIMISER_COPIES * trainable


def _probe(model: EmbeddingModel, collate: Callable[[list[Any]], dict[str, torch.Tensor]], members: Sequence[Any],
           device: torch.device) -> float:
    """Peak CUDA bytes per member of one forward with graph and its backward."""
    batch = {key: value.to(device) for key, value in collate(list(members)).items()}
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    model(**batch).float().sum().backward()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    model.zero_grad(set_to_none=True)
    del batch
    torch.cuda.empty_cache()
    return peak / max(1, len(members))


def _does_not_fit(chunk_size: int | str, measured: dict[str, Any]) -> ConfigError:
    return ConfigError(f"gradcache.chunk_size {chunk_size!r}: not even one member fits this card's memory "
                       f"(measured: {measured}); lower model_options.max_pixels or max_length, or use more GPUs "
                       f"with DeepSpeed ZeRO")


def agree(plans: Sequence[MemoryPlan]) -> MemoryPlan:
    """The plan every rank runs: the smallest chunk, checkpointing if any rank needs it."""
    careful = min(plans, key=lambda plan: (plan.chunk_size if plan.chunk_size > 0 else math.inf,
                                           not plan.gradient_checkpointing))
    checkpointing = any(plan.gradient_checkpointing for plan in plans)
    return dataclasses.replace(careful, gradient_checkpointing=checkpointing)


def plan_training(model: EmbeddingModel, collate: Callable[[list[Any]], dict[str, torch.Tensor]],
                  first_members: Callable[[], Sequence[Any]], *, gradcache: GradCacheConfig,
                  gradient_checkpointing: bool | str, local_batch_size: int, device: torch.device) -> MemoryPlan:
    """:func:`plan_memory` on every rank for the recipe's ``gradcache:`` section, then
    :func:`agree`; logged on the main process."""
    chunk_size = gradcache.chunk_size
    from vis_embed.distributed import all_gather_object, is_distributed, is_main_process

    own = plan_memory(model, collate, first_members, chunk_size=chunk_size,
                      gradient_checkpointing=gradient_checkpointing, local_batch_size=local_batch_size,
                      device=device)
    plan = agree(all_gather_object(own)) if is_distributed() else own
    if plan.gradient_checkpointing and not own.gradient_checkpointing:
        model.enable_gradient_checkpointing()  # another rank needs it: every rank runs the same plan
    if not is_main_process():
        return plan
    if needs_plan(chunk_size, gradient_checkpointing):
        log.info("memory plan: gradcache.chunk_size %d, gradient checkpointing %s (%s)", plan.chunk_size,
                 "on" if plan.gradient_checkpointing else "off", plan.reason)
    chunk, local = plan.chunk_size, local_batch_size
    if chunk_size != AUTO and chunk > 0 and runs_plain(local, local, chunk) and 2 * local > chunk:
        # GradCache's shortcut (training/gradcache.py) holds both sides in one forward: say so,
        # since a chunk_size given is otherwise the most members in memory at once.
        log.info("gradcache: %d queries and %d candidates per rank fit one chunk of %d each, so each step "
                 "is one plain forward of %d members (a chunk_size below %d keeps GradCache's memory bound)",
                 local, local, chunk, 2 * local, local)
    return plan
