"""Fill a ``ds_configs/*.json`` DeepSpeed config from the recipe.

The shipped configs leave batch sizes, clipping and bf16 as ``"auto"``: the recipe owns
them, so one config serves every model size and number of processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vis_embed.errors import ConfigError
from vis_embed.io import read_settings_object
from vis_embed.distributed import get_world_size
from vis_embed.training.recipe import Recipe


def read_deepspeed_config(path: str) -> dict[str, Any]:
    """A ds_configs/*.json as written (ConfigError naming the file when missing or not JSON)."""
    config_path = Path(path)
    if not config_path.is_file():
        raise ConfigError(f"deepspeed config {config_path} not found")
    return read_settings_object(config_path, "deepspeed config")


def zero_stage(path: str) -> int:
    """The config's ZeRO stage (0 when it has no ``zero_optimization``)."""
    zero = read_deepspeed_config(path).get("zero_optimization") or {}
    return int(zero.get("stage", 0)) if isinstance(zero, dict) else 0


def fill_deepspeed_config(path: str, recipe: Recipe, local_batch_size: int, dtype: torch.dtype) -> dict[str, Any]:
    """Read a ds_configs/*.json and fill its ``"auto"`` values from the recipe."""
    config_path = Path(path)
    config = read_deepspeed_config(path)
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
