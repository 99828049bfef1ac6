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
``base_model_name_or_path`` is a hub id or an absolute path.  What is saved, and how it is
loaded back on resume and warm start, the adaptation object decides
(:mod:`vis_embed.model.network.adaptation`: the one save path).

Writes are atomic: rank 0 opens :func:`vis_embed.io.atomic_directory`, every rank writes its
part into the temporary directory, and only when all have finished is it renamed into place.
A killed run therefore leaves only complete checkpoints, and ``--resume`` takes the newest.
"""

from __future__ import annotations

import contextlib
import random
import re
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from vis_embed.errors import ConfigError
from vis_embed.config import FileRecord
from vis_embed.io import atomic_directory, atomic_write_json, read_json_value
from vis_embed.model.references import absolute_model_reference
from vis_embed.distributed import barrier, broadcast_object, get_rank, is_main_process

if TYPE_CHECKING:
    from transformers import ProcessorMixin

    from vis_embed.data.train import TrainDataConfig

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


def write_final_extras(directory: Path, processor: ProcessorMixin | None, recipe: dict[str, Any], data: TrainDataConfig,
                       steps: int) -> None:
    """What ``final/`` adds to the weights: the processor (so the directory is self-describing)
    and the model card ``README.md`` (``data``: the TrainDataConfig; the kind trained: the one
    record, ``embedding_config.json``, saved first); main process only."""
    from vis_embed.model.files.model_card import write_model_card

    if processor is not None:
        processor.save_pretrained(str(directory))
    datasets = [{"name": d.name, "kind": d.kind, "path": str(d.path), "weight": d.weight} for d in data.datasets]
    write_model_card(directory, {
        "base_model": absolute_model_reference(str(recipe["model"])), "recipe": recipe, "steps": steps,
        "datasets": datasets, "evaluation": None})


class TrainerStateFile(FileRecord):
    """``trainer_state.json`` (the keys the trainer writes, in its order; only ``step`` is
    required, so a file of an earlier vis-embed loads; unknown keys kept)."""

    step: int  # completed steps = the next schedule step
    tau: float | None = None
    schedule_fingerprint: str | None = None
    global_batch_size: int | None = None
    world_size: int | None = None
    base_model: str | None = None
    backend: str | None = None
    recipe: dict[str, Any] | None = None  # recipe_to_dict of the run's recipe


def write_trainer_state(directory: Path, state: TrainerStateFile | Mapping[str, Any]) -> None:
    """Write ``trainer_state.json``: the keys given, in their order."""
    state = state if isinstance(state, TrainerStateFile) else TrainerStateFile(**state)
    atomic_write_json(directory / TRAINER_STATE, state.as_json())


def read_trainer_state(directory: Path) -> TrainerStateFile:
    path = Path(directory) / TRAINER_STATE
    if not path.is_file():
        raise ConfigError(f"{directory}: not a training checkpoint (no {TRAINER_STATE})")
    return TrainerStateFile.of_file(read_json_value(path), path)


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
