"""The training log: console (tqdm bar or lines), TensorBoard, Weights & Biases and ``train_log.jsonl``.

``train_log.jsonl`` holds one JSON object per step.  After a resume the lines of the steps
that will be re-run are dropped first, so the file always has exactly one line per step.
Every step's values get ``memory_gb`` added here (peak memory so far: CUDA's allocator when
CUDA is in use, else the process's peak resident set), so the JSONL, TensorBoard and W&B
(``logging.wandb``, :mod:`vis_embed.integrations.wandb`) receive the same scalars.
Only the main process writes; the other ranks get a logger that does nothing.
"""

from __future__ import annotations

import json
import logging
import math
import resource
import sys
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from vis_embed.errors import DataError
from vis_embed.io import atomic_write_text, parse_jsonl_line, read_text_lines_or_errors
from vis_embed.training.recipe import Recipe, recipe_to_dict

log = logging.getLogger(__name__)


class RunLogger:
    """Per-step values of one run (``loss``, ``tau``, ``grad_norm``, ``lr``, ``samples_per_s``, ...)."""

    def __init__(self, output_dir: Path, recipe: Recipe, start_step: int, *, enabled: bool,
                 show_progress: bool) -> None:
        self.enabled = enabled
        self.every = recipe.logging.every
        self.bar = None
        self.writer = None
        self.jsonl = None
        self.wandb: Any = None
        if not enabled:
            return
        path = output_dir / "train_log.jsonl"
        atomic_write_text(path, _lines_before(path, start_step))
        self.jsonl = path.open("a", encoding="utf-8")
        if recipe.logging.tensorboard:
            self.writer = _tensorboard_writer(output_dir / "tensorboard", start_step)
        if recipe.logging.wandb:  # the recipe check made sure wandb is installed
            from vis_embed.integrations.wandb import WandbRun

            self.wandb = WandbRun(output_dir, recipe_to_dict(recipe), recipe.logging.wandb_project,
                                  recipe.logging.wandb_run_name, resume=start_step > 0)
        if show_progress:
            self.bar = tqdm(total=recipe.max_steps, initial=start_step, desc="train", unit="step",
                            dynamic_ncols=True)

    def log(self, step: int, values: dict[str, float]) -> None:
        if not self.enabled:
            return
        values = {**values, "memory_gb": peak_memory_gb()}
        record = {"step": step, **{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                                   for k, v in values.items()}}
        self.jsonl.write(json.dumps(record) + "\n")
        self.jsonl.flush()
        if self.writer is not None and step % self.every == 0:
            for key, value in values.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self.writer.add_scalar(f"train/{key}", value, step)
        if self.wandb is not None and step % self.every == 0:
            self.wandb.log(step, values)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{values['loss']:.4f}", tau=f"{values['tau']:.4f}",
                                 lr=f"{values['lr']:.2e}", sps=f"{values['samples_per_s']:.1f}", refresh=False)
        elif step % self.every == 0:
            log.info("step %d: loss %.4f tau %.4f grad_norm %.3f lr %.2e %.1f samples/s", step, values["loss"],
                     values["tau"], values["grad_norm"], values["lr"], values["samples_per_s"])

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.writer is not None:
            self.writer.close()
        if self.wandb is not None:
            self.wandb.close()
        if self.jsonl is not None:
            self.jsonl.close()


def peak_memory_gb() -> float:
    """Peak memory of this process so far, in GiB: CUDA's allocator peak when CUDA has been
    used (torch is already imported by then), else the peak resident set size."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**30
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (2**30 if sys.platform == "darwin" else 2**20)


def _lines_before(path: Path, start_step: int) -> str:
    """The log lines of steps before ``start_step`` (none for a fresh run)."""
    if start_step == 0 or not path.is_file():
        return ""
    kept = []
    for number, line in read_text_lines_or_errors(path):
        try:
            if isinstance(line, str) and parse_jsonl_line(line, path, number).get("step", -1) < start_step:
                kept.append(line.rstrip("\r\n") + "\n")
        except DataError:  # a line cut short by the killed run: dropped
            continue
    return "".join(kept)


def _tensorboard_writer(directory: Path, start_step: int):  # -> SummaryWriter | None
    try:  # tensorboard is optional at run time; its import is slow, so only when asked for
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(directory), purge_step=start_step)
