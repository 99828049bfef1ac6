"""One training-backend interface over single process, DDP and DeepSpeed.

Why a backend abstraction: GradCache calls backward once per chunk and steps the optimiser
once per global batch.  Each launcher wants that expressed differently -- plain autograd
(single process), ``no_sync()`` on all but the last chunk (DDP), or
``set_gradient_accumulation_boundary`` + ``engine.backward`` / ``engine.step`` (DeepSpeed,
whose ZeRO-2/3 optimisers own the gradients) -- so the trainer talks to :class:`TrainBackend`
and never to the launcher.

Gradient scale: every rank computes the loss of the *whole* global batch from gathered
embeddings in which only its local shard carries gradient, so rank r's parameter gradient is
the part of dL/dθ flowing through its own members; the true gradient is the *sum* over ranks.
DDP and DeepSpeed *average* gradients, so :mod:`vis_embed.training.gradcache` multiplies
what it back-propagates through the model by ``world_size``.  The temperature is not part of the wrapped model: its
gradient is complete (and identical) on every rank, so it is stepped locally, unreduced.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from vis_embed.distributed import get_world_size, is_main_process

if TYPE_CHECKING:
    from vis_embed.training.recipe import OptimizerConfig


def adamw(params: Any, optimizer: OptimizerConfig, *, lr: float | None = None,
          weight_decay: float | None = None, kind: type[torch.optim.Optimizer] = torch.optim.AdamW) -> Any:
    """The recipe's ``optimizer:`` section as an AdamW over ``params`` (``kind``: DeepSpeed's CPU
    Adam under offload); ``lr`` / ``weight_decay``: another value for these parameters (the
    temperature's own learning rate, no decay)."""
    return kind(params, lr=optimizer.lr if lr is None else lr,
                weight_decay=optimizer.weight_decay if weight_decay is None else weight_decay,
                betas=optimizer.betas, eps=optimizer.eps)


class TrainBackend:
    """How forward/backward/step reach the model under one launcher.

    Usage per global batch (``n`` chunks)::

        for i, chunk in enumerate(chunks):
            with backend.accumulate(is_last=i == n - 1):
                emb = backend.forward(chunk)
                backend.backward((emb * cached_grad).sum())
        grad_norm = backend.step()
    """

    kind = "base"
    module: nn.Module

    def __init__(self, module: nn.Module, world_size: int) -> None:
        self.module = module
        self.world_size = world_size

    @property
    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.module(**batch)

    @contextlib.contextmanager
    def accumulate(self, is_last: bool) -> Iterator[None]:
        yield

    def backward(self, loss: Tensor) -> None:
        raise NotImplementedError

    def step(self) -> float:
        raise NotImplementedError

    def lr(self) -> float:
        raise NotImplementedError

    def save(self, directory: Path) -> None:
        """Write optimiser/scheduler state (collective under DeepSpeed)."""
        raise NotImplementedError

    def load(self, directory: Path) -> None:
        raise NotImplementedError

    def trainable_state_dict(self, *, keep_dtype: bool = False) -> dict[str, Tensor]:
        """Full (un-partitioned) trainable weights on the main process, ``{}`` on the others
        (only the main process writes them); CPU copies, float32 unless ``keep_dtype`` (full
        fine-tuning: the whole model, whose upcast copy would double what rank 0 holds --
        ``FullAdaptation.save`` casts to each parameter's dtype anyway).  Collective under ZeRO-3."""
        if not is_main_process():
            return {}
        return {name: _cpu_copy(p, keep_dtype) for name, p in self.module.named_parameters() if p.requires_grad}


def _cpu_copy(tensor: Tensor, keep_dtype: bool) -> Tensor:
    """A CPU copy that owns its memory (``.cpu()`` of a CPU tensor would alias the parameter)."""
    tensor = tensor.detach()
    return (tensor if keep_dtype else tensor.float()).cpu().clone()


class TorchBackend(TrainBackend):
    """Single process or DDP with a torch AdamW, the LR schedule and grad-norm clipping.

    ``optimizer``: the recipe's ``optimizer:`` section (AdamW's settings, ``max_grad_norm``);
    ``lr_schedule``: step -> multiplier of ``lr`` (:func:`vis_embed.training.lr_schedule.lr_schedule_of`).
    """

    def __init__(self, module: nn.Module, *, optimizer: OptimizerConfig, lr_schedule: Callable[[int], float],
                 find_unused_parameters: bool = False) -> None:
        world_size = get_world_size()
        super().__init__(module, world_size)
        self.wrapped: nn.Module = module
        if world_size > 1:
            device_ids = [torch.cuda.current_device()] if torch.cuda.is_available() else None
            self.wrapped = nn.parallel.DistributedDataParallel(
                module, device_ids=device_ids, find_unused_parameters=find_unused_parameters)
            self.kind = "ddp"
        else:
            self.kind = "single"
        self.optimizer = adamw(self.trainable_parameters, optimizer)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_schedule)
        self.max_grad_norm = optimizer.max_grad_norm

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.wrapped(**batch)

    @contextlib.contextmanager
    def accumulate(self, is_last: bool) -> Iterator[None]:
        # DDP all-reduces in backward; skip it for all chunks but the last of the step.
        if self.kind == "ddp" and not is_last:
            with self.wrapped.no_sync():
                yield
        else:
            yield

    def backward(self, loss: Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        params = self.trainable_parameters
        if self.max_grad_norm and self.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        else:
            norm = torch.nn.utils.clip_grad_norm_(params, float("inf"))
        norm_value = float(norm)
        if math.isfinite(norm_value):
            self.optimizer.step()
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm_value

    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def save(self, directory: Path) -> None:
        if is_main_process():
            torch.save({"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()},
                       directory / "optimizer.pt")

    def load(self, directory: Path) -> None:
        state = torch.load(directory / "optimizer.pt", map_location="cpu", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


class DeepSpeedBackend(TrainBackend):
    """DeepSpeed engine (ZeRO-2/3): one ``engine.step()`` per global batch.

    Chunks of a step are back-propagated with the accumulation boundary set to False except
    the last, so ZeRO keeps accumulating into its partitioned gradients and reduces/steps once.
    """

    kind = "deepspeed"

    def __init__(self, module: nn.Module, *, ds_config: dict[str, Any], optimizer: OptimizerConfig,
                 lr_schedule: Callable[[int], float]) -> None:
        import deepspeed  # an optional extra: imported only when a recipe asks for DeepSpeed

        super().__init__(module, get_world_size())
        params = self.trainable_parameters
        offload = (ds_config.get("zero_optimization", {}).get("offload_optimizer", {}) or {}).get("device")
        if offload in ("cpu", "nvme"):
            from deepspeed.ops.adam import DeepSpeedCPUAdam

            torch_optimizer = adamw(params, optimizer, kind=DeepSpeedCPUAdam)
        else:
            torch_optimizer = adamw(params, optimizer)
        scheduler = torch.optim.lr_scheduler.LambdaLR(torch_optimizer, lr_schedule)
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=module, optimizer=torch_optimizer, lr_scheduler=scheduler, config=ds_config,
            model_parameters=params)
        self.zero_stage = int(ds_config.get("zero_optimization", {}).get("stage", 0))

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.engine(**batch)

    @contextlib.contextmanager
    def accumulate(self, is_last: bool) -> Iterator[None]:
        self.engine.set_gradient_accumulation_boundary(is_last)
        yield

    def backward(self, loss: Tensor) -> None:
        self.engine.backward(loss)

    def step(self) -> float:
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float("nan") if norm is None else float(norm)

    def lr(self) -> float:
        return float(self.engine.get_lr()[0])

    def save(self, directory: Path) -> None:
        # Collective: every rank writes its optimiser partition.  Frozen base weights are
        # excluded -- they are the pretrained checkpoint and would cost GBs per save.
        self.engine.save_checkpoint(str(directory), tag="deepspeed", exclude_frozen_parameters=True)

    def load(self, directory: Path) -> None:
        # save() leaves the frozen weights out, so a model with any (LoRA, head) must load
        # non-strictly -- its saved module state lacks them by design; when every weight trains
        # (full) the saved state is complete and any missing or unexpected key is an error (a
        # checkpoint of another model or adaptation).  The trained weights themselves come back
        # from the optimiser's fp32 partitions under ZeRO-2 and ZeRO-3 either way.
        strict = all(p.requires_grad for p in self.module.parameters())
        load_path, _ = self.engine.load_checkpoint(str(directory), tag="deepspeed", load_module_strict=strict,
                                                   load_optimizer_states=True, load_lr_scheduler_states=True)
        if load_path is None:
            raise FileNotFoundError(f"no DeepSpeed state under {directory}/deepspeed")

    def trainable_state_dict(self, *, keep_dtype: bool = False) -> dict[str, Tensor]:
        """As :meth:`TrainBackend.trainable_state_dict`.  Under ZeRO-3 (collective) each module's
        own trainable parameters are gathered in turn with ``deepspeed.zero.GatheredParameters``
        and only rank 0 keeps copies: while saving, a rank other than 0 holds at most one
        module's gathered parameters, never the whole model (rank 0: its copies plus one module).

        The walk is the one DeepSpeed's own ``engine._zero3_consolidated_16bit_state_dict``
        makes (Accelerate and transformers' Trainer call it), written against the documented
        ``GatheredParameters`` instead of that private method, and taking only the trainable
        parameters under the names ``named_parameters`` gives them (a tied one once, under its
        first name).  ``modifier_rank=0`` as there: on leaving, the gathered copies are
        re-partitioned and freed at once (``None`` kept them until the next use: DeepSpeed PR
        1220).  ``engine.save_16bit_model`` does not fit: it writes a ``pytorch_model.bin`` of
        its own and does nothing unless the config sets ``stage3_gather_16bit_weights_on_model_save``
        (our ds_configs leave it false)."""
        if self.zero_stage != 3:  # ZeRO-0/1/2: every rank holds the whole parameters
            return super().trainable_state_dict(keep_dtype=keep_dtype)
        import deepspeed

        main = is_main_process()
        state: dict[str, Tensor] = {}
        seen: set[int] = set()  # a tied parameter is gathered and copied once, under its first name
        for prefix, module in self.module.named_modules():
            own = [(name, p) for name, p in module.named_parameters(prefix=prefix, recurse=False)
                   if p.requires_grad and id(p) not in seen]
            if not own:
                continue
            seen.update(id(p) for _, p in own)
            with deepspeed.zero.GatheredParameters([p for _, p in own], modifier_rank=0):
                if main:
                    state.update((name, _cpu_copy(p, keep_dtype)) for name, p in own)
        if main:  # the order of named_parameters(), as before
            order = [name for name, p in self.module.named_parameters() if p.requires_grad]
            state = {name: state[name] for name in order if name in state}
        return state
