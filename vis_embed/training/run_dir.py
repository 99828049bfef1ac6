"""The run directory's policy: never destroy a run, never continue a different one.

``vis-embed train`` writes ``recipe.yaml``, ``train_log.jsonl``, ``tensorboard/``,
``checkpoint-STEP/`` and ``final/`` into ``output_dir``.  Starting a fresh run over those would
truncate the log and replace ``final/``; continuing a checkpoint with another recipe would
silently mix two runs.  So (:func:`prepare_run_directory`):

* a directory holding any of those artefacts is refused unless ``--resume`` (continue it) or
  ``--overwrite`` (remove those artefacts first; other files, e.g. a schedule, stay);
* ``--resume`` compares this run's recipe with the checkpoint's (or, before the first
  checkpoint, with ``recipe.yaml``) and names every key that differs, except the keys a resumed
  run may change: :data:`vis_embed.training.recipe.RESUME_MAY_CHANGE` (what each changes is said
  there);
* ``--resume`` with max_steps below the newest checkpoint's step is refused: nothing would
  train, and ``final/`` would hold that checkpoint's weights under the smaller step;
* temporaries a killed run left behind (``.checkpoint-N.tmp-*``, ``.final.tmp-*``, half-written
  files of :mod:`vis_embed.io`) are removed when a run starts.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from vis_embed.config import dotted_leaves
from vis_embed.errors import ConfigError
from vis_embed.training.checkpoint import CHECKPOINT_PATTERN, latest_checkpoint, read_trainer_state
from vis_embed.training.recipe import RESUME_MAY_CHANGE

# What a run writes into output_dir (checkpoint-STEP directories are matched by pattern).
RUN_ARTEFACTS = ("recipe.yaml", "train_log.jsonl", "tensorboard", "final")
# Temporaries of vis_embed.io: atomic_directory (".NAME.tmp-XXXX", ".NAME.old-PID"),
# atomic_path (".STEM.tmp-XXXX.SUFFIX") and atomic_write_bytes (".NAME.XXXX.tmp").
_LEFTOVER = re.compile(r"^\..+(\.tmp-[^/]*|\.old-\d+|\.tmp)$")


def run_artefacts(output_dir: Path) -> list[Path]:
    """The entries of ``output_dir`` a training run wrote (sorted), none for a new directory."""
    if not output_dir.is_dir():
        return []
    return sorted(child for child in output_dir.iterdir()
                  if child.name in RUN_ARTEFACTS or CHECKPOINT_PATTERN.match(child.name))


def check_run_directory(output_dir: Path, recipe: dict[str, Any], *, resume: bool, overwrite: bool) -> None:
    """Read-only half of the policy (every rank may call it): raise ConfigError when this
    start would overwrite a run or continue a different one."""
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite exclude each other: continue the run, or start it again")
    found = run_artefacts(output_dir)
    if resume:
        check_resumed_recipe(output_dir, recipe)
        check_resumed_step(output_dir, recipe["max_steps"])
    elif found and not overwrite:
        names = ", ".join(path.name for path in found[:4]) + (", ..." if len(found) > 4 else "")
        raise ConfigError(f"output_dir {output_dir} already holds a training run ({names}); "
                          f"pass --resume to continue it or --overwrite to start it again")


def clear_run_directory(output_dir: Path, *, overwrite: bool) -> None:
    """Writing half (main process only): remove leftover temporaries, and with ``overwrite``
    the previous run's artefacts."""
    if not output_dir.is_dir():
        return
    doomed = [child for child in output_dir.iterdir() if _LEFTOVER.match(child.name)]
    if overwrite:
        doomed += run_artefacts(output_dir)
    for path in doomed:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def check_resumed_recipe(output_dir: Path, recipe: dict[str, Any]) -> None:
    """ConfigError naming the dotted keys whose values differ from the run being resumed."""
    source, previous = _previous_recipe(output_dir)
    if previous is None:
        return
    differing = recipe_differences(previous, recipe)
    if differing:
        shown = "; ".join(f"{key}: {old!r} -> {new!r}" for key, old, new in differing[:8])
        more = f" (and {len(differing) - 8} more)" if len(differing) > 8 else ""
        raise ConfigError(f"--resume: this recipe differs from the one {source} was trained with: {shown}{more}. "
                          f"Resume with the same recipe (only {', '.join(RESUME_MAY_CHANGE)} may change), "
                          f"or start a new run in another output_dir (or with --overwrite)")


def check_resumed_step(output_dir: Path, max_steps: int) -> None:
    """ConfigError when the newest checkpoint has completed more than ``max_steps`` steps.

    The loop would run no step and ``final/`` would get the checkpoint's weights stamped with
    max_steps (a 4-step adapter recorded as 3 steps, replacing a final/ already there).  Equal is
    fine: final/ then holds the checkpoint's weights under their own step.
    """
    checkpoint = latest_checkpoint(output_dir)
    if checkpoint is None:
        return
    step = read_trainer_state(checkpoint).step
    if step > max_steps:
        raise ConfigError(f"--resume: {checkpoint} has completed {step} steps, more than max_steps {max_steps}. "
                          f"Resume with max_steps >= {step}, use {checkpoint} itself (its weights load like "
                          f"final/'s), or train {max_steps} steps in another output_dir (or with --overwrite)")


def recipe_differences(previous: dict[str, Any], current: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(dotted key, previous value, current value) for each leaf that differs, in key order."""
    old, new = dotted_leaves(previous), dotted_leaves(current)
    keys = sorted(set(old) | set(new))
    missing = object()
    return [(key, old.get(key), new.get(key)) for key in keys
            if not _may_change(key) and old.get(key, missing) != new.get(key, missing)]


def _may_change(key: str) -> bool:
    """Whether the dotted ``key`` is, or lies under, an entry of RESUME_MAY_CHANGE."""
    return any(key == entry or key.startswith(f"{entry}.") for entry in RESUME_MAY_CHANGE)


def _previous_recipe(output_dir: Path) -> tuple[str, dict[str, Any] | None]:
    """The recipe of the newest checkpoint, else the run's ``recipe.yaml``, else None."""
    checkpoint = latest_checkpoint(output_dir)
    if checkpoint is not None:
        return str(checkpoint), _as_written_now(read_trainer_state(checkpoint).recipe)
    recorded = output_dir / "recipe.yaml"
    if recorded.is_file():
        return str(recorded), _as_written_now(yaml.safe_load(recorded.read_text(encoding="utf-8")))
    return str(output_dir), None


def _as_written_now(recipe: Any) -> Any:
    """A recorded recipe in this version's spelling (a run recorded with the older adaptation
    keys compares equal to the same recipe now); as recorded when it no longer validates.
    Kept: run directories written by earlier versions are files users resume and compare."""
    from vis_embed.training.recipe import load_recipe, recipe_to_dict

    if not isinstance(recipe, dict):
        return recipe
    try:
        return recipe_to_dict(load_recipe(raw=recipe))
    except ConfigError:
        return recipe
