"""Weights & Biases logging of a training run (recipe ``logging.wandb: true``).

:class:`WandbRun` is created by the run logger (:mod:`vis_embed.training.run_log`) on the main
process only: it logs the per-step scalars TensorBoard gets (under ``train/``), the recipe as
the run's config, and closes the run when training ends.  ``WANDB_MODE=offline`` (wandb's own
switch) keeps everything in OUTPUT_DIR/wandb/ for ``wandb sync`` later.

The run's id is recorded in OUTPUT_DIR/wandb_run.json, so that

* a resumed training run continues the same W&B run (``resume="allow"``), and
* an evaluation of the run's ``final/`` adapter (``vis-embed eval --adapter RUN/final``) adds
  its metrics to that run's summary (``eval/<dataset or group>``): :func:`log_evaluation`.

wandb is an optional extra: the recipe check names ``vis_embed[wandb]`` when it is missing
(:func:`vis_embed.training.recipe.check_optional_dependencies`), so this module is only
imported when the package is there.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vis_embed.io import atomic_write_json, read_json_object

log = logging.getLogger(__name__)
RUN_FILE = "wandb_run.json"   # in the training run's output directory: {id, project, name}


def _scalars(values: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """Finite numbers only (W&B charts cannot show None / NaN), keys under ``prefix/``."""
    return {f"{prefix}/{key}": float(value) for key, value in values.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)}


class WandbRun:
    """One W&B run bound to a training output directory."""

    def __init__(self, output_dir: Path, config: Mapping[str, Any], project: str | None,
                 name: str | None, resume: bool) -> None:
        import wandb

        previous = _read_run_file(output_dir) if resume else None
        self.run = wandb.init(project=project or (previous or {}).get("project") or "vis_embed",
                              name=name or (previous or {}).get("name") or Path(output_dir).name,
                              id=(previous or {}).get("id"), resume="allow" if previous else None,
                              config=dict(config), dir=str(output_dir), reinit="finish_previous")
        atomic_write_json(Path(output_dir) / RUN_FILE,
                          {"id": self.run.id, "project": self.run.project, "name": self.run.name})

    def log(self, step: int, values: Mapping[str, Any]) -> None:
        try:  # W&B is a mirror of train_log.jsonl: its failure must not stop training
            self.run.log(_scalars(values, "train"), step=step)
        except Exception as exc:  # noqa: BLE001 - wandb raises many kinds
            log.warning("W&B: could not log step %d (%s: %s)", step, type(exc).__name__, exc)

    def close(self) -> None:
        try:  # called before final/ is saved (Trainer.train): a failure here must not lose it
            _finish(self.run)
        except Exception as exc:  # noqa: BLE001 - wandb raises many kinds
            log.warning("W&B: could not finish the run %s (%s: %s)", self.run.id, type(exc).__name__, exc)


def log_evaluation(run_dir: Path, metrics: Mapping[str, float]) -> bool:
    """Add evaluation ``metrics`` to the summary of the W&B run recorded in ``run_dir``.

    Returns False (and does nothing) when the run did not log to W&B or wandb is missing, and
    (with a warning) when wandb fails."""
    recorded = _read_run_file(run_dir)
    if recorded is None:
        return False
    try:
        import wandb
    except ImportError:
        return False
    try:  # the evaluation is done and written: W&B being unreachable (no key, offline) must not fail it
        run = wandb.init(project=recorded.get("project"), id=recorded["id"], name=recorded.get("name"),
                         resume="allow", dir=str(run_dir), reinit="finish_previous")
        run.summary.update(_scalars(metrics, "eval"))
        _finish(run)
    except Exception as exc:  # noqa: BLE001 - wandb raises many kinds (UsageError, CommError, ...)
        log.warning("could not add the evaluation to the W&B run %s (%s: %s); WANDB_MODE=offline keeps it "
                    "local for `wandb sync`", recorded["id"], type(exc).__name__, exc)
        with contextlib.suppress(Exception):  # no half-set-up wandb (its settings) left in this process
            wandb.teardown()
        return False
    return True


def _finish(run: Any) -> None:
    import wandb

    run.finish()
    if wandb.run is None:  # no other run of this process: flush the service (offline files complete)
        wandb.teardown()


def _read_run_file(directory: Path) -> dict[str, Any] | None:
    recorded = read_json_object(Path(directory) / RUN_FILE)
    return recorded if recorded is not None and recorded.get("id") else None
