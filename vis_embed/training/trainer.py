"""The trainer: recipe -> schedule -> LoRA model -> GradCache steps -> checkpoints.

One loop serves every launcher: ``vis-embed train`` (single process), ``torchrun`` (DDP) and
``deepspeed``/``torchrun`` with a DeepSpeed config (ZeRO-2/3).  Each step reads the global
batch of the offline schedule, keeps this rank's contiguous shard of slots (so gathering
ranks in order rebuilds the schedule's slot order), encodes it with GradCache and steps once.

Determinism: the schedule fixes the data order; LoRA is initialised from ``seed`` on every
rank; each rank's dropout stream is seeded ``seed + rank``; checkpoints save every RNG, so a
resumed run replays exactly the steps an uninterrupted run would have taken.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import random
import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vis_embed.errors import ConfigError, VisEmbedError
from vis_embed.io import atomic_write_text
from vis_embed.training import checkpoint as ckpt
from vis_embed.training.distributed import (
    DeepSpeedBackend,
    TorchBackend,
    TrainBackend,
    barrier,
    capture_rng_state,
    get_rank,
    get_world_size,
    init_distributed,
    is_main_process,
    lr_lambda,
    restore_rng_state,
)
from vis_embed.training.gradcache import StepResult, contrastive_step
from vis_embed.training.losses import Temperature, identity_ids, info_nce_loss
from vis_embed.training.recipe import Recipe, recipe_to_dict
from vis_embed.training.schedule_source import ScheduleSource, open_schedule

# Test hook: SIGKILL this process right after the given step completes (resume tests).
KILL_AFTER_STEP_ENV = "VIS_EMBED_KILL_AFTER_STEP"


class TrainingDivergedError(VisEmbedError):
    """Non-finite loss or gradient; the last good checkpoint is kept."""


@dataclass
class PreparedStep:
    step: int
    queries: list[Any]
    candidates: list[Any]
    query_lengths: list[int]
    candidate_lengths: list[int]
    identities: torch.Tensor  # (global batch,) identity ids in slot order


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def resolve_dtype(name: str) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    return {"bfloat16": torch.bfloat16, "float32": torch.float32}[name]


def prepared_length(prepared: Any) -> int:
    """Token count of one prepared member, for length-sorted chunking (0 if unknown)."""
    for attribute in ("num_tokens", "length", "token_count"):
        value = getattr(prepared, attribute, None)
        if isinstance(value, int):
            return value
    if isinstance(prepared, dict):
        for key in ("num_tokens", "length"):
            if isinstance(prepared.get(key), int):
                return prepared[key]
    try:
        return len(prepared)  # token lists (test stand-ins)
    except TypeError:
        return 0


def build_model(recipe: Recipe, device: torch.device) -> nn.Module:
    """EmbeddingModel from the recipe: dtype, attention, pixels, LoRA, gradient checkpointing."""
    from vis_embed.model.embedding_model import EmbeddingModel

    options = recipe.model_options
    dtype = resolve_dtype(options.dtype)
    attn = options.attn_implementation  # None: flash_attention_2 on GPU when installed, else sdpa
    wanted = {"device": device, "dtype": dtype, "attn_implementation": attn,
              "min_pixels": options.min_pixels, "max_pixels": options.max_pixels,
              "prompt_format": options.prompt_format, "max_length": options.max_length}
    accepted = inspect.signature(EmbeddingModel.from_pretrained).parameters
    kwargs = {k: v for k, v in wanted.items() if k in accepted and v is not None}
    ignored = [k for k, v in wanted.items() if k not in accepted and v is not None]
    if ignored and is_main_process():
        print(f"warning: model_options {ignored} are not supported by this EmbeddingModel and are ignored",
              flush=True)
    model = EmbeddingModel.from_pretrained(recipe.model, **kwargs)
    if recipe.lora.enabled:
        model.add_lora(r=recipe.lora.r, alpha=recipe.lora.alpha, dropout=recipe.lora.dropout,
                       target_modules=recipe.lora.target_modules, vision=recipe.lora.vision)
    else:
        for parameter in model.parameters():
            parameter.requires_grad_(True)
    if options.gradient_checkpointing:
        backbone = model.backbone
        backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(backbone, "enable_input_require_grads"):
            backbone.enable_input_require_grads()
        if hasattr(backbone, "config"):
            backbone.config.use_cache = False
    model.train()
    return model


def fill_deepspeed_config(path: str, recipe: Recipe, local_batch_size: int, dtype: torch.dtype) -> dict[str, Any]:
    """Read a ds_configs/*.json and fill its ``"auto"`` values from the recipe."""
    config_path = Path(path)
    if not config_path.is_file():
        raise ConfigError(f"deepspeed config {config_path} not found")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    for owned in ("optimizer", "scheduler"):
        if owned in config:
            raise ConfigError(f"{config_path}: remove '{owned}': the recipe's optimizer section owns it")
    config["train_micro_batch_size_per_gpu"] = local_batch_size
    config["gradient_accumulation_steps"] = 1  # GradCache chunks are not DeepSpeed micro-batches
    config["train_batch_size"] = local_batch_size * get_world_size()
    if config.get("gradient_clipping", "auto") == "auto":
        config["gradient_clipping"] = recipe.optimizer.max_grad_norm
    bf16 = dtype == torch.bfloat16
    config.setdefault("bf16", {})
    if config["bf16"].get("enabled", "auto") == "auto":
        config["bf16"]["enabled"] = bf16
    config.setdefault("steps_per_print", 10**9)
    config.setdefault("wall_clock_breakdown", False)
    return config


def loss_label(dataset: Any, record: dict[str, Any]) -> str:
    """The label the loss masks on: the record's identity, else the content of its candidate.

    Candidates that share query i's label (other than its own positive) are left out of its
    denominator.  Identity rows use their identity key.  A pairs row without identity falls
    back to what its candidate *is* (image file + text): two classification rows whose
    positive is the same label text "circle" are the same candidate, and pushing a query away
    from an identical copy of its own positive would only teach noise.
    """
    key = dataset.identity_key(record)
    if key is not None:
        return key
    item = dataset.positive_item(record)
    image = item.get("image")
    image_key = image if isinstance(image, str) or image is None else f"<in-memory {id(image)}>"
    return f"{dataset.name}::candidate::{image_key}::{item.get('text')}"


class Trainer:
    """Build everything from a recipe, then :meth:`train`.  Returns ``OUTPUT_DIR/final``."""

    def __init__(self, recipe: Recipe, *, resume: bool = False, show_progress: bool | None = None,
                 check_replay: bool = False) -> None:
        self.recipe = recipe
        self.resume = resume
        self.check_replay = check_replay
        self.output_dir = Path(recipe.output_dir)
        if recipe.torch_threads:
            torch.set_num_threads(recipe.torch_threads)
        init_distributed(use_deepspeed=recipe.deepspeed is not None)
        self.rank, self.world_size = get_rank(), get_world_size()
        if recipe.global_batch_size % self.world_size:
            raise ConfigError(f"global_batch_size {recipe.global_batch_size} is not divisible by "
                              f"the number of processes {self.world_size}")
        self.local_batch_size = recipe.global_batch_size // self.world_size
        self.show_progress = recipe.logging.progress_bar if show_progress is None else show_progress
        self.device = torch.device(f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu")
        self.dtype = resolve_dtype(recipe.model_options.dtype)

        from vis_embed.data import load_train_config

        self.data = load_train_config(recipe.data, check_images=is_main_process())
        self.schedule: ScheduleSource = open_schedule(recipe, self.data)
        if self.schedule.global_batch_size != recipe.global_batch_size:
            raise ConfigError(f"schedule {recipe.schedule} has {self.schedule.global_batch_size} members per step "
                              f"but the recipe's global_batch_size is {recipe.global_batch_size}")
        if self.schedule.num_steps < recipe.max_steps:
            raise ConfigError(f"schedule {recipe.schedule} has {self.schedule.num_steps} steps, "
                              f"fewer than max_steps {recipe.max_steps}")
        self.shard = self.schedule.shard(self.rank, self.world_size)

        seed_everything(recipe.seed)  # identical LoRA init on every rank
        self.model = build_model(recipe, self.device)
        self.temperature = Temperature(recipe.temperature.init, recipe.temperature.learnable,
                                       recipe.temperature.freeze_steps, recipe.temperature.min).to(self.device)
        schedule = lr_lambda(recipe.optimizer.warmup_steps, recipe.max_steps, recipe.optimizer.decay,
                             recipe.optimizer.min_lr_ratio)
        self.tau_optimizer = torch.optim.AdamW([self.temperature.log_tau], weight_decay=0.0,
                                               lr=recipe.temperature.lr or recipe.optimizer.lr,
                                               betas=recipe.optimizer.betas, eps=recipe.optimizer.eps)
        self.tau_scheduler = torch.optim.lr_scheduler.LambdaLR(self.tau_optimizer, schedule)
        self.backend = self._build_backend(schedule)
        self.start_step = 0
        if resume:
            self._resume()
        else:
            seed_everything(recipe.seed + self.rank)  # per-rank dropout streams

    # ------------------------------------------------------------------ setup helpers
    def _build_backend(self, schedule: Any) -> TrainBackend:
        opt = self.recipe.optimizer
        common = {"lr": opt.lr, "weight_decay": opt.weight_decay, "betas": opt.betas, "eps": opt.eps,
                  "schedule": schedule}
        if self.recipe.deepspeed:
            ds_config = fill_deepspeed_config(self.recipe.deepspeed, self.recipe, self.local_batch_size, self.dtype)
            return DeepSpeedBackend(self.model, ds_config=ds_config, **common)
        # A chunk without images leaves vision-tower parameters out of the graph; DDP must
        # then be told to look for unused parameters or it waits for their gradients forever.
        vision_trainable = self.recipe.lora.vision or not self.recipe.lora.enabled
        return TorchBackend(self.model, max_grad_norm=opt.max_grad_norm,
                            find_unused_parameters=vision_trainable, **common)

    def _resume(self) -> None:
        directory = ckpt.latest_checkpoint(self.output_dir)
        if directory is None:
            if is_main_process():
                print(f"--resume: no checkpoint in {self.output_dir}; starting from step 0", flush=True)
            seed_everything(self.recipe.seed + self.rank)
            return
        state = ckpt.read_trainer_state(directory)
        for key, mine in (("schedule_fingerprint", self.schedule.fingerprint),
                          ("global_batch_size", self.recipe.global_batch_size),
                          ("world_size", self.world_size)):
            if state.get(key) != mine:
                raise ConfigError(f"cannot resume from {directory}: its {key} is {state.get(key)!r}, "
                                  f"this run's is {mine!r}")
        if isinstance(self.backend, DeepSpeedBackend):
            self.backend.load(directory)
        else:
            ckpt.load_adapter_weights(self.model, directory)
            self.backend.load(directory)
        tau_state = torch.load(directory / "temperature.pt", map_location="cpu", weights_only=False)
        self.temperature.load_state_dict(tau_state["temperature"])
        self.tau_optimizer.load_state_dict(tau_state["optimizer"])
        self.tau_scheduler.load_state_dict(tau_state["scheduler"])
        restore_rng_state(torch.load(ckpt.rng_file(directory), map_location="cpu", weights_only=False))
        self.start_step = int(state["step"])
        if is_main_process():
            print(f"resuming from {directory} at step {self.start_step}", flush=True)

    # ------------------------------------------------------------------ data
    def prepare_step(self, batch: Any) -> PreparedStep:
        """This rank's shard of one scheduled step, prepared (images loaded, prompts built)."""
        members = batch.members()
        identities = identity_ids([loss_label(self._dataset(m.dataset), self._dataset(m.dataset).get(m.positive_id))
                                   for m in members])
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
            prepared_q = self.model.prepare(query_items, instruction=dataset.query_instruction)
            prepared_c = self.model.prepare(candidate_items, instruction=dataset.candidate_instruction)
            for p, q, c in zip(positions, prepared_q, prepared_c):
                queries[p], candidates[p] = q, c
        return PreparedStep(batch.step, queries, candidates, [prepared_length(q) for q in queries],
                            [prepared_length(c) for c in candidates], identities)

    def _dataset(self, name: str) -> Any:
        try:
            return self.data.dataset(name)
        except KeyError:
            raise ConfigError(f"schedule {self.recipe.schedule} names dataset {name!r}, which is not in "
                              f"{self.recipe.data}") from None

    # ------------------------------------------------------------------ training
    def train_step(self, prepared: PreparedStep) -> tuple[StepResult, float]:
        self.temperature.set_step(prepared.step)
        identities = prepared.identities

        def loss_fn(queries: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
            return info_nce_loss(queries, candidates, self.temperature(), identities)

        result = contrastive_step(self.backend, self.model.collate, prepared.queries, prepared.candidates,
                                  loss_fn, chunk_size=self.recipe.gradcache.chunk_size,
                                  query_lengths=prepared.query_lengths,
                                  candidate_lengths=prepared.candidate_lengths, device=self.device,
                                  check_replay=self.check_replay,
                                  max_padding=self.recipe.gradcache.max_padding)
        if not math.isfinite(result.loss):
            self._diverged(prepared.step, f"loss is {result.loss}")
        grad_norm = self.backend.step()
        if not math.isfinite(grad_norm):
            self._diverged(prepared.step, f"gradient norm is {grad_norm}")
        self.tau_optimizer.step()  # a no-op while tau has no gradient (fixed or frozen)
        self.tau_optimizer.zero_grad(set_to_none=True)
        self.tau_scheduler.step()
        return result, grad_norm

    def _diverged(self, step: int, what: str) -> None:
        last = ckpt.latest_checkpoint(self.output_dir)
        kept = f"the last good checkpoint is {last}" if last else "no checkpoint was written yet"
        raise TrainingDivergedError(
            f"training diverged at step {step}: {what}. Stopped without saving; {kept}. "
            f"Try a lower optimizer.lr, a fixed or larger temperature (temperature.learnable=false, "
            f"temperature.init=0.05) or more optimizer.warmup_steps.")

    def train(self) -> Path:
        recipe = self.recipe
        if is_main_process():
            self.output_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.output_dir / "recipe.yaml", _dump_yaml(recipe_to_dict(recipe)))
        logger = _RunLogger(self.output_dir, recipe, self.start_step, enabled=is_main_process(),
                            show_progress=self.show_progress)
        kill_after = int(os.environ.get(KILL_AFTER_STEP_ENV, -1))
        executor = ThreadPoolExecutor(max_workers=1) if recipe.num_workers > 0 else None
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
                    **({"replay_max_abs_diff": result.replay_max_abs_diff}
                       if result.replay_max_abs_diff is not None else {}),
                })
                completed = step + 1
                every = recipe.checkpoint.every
                if every and completed % every == 0 and completed < recipe.max_steps:
                    self.save(self.output_dir / f"checkpoint-{completed}", completed)
                    ckpt.prune_checkpoints(self.output_dir, recipe.checkpoint.keep_last)
                if completed == kill_after:
                    os.kill(os.getpid(), signal.SIGKILL)
        finally:
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
            logger.close()
        final = self.output_dir / "final"
        self.save(final, recipe.max_steps)
        if is_main_process():
            print(f"training finished: {final}", flush=True)
        return final

    # ------------------------------------------------------------------ checkpoints
    def save(self, directory: Path, completed_steps: int) -> None:
        """Collective: every rank calls it.  Atomic (see checkpoint.py)."""
        trainable = self.backend.trainable_state_dict()  # collective under ZeRO-3
        with ckpt.shared_atomic_directory(directory) as tmp:
            self.backend.save(tmp)
            torch.save(capture_rng_state(), ckpt.rng_file(tmp))
            if is_main_process():
                processor = getattr(self.model, "processor", None)
                ckpt.save_weights(self.model, trainable, tmp, processor=processor)
                torch.save({"temperature": self.temperature.state_dict(),
                            "optimizer": self.tau_optimizer.state_dict(),
                            "scheduler": self.tau_scheduler.state_dict()}, tmp / "temperature.pt")
                ckpt.write_trainer_state(tmp, {
                    "step": completed_steps, "tau": self.temperature.value,
                    "schedule_fingerprint": self.schedule.fingerprint,
                    "global_batch_size": self.recipe.global_batch_size, "world_size": self.world_size,
                    "base_model": self.recipe.model, "backend": self.backend.kind,
                    "recipe": recipe_to_dict(self.recipe),
                })
        barrier()


def _dump_yaml(obj: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(obj, sort_keys=False)


class _RunLogger:
    """Console (tqdm), TensorBoard and ``train_log.jsonl`` (one JSON object per step)."""

    def __init__(self, output_dir: Path, recipe: Recipe, start_step: int, *, enabled: bool,
                 show_progress: bool) -> None:
        self.enabled = enabled
        self.every = recipe.logging.every
        self.bar = None
        self.writer = None
        self.jsonl = None
        if not enabled:
            return
        path = output_dir / "train_log.jsonl"
        # After a resume, drop the lines of steps that will be re-run so the log has one line per step.
        kept = []
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    if json.loads(line).get("step", -1) < start_step:
                        kept.append(line + "\n")
                except json.JSONDecodeError:
                    continue
        atomic_write_text(path, "".join(kept) if start_step > 0 else "")
        self.jsonl = path.open("a", encoding="utf-8")
        if recipe.logging.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(str(output_dir / "tensorboard"), purge_step=start_step)
            except ImportError:  # tensorboard is optional at run time
                self.writer = None
        if show_progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=recipe.max_steps, initial=start_step, desc="train", unit="step",
                            dynamic_ncols=True)

    def log(self, step: int, values: dict[str, float]) -> None:
        if not self.enabled:
            return
        record = {"step": step, **{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                                   for k, v in values.items()}}
        self.jsonl.write(json.dumps(record) + "\n")
        self.jsonl.flush()
        if self.writer is not None and step % self.every == 0:
            for key, value in values.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self.writer.add_scalar(f"train/{key}", value, step)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{values['loss']:.4f}", tau=f"{values['tau']:.4f}",
                                 lr=f"{values['lr']:.2e}", sps=f"{values['samples_per_s']:.1f}", refresh=False)
        elif step % self.every == 0:
            print(f"step {step}: loss {values['loss']:.4f} tau {values['tau']:.4f} "
                  f"grad_norm {values['grad_norm']:.3f} lr {values['lr']:.2e} "
                  f"{values['samples_per_s']:.1f} samples/s", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.writer is not None:
            self.writer.close()
        if self.jsonl is not None:
            self.jsonl.close()
