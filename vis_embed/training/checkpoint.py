"""Checkpoints: ``OUTPUT_DIR/checkpoint-STEP/`` every N steps and ``OUTPUT_DIR/final/``.

Layout of one checkpoint directory::

    adapter_config.json, adapter_model.safetensors   plain peft LoRA adapter
                                                     (PeftModel.from_pretrained / encode --adapter)
    model.safetensors, config.json, ...               instead, for full fine-tuning
    trainer_state.json   step (number of completed steps = next schedule step), tau, recipe,
                         schedule fingerprint, world size
    temperature.pt       tau parameter + its optimiser state
    optimizer.pt         torch optimiser + LR scheduler (single process / DDP), or
    deepspeed/           the DeepSpeed engine's partitioned optimiser state
    rng_state_rank{R}.pt every RNG of rank R (exact resume)

``final/`` holds what one ships: the adapter (or full weights), the processor,
``trainer_state.json`` and a model card ``README.md`` (:func:`write_final_extras`);
optimiser, temperature and RNG state stay in the ``checkpoint-STEP`` directories.  An adapter's
``base_model_name_or_path`` is a hub id or an absolute path (:func:`record_absolute_base`).

Writes are atomic: rank 0 opens :func:`vis_embed.io.atomic_directory`, every rank writes its
part into the temporary directory, and only when all have finished is it renamed into place.
A killed run therefore leaves only complete checkpoints, and ``--resume`` takes the newest.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vis_embed.errors import ConfigError
from vis_embed.io import atomic_directory, atomic_write_json
from vis_embed.model.references import ADAPTER_CONFIG, absolute_model_reference, is_peft_adapter
from vis_embed.model.projection_head import HEAD_CONFIG, load_head, save_head
from vis_embed.distributed import barrier, broadcast_object, get_rank, is_main_process

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
TRAINER_STATE = "trainer_state.json"
# No trained weight of a healthy run comes near this (LoRA factors are ~1e-2..1, backbone weights
# at most ~1e2); an optimiser blown up by a huge learning rate drives them to ~lr per step (1e30).
EXPLODED_WEIGHT = 1e6


def capture_rng_state() -> dict[str, Any]:
    """All RNG states this process uses (torch CPU + CUDA, python, numpy) for exact resume."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def find_peft_model(module: nn.Module) -> tuple[str, nn.Module] | None:
    """(attribute prefix, PeftModel) of the first peft-wrapped submodule, or None."""
    from peft import PeftModel

    for name, child in module.named_modules():
        if isinstance(child, PeftModel):
            return (f"{name}." if name else ""), child
    return None


def list_checkpoints(output_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete ``checkpoint-STEP`` directories, oldest first."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = []
    for child in output_dir.iterdir():
        match = CHECKPOINT_PATTERN.match(child.name)
        if match and (child / TRAINER_STATE).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    checkpoints = list_checkpoints(output_dir)
    return checkpoints[-1][1] if checkpoints else None


@contextlib.contextmanager
def shared_atomic_directory(path: Path) -> Iterator[Path]:
    """``atomic_directory`` across ranks: rank 0 owns the rename, all ranks write into it."""
    if is_main_process():
        with atomic_directory(path) as tmp:
            broadcast_object(str(tmp))
            yield tmp
            barrier()  # every rank finished writing before the rename
    else:
        tmp = Path(broadcast_object(None))
        yield tmp
        barrier()
    barrier()  # nobody reads the new directory before it is in place


def save_weights(model: nn.Module, trainable_state: dict[str, torch.Tensor], directory: Path,
                 processor: Any = None) -> None:
    """Adapter in peft format (LoRA), the projection head (adaptation "head") or the full
    backbone (full fine-tuning); main process only."""
    head = getattr(model, "head", None)
    if head is not None:  # the backbone is frozen: the head is all that trained
        state = {name[len("head."):]: tensor for name, tensor in trainable_state.items() if name.startswith("head.")}
        base = getattr(model, "name_or_path", None)
        save_head(directory, head, absolute_model_reference(base) if base else None, state=state)
        return
    found = find_peft_model(model)
    if found is not None:
        prefix, peft_model = found
        state = {name[len(prefix):]: tensor for name, tensor in trainable_state.items() if name.startswith(prefix)}
        peft_model.save_pretrained(str(directory), state_dict=state, save_embedding_layers=False)
        readme = directory / "README.md"  # peft's auto model card: noise in a checkpoint
        readme.unlink(missing_ok=True)
        record_absolute_base(directory)
        return
    backbone = getattr(model, "backbone", model)
    backbone.save_pretrained(str(directory), safe_serialization=True)
    if processor is not None:
        processor.save_pretrained(str(directory))


def record_absolute_base(adapter_dir: Path) -> None:
    """Rewrite ``base_model_name_or_path`` as a hub id or an ABSOLUTE path, so that
    ``AutoPeftModel.from_pretrained(adapter)`` and ``vis-embed merge`` work from any directory
    (peft records the name the model was loaded with, often relative to the training cwd).
    The file is edited as JSON, not through peft.PeftConfig: saving that would rewrite every
    field with this peft version's defaults, and only the base's name must change."""
    config_path = adapter_dir / ADAPTER_CONFIG
    config = json.loads(config_path.read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path")
    if base and absolute_model_reference(base) != base:
        config["base_model_name_or_path"] = absolute_model_reference(base)
        atomic_write_json(config_path, config)


def write_final_extras(directory: Path, processor: Any, recipe: dict[str, Any], data: Any,
                       steps: int) -> None:
    """What ``final/`` adds to the weights: the processor (so the directory is self-describing)
    and the model card ``README.md`` (``data``: the TrainDataConfig); main process only."""
    from vis_embed.model.model_card import write_model_card

    if processor is not None:
        processor.save_pretrained(str(directory))
    datasets = [{"name": d.name, "kind": d.kind, "path": str(d.path), "weight": d.weight} for d in data.datasets]
    write_model_card(directory, {
        "base_model": absolute_model_reference(str(recipe["model"])), "recipe": recipe, "steps": steps,
        "datasets": datasets, "evaluation": None,
        "adapter": is_peft_adapter(directory) or (directory / HEAD_CONFIG).is_file()})


def write_trainer_state(directory: Path, state: dict[str, Any]) -> None:
    atomic_write_json(directory / TRAINER_STATE, state)


def read_trainer_state(directory: Path) -> dict[str, Any]:
    path = Path(directory) / TRAINER_STATE
    if not path.is_file():
        raise ConfigError(f"{directory}: not a training checkpoint (no {TRAINER_STATE})")
    return json.loads(path.read_text(encoding="utf-8"))


def load_adapter_weights(model: nn.Module, directory: Path) -> None:
    """Load a saved adapter, head (or full weights) into the already-built training model."""
    head = getattr(model, "head", None)
    if head is not None:
        head.load_state_dict(load_head(directory).state_dict())
        return
    found = find_peft_model(model)
    if found is not None:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        _prefix, peft_model = found
        weights = load_file(str(directory / "adapter_model.safetensors"))
        result = set_peft_model_state_dict(peft_model, weights)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ConfigError(f"{directory}: adapter does not match the model (unexpected keys {unexpected[:3]})")
        return
    from safetensors.torch import load_file

    backbone = getattr(model, "backbone", model)
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(directory.glob("model*.safetensors")):
        state.update(load_file(str(shard)))
    backbone.load_state_dict(state, strict=False)


def warm_start(model: nn.Module, directory: str | Path) -> None:
    """Initialise the training model's adapter from a saved one (recipe ``init_adapter``).

    Refuses (ConfigError) a directory without weights of the recipe's adaptation, a LoRA adapter
    that lacks some of the recipe's LoRA weights (other ``lora.r`` / ``target_modules`` /
    ``vision``) or has other shapes: a warm start that silently kept random weights for part of
    the adapter would not be the warm start the experiment claims.
    """
    directory = Path(directory)
    source = f"init_adapter {directory}"
    if not directory.is_dir():
        raise ConfigError(f"{source}: not a directory")
    found = find_peft_model(model)
    if getattr(model, "head", None) is not None:
        if not (directory / HEAD_CONFIG).is_file():
            raise ConfigError(f"{source}: no projection head ({HEAD_CONFIG}) for adaptation: head")
    elif found is not None:
        from peft import get_peft_model_state_dict
        from safetensors import safe_open

        weights = directory / "adapter_model.safetensors"
        if not weights.is_file():
            raise ConfigError(f"{source}: no adapter_model.safetensors (a LoRA adapter directory)")
        with safe_open(str(weights), framework="pt") as saved:
            missing = sorted(set(get_peft_model_state_dict(found[1])) - set(saved.keys()))
        if missing:
            raise ConfigError(f"{source}: lacks {len(missing)} of the recipe's LoRA weights (e.g. {missing[0]}); "
                              "lora.target_modules and lora.vision must match the adapter's")
    elif not any(directory.glob("model*.safetensors")):
        raise ConfigError(f"{source}: no model*.safetensors (full fine-tuning needs full weights)")
    try:
        load_adapter_weights(model, directory)
    except RuntimeError as exc:  # size mismatch: another lora.r or head dim
        raise ConfigError(f"{source}: does not fit the recipe's adapter: {str(exc).splitlines()[0]}") from None


def weights_problem(state: dict[str, torch.Tensor]) -> str | None:
    """Why ``state`` must not be saved (a non-finite or exploded tensor, named), else None."""
    for name, tensor in state.items():
        if not tensor.is_floating_point() or tensor.numel() == 0:
            continue
        values = tensor.detach().float()
        if not bool(torch.isfinite(values).all()):
            return f"weight {name} is not finite"
        largest = float(values.abs().max())
        if largest > EXPLODED_WEIGHT:
            return f"weight {name} has exploded (|w| up to {largest:.3g} > {EXPLODED_WEIGHT:.0e})"
    return None


def checkpoint_problem(directory: Path) -> str | None:
    """:func:`weights_problem` of every ``*.safetensors`` in a saved checkpoint."""
    from safetensors.torch import load_file

    for path in sorted(Path(directory).glob("*.safetensors")):
        problem = weights_problem(load_file(str(path)))
        if problem is not None:
            return f"{path.name}: {problem}"
    return None


def last_good_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest ``checkpoint-STEP`` whose weights are verified finite and not exploded."""
    for _step, directory in reversed(list_checkpoints(output_dir)):
        if checkpoint_problem(directory) is None:
            return directory
    return None


def prune_checkpoints(output_dir: Path, keep_last: int | None) -> None:
    if keep_last is None or not is_main_process():
        return
    for _step, path in list_checkpoints(output_dir)[:-keep_last]:
        shutil.rmtree(path, ignore_errors=True)


def rng_file(directory: Path, rank: int | None = None) -> Path:
    return directory / f"rng_state_rank{get_rank() if rank is None else rank}.pt"
