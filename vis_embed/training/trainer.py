"""The trainer: recipe -> schedule -> model and its adaptation (LoRA, head or full) -> GradCache steps -> checkpoints.

The loop and its state (backend, temperature, resume, checkpoints) live here; the model a
recipe trains and the settings it records are model_setup.py's, and a step's items
(this rank's shard, prepared in worker processes) step_items.py's.

One loop serves every launcher: ``vis-embed train`` (single process), ``torchrun`` (DDP) and
``deepspeed``/``torchrun`` with a DeepSpeed config (ZeRO-2/3).  Each step reads the global
batch of the offline schedule, keeps this rank's contiguous shard of slots (so gathering
ranks in order rebuilds the schedule's slot order), encodes it with GradCache and steps once.

Determinism: the schedule fixes the data order; LoRA is initialised from ``seed`` on every
rank; each rank's dropout stream is seeded ``seed + rank``; checkpoints save every RNG, so a
resumed run replays exactly the steps an uninterrupted run would have taken.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import yaml
from transformers import set_seed

from vis_embed.data import load_train_config
from vis_embed.errors import ConfigError, VisEmbedError
from vis_embed.io import atomic_write_json, atomic_write_text
from vis_embed.model.network.adaptation import warm_start
from vis_embed.training import checkpoint as ckpt
from vis_embed.training.backends import DeepSpeedBackend, TorchBackend, TrainBackend, adamw
from vis_embed.training.deepspeed_config import fill_deepspeed_config
from vis_embed.distributed import barrier, broadcast_object, get_rank, get_world_size, init_distributed, is_main_process
from vis_embed.training.gradcache import StepResult, contrastive_step
from vis_embed.training.losses import BatchLabels, Temperature, build_objective
from vis_embed.training.losses.diagnostics import false_negative_stats
from vis_embed.training.losses.matryoshka import matryoshka_for_model
from vis_embed.training.lr_schedule import lr_schedule_of, resumed_decay_note
from vis_embed.training.model_setup import build_training_model, trained_embedding_config
from vis_embed.training.memory_plan import PLAN_FILE, plan_training
from vis_embed.training.recipe import Recipe, recipe_to_dict
from vis_embed.training.run_dir import check_run_directory, clear_run_directory
from vis_embed.training.run_log import RunLogger
from vis_embed.training.schedule_source import ScheduleSource, open_schedule
from vis_embed.training.step_items import PreparedStep, StepItems

if TYPE_CHECKING:
    from vis_embed.sampling.schedule_io import ScheduledBatch

log = logging.getLogger(__name__)

DEEPSPEED_CONFIG_FILE = "deepspeed_config.json"  # OUTPUT_DIR/: the filled DeepSpeed config of the run


class TrainingDivergedError(VisEmbedError):
    """Non-finite loss or gradient, or non-finite/exploded weights; nothing is saved after it,
    and the newest checkpoint verified finite is named."""


class Trainer:
    """Build everything from a recipe, then :meth:`train`.  Returns ``OUTPUT_DIR/final``."""

    def __init__(self, recipe: Recipe, *, resume: bool = False, overwrite: bool = False,
                 show_progress: bool | None = None, check_replay: bool = False) -> None:
        self.recipe = recipe
        self.resume = resume
        self.check_replay = check_replay
        self.output_dir = Path(recipe.output_dir)
        if recipe.torch_threads:
            torch.set_num_threads(recipe.torch_threads)
        init_distributed(use_deepspeed=recipe.deepspeed is not None)
        self.rank, self.world_size = get_rank(), get_world_size()
        # Before anything heavy: refuse to overwrite a run or to continue a different one.
        check_run_directory(self.output_dir, recipe_to_dict(recipe), resume=resume, overwrite=overwrite)
        barrier()
        if is_main_process():
            clear_run_directory(self.output_dir, overwrite=overwrite)
        barrier()
        if recipe.global_batch_size % self.world_size:
            raise ConfigError(f"global_batch_size {recipe.global_batch_size} is not divisible by "
                              f"the number of processes {self.world_size}")
        self.local_batch_size = recipe.global_batch_size // self.world_size
        self.show_progress = recipe.logging.progress_bar if show_progress is None else show_progress
        self.device = torch.device(f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu")
        self.data = load_train_config(recipe.data, check_images=is_main_process())
        # built with the recipe's settings (sampling, B, seed; at least max_steps steps), or refused
        self.schedule: ScheduleSource = open_schedule(recipe, self.data)
        self.shard = self.schedule.shard(self.rank, self.world_size)

        set_seed(recipe.seed)  # identical LoRA init on every rank
        self.adaptation = recipe.adaptation.build()  # what trains, and how it is saved and loaded
        self.model = build_training_model(recipe, self.device, self.adaptation)
        self.dtype = self.model.dtype  # as loaded (dtype: checkpoint is the checkpoint's own)
        if recipe.init_adapter:  # warm start; a checkpoint found by --resume overwrites it
            warm_start(self.model, self.adaptation, recipe.init_adapter)
        self.embedding_config = trained_embedding_config(recipe, self.data, self.model)
        # Before the backend wraps the model (the probe runs the bare model) and before the
        # per-rank seeds below (the probe's dropout draws do not shift the run's).
        self.memory_plan = plan_training(
            self.model, self.model.collate, lambda: self._members(0), gradcache=recipe.gradcache,
            gradient_checkpointing=recipe.model_options.gradient_checkpointing,
            local_batch_size=self.local_batch_size, device=self.device)
        self.gradcache = self.memory_plan.gradcache(recipe.gradcache)  # chunk_size "auto" resolved
        # the temperature the loss trains with (LossConfig.training_temperature: two_tier's fixed tau)
        self.temperature = Temperature.from_config(recipe.temperature, recipe.loss).to(self.device)
        # this rank's items of each step (its own worker processes, started by train())
        self.items = StepItems(self.model, self.data, self.shard, self.world_size,
                               schedule_name=recipe.schedule, data_name=recipe.data)
        lr_schedule = lr_schedule_of(recipe.optimizer, recipe.max_steps)
        self.objective = build_objective(recipe.loss, self.temperature)
        self.objective = matryoshka_for_model(self.objective, recipe.loss, self.model.embedding_dim)
        # tau's own AdamW: the optimizer section's betas and eps, temperature.lr (default optimizer.lr), no decay
        self.tau_optimizer = adamw([self.temperature.log_tau], recipe.optimizer, weight_decay=0.0,
                                   lr=recipe.temperature.lr or recipe.optimizer.lr)
        self.tau_scheduler = torch.optim.lr_scheduler.LambdaLR(self.tau_optimizer, lr_schedule)
        self.deepspeed_config: dict[str, Any] | None = None
        self.backend = self._build_backend(lr_schedule)
        self.start_step = 0
        self.step_diagnostics: dict[str, float] = {}
        if resume:
            self._resume()
        else:
            set_seed(recipe.seed + self.rank)  # per-rank dropout streams

    # ------------------------------------------------------------------ setup helpers
    def _build_backend(self, lr_schedule: Callable[[int], float]) -> TrainBackend:
        optimizer = self.recipe.optimizer
        if self.recipe.deepspeed:
            ds_config = fill_deepspeed_config(self.recipe.deepspeed, self.recipe, self.local_batch_size, self.dtype)
            self.deepspeed_config = ds_config  # written into the run directory by train()
            return DeepSpeedBackend(self.model, ds_config=ds_config, optimizer=optimizer, lr_schedule=lr_schedule)
        # DDP must look for unused parameters where some are outside a step's graph: full
        # fine-tuning's LM head never is in it (the embedding is a hidden state).  The vision
        # tower is, even in a chunk without images (vision_tower_dummy, on several ranks).
        return TorchBackend(self.model, optimizer=optimizer, lr_schedule=lr_schedule,
                            find_unused_parameters=self.adaptation.trains_vision)

    def _resume(self) -> None:
        directory = ckpt.latest_checkpoint(self.output_dir)
        if directory is None:
            if is_main_process():
                log.info("--resume: no checkpoint in %s; starting from step 0", self.output_dir)
            set_seed(self.recipe.seed + self.rank)
            return
        state = ckpt.read_trainer_state(directory)
        for key, mine in (("schedule_fingerprint", self.schedule.fingerprint),
                          ("global_batch_size", self.recipe.global_batch_size),
                          ("world_size", self.world_size)):
            if getattr(state, key) != mine:
                raise ConfigError(f"cannot resume from {directory}: its {key} is {getattr(state, key)!r}, "
                                  f"this run's is {mine!r}")
        if isinstance(self.backend, DeepSpeedBackend):
            self.backend.load(directory)
        else:
            self.adaptation.load_weights(self.model, directory)
            self.backend.load(directory)
        tau_state = torch.load(directory / "temperature.pt", map_location="cpu", weights_only=False)
        self.temperature.load_state_dict(tau_state["temperature"])
        self.tau_optimizer.load_state_dict(tau_state["optimizer"])
        self.tau_scheduler.load_state_dict(tau_state["scheduler"])
        ckpt.restore_rng_state(torch.load(ckpt.rng_file(directory), map_location="cpu", weights_only=False))
        self.start_step = state.step
        if is_main_process():
            log.info("resuming from %s at step %d", directory, self.start_step)
            # recipe.yaml records only the new max_steps: say what the change did to the LR
            note = resumed_decay_note(self.recipe.optimizer, (state.recipe or {}).get("max_steps"),
                                      self.recipe.max_steps)
            if note:
                log.warning(note)

    # ------------------------------------------------------------------ data
    def _members(self, step: int) -> list[Any]:
        prepared = self.prepare_step(next(self.schedule.steps(step)))
        return prepared.queries + prepared.candidates

    def prepare_step(self, batch: ScheduledBatch) -> PreparedStep:
        """This rank's shard of one scheduled step, prepared (step_items.StepItems)."""
        return self.items.prepare_step(batch)

    # ------------------------------------------------------------------ training
    def train_step(self, prepared: PreparedStep) -> tuple[StepResult, float]:
        self.temperature.set_step(prepared.step)
        labels = BatchLabels(prepared.labels, prepared.designated)

        def loss_fn(queries: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
            if prepared.candidate_order is not None:
                candidates = candidates[prepared.candidate_order.to(candidates.device)]
            # the false-negative diagnostics of this global batch (losses/diagnostics.py), logged per step
            self.step_diagnostics = false_negative_stats(queries, candidates, self.temperature(), labels.labels,
                                                         prepared.own_image)
            return self.objective(queries, candidates, labels)

        result = contrastive_step(self.backend, self.model.collate, prepared.queries, prepared.candidates,
                                  loss_fn, gradcache=self.gradcache, query_lengths=prepared.query_lengths,
                                  candidate_lengths=prepared.candidate_lengths, device=self.device,
                                  check_replay=self.check_replay)
        if not math.isfinite(result.loss):
            self._diverged(prepared.step, f"loss is {result.loss}")
        grad_norm = self.backend.step()
        if not math.isfinite(grad_norm):
            self._diverged(prepared.step, f"gradient norm is {grad_norm}")
        self.tau_optimizer.step()  # a no-op while tau has no gradient (fixed or frozen)
        self.temperature.keep_in_range()
        self.tau_optimizer.zero_grad(set_to_none=True)
        self.tau_scheduler.step()
        return result, grad_norm

    def _diverged(self, step: int, what: str) -> None:
        last = ckpt.last_good_checkpoint(self.output_dir)  # verified finite, not just the newest
        kept = f"the last good checkpoint is {last}" if last else "no good checkpoint was written yet"
        raise TrainingDivergedError(
            f"training diverged at step {step}: {what}. Stopped without saving; {kept}. "
            f"Try a lower optimizer.lr, a fixed or larger temperature (temperature.learnable=false, "
            f"temperature.init=0.05) or more optimizer.warmup_steps.")

    def train(self) -> Path:
        recipe = self.recipe
        if is_main_process():
            self.output_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.output_dir / "recipe.yaml", yaml.safe_dump(recipe_to_dict(recipe), sort_keys=False))
            if self.deepspeed_config is not None:  # the config DeepSpeed ran with, "auto" values filled
                atomic_write_json(self.output_dir / DEEPSPEED_CONFIG_FILE, self.deepspeed_config)
            atomic_write_json(self.output_dir / PLAN_FILE, self.memory_plan.as_dict())
        logger = RunLogger(self.output_dir, recipe, self.start_step, enabled=is_main_process(),
                            show_progress=self.show_progress)
        executor = ThreadPoolExecutor(max_workers=1) if recipe.num_workers > 0 else None
        # num_workers processes prepare items (per rank); the thread above waits on them for the next step.
        self.items.start(recipe.num_workers)
        batches = self.schedule.steps(self.start_step)
        next_prepared: Future[PreparedStep] | None = None
        try:
            for step in range(self.start_step, recipe.max_steps):
                started = time.perf_counter()
                if next_prepared is not None:
                    prepared = next_prepared.result()
                else:
                    prepared = self.prepare_step(next(batches))
                if executor is not None and step + 1 < recipe.max_steps:
                    # Load the next step's images while this one trains.
                    next_prepared = executor.submit(self.prepare_step, next(batches))
                if prepared.step != step:
                    raise ConfigError(f"schedule {recipe.schedule} yielded step {prepared.step}, expected {step}")
                result, grad_norm = self.train_step(prepared)
                elapsed = time.perf_counter() - started
                logger.log(step, {
                    "loss": result.loss, "tau": self.temperature.value, "grad_norm": grad_norm,
                    "lr": self.backend.lr(), "samples_per_s": recipe.global_batch_size / max(elapsed, 1e-9),
                    "step_time_s": elapsed,
                    "padded_fraction": (float(np.mean(result.padded_fraction)) if result.padded_fraction else 0.0),
                    **self.step_diagnostics,
                    **({"replay_max_abs_diff": result.replay_max_abs_diff}
                       if result.replay_max_abs_diff is not None else {}),
                })
                completed = step + 1
                every = recipe.checkpoint.every
                if every and completed % every == 0 and completed < recipe.max_steps:
                    self.save(self.output_dir / f"checkpoint-{completed}", completed)
                    ckpt.prune_checkpoints(self.output_dir, recipe.checkpoint.keep_last)
        finally:
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
            self.items.close()
            logger.close()
        final = self.output_dir / "final"
        self.save(final, recipe.max_steps, final=True)
        if is_main_process():
            log.info("training finished: %s", final)
        return final

    # ------------------------------------------------------------------ checkpoints
    def save(self, directory: Path, completed_steps: int, final: bool = False) -> None:
        """Collective: every rank calls it.  Atomic (see checkpoint.py).  ``final``: what one
        ships (weights, processor, model card); optimiser/RNG state stay in the checkpoints."""
        # collective under ZeRO-3; {} off the main process; full weights keep the model's dtype
        trainable = self.backend.trainable_state_dict(keep_dtype=not self.adaptation.is_adapter)
        # A finite loss does not prove finite weights (a huge lr drives them to ~1e30 first).
        problem = broadcast_object(ckpt.weights_problem(trainable) if is_main_process() else None)
        if problem is not None:
            self._diverged(completed_steps - 1, problem)
        with ckpt.shared_atomic_directory(directory) as tmp:
            if not final:
                self.backend.save(tmp)
                torch.save(ckpt.capture_rng_state(), ckpt.rng_file(tmp))
            if is_main_process():
                self.adaptation.save(self.model, tmp, state=trainable)  # the one save path
                self.embedding_config.save(tmp)  # how to embed travels with the weights
                if final:
                    ckpt.write_final_extras(tmp, self.model.processor, recipe_to_dict(self.recipe), self.data,
                                            completed_steps)
                else:
                    torch.save({"temperature": self.temperature.state_dict(),
                                "optimizer": self.tau_optimizer.state_dict(),
                                "scheduler": self.tau_scheduler.state_dict()}, tmp / "temperature.pt")
                ckpt.write_trainer_state(tmp, ckpt.TrainerStateFile(
                    step=completed_steps, tau=self.temperature.value,
                    schedule_fingerprint=self.schedule.fingerprint,
                    global_batch_size=self.recipe.global_batch_size, world_size=self.world_size,
                    base_model=self.recipe.model, backend=self.backend.kind,
                    recipe=recipe_to_dict(self.recipe),
                ))
        barrier()
