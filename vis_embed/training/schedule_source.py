"""The trainer's view of the offline schedule: whole steps, fingerprint check, build-if-missing.

Thin layer over :mod:`vis_embed.sampling` (planning, reading, fingerprints).  The trainer reads each step *whole* -- every
rank needs all B identity labels for the loss mask -- and keeps its contiguous shard of
slots (``schedule_io.rank_rows``), so gathering ranks in order rebuilds slot order.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vis_embed.training.distributed import barrier, is_main_process


def build_schedule(data: Any, path: str | Path, *, steps: int, global_batch_size: int, seed: int,
                   settings: dict[str, Any], show_progress: bool = True) -> Path:
    """Plan and write a schedule (atomically, with its report) for ``data``."""
    from vis_embed.sampling import build_schedule as build

    options = {**settings}
    if options.get("interleave_batch_size") is None:
        options["interleave_batch_size"] = global_batch_size
    build(data, path, steps=steps, global_batch_size=global_batch_size, seed=seed,
          show_progress=show_progress, print_report=show_progress, **options)
    return Path(path)


class ScheduleSource:
    """Steps of a schedule file, checked against the training data's fingerprint."""

    def __init__(self, path: str | Path, data_fingerprint: str) -> None:
        from vis_embed.io import fingerprint_files
        from vis_embed.sampling.schedule_io import check_data_fingerprint

        self.path = Path(path)
        self.data_fingerprint = data_fingerprint
        self.info = check_data_fingerprint(self.path, data_fingerprint)  # FingerprintMismatchError
        self.num_steps = int(self.info.steps)
        self.global_batch_size = int(self.info.global_batch_size)
        self.interleave_batch_size = int(self.info.interleave_batch_size)
        self.fingerprint = fingerprint_files([self.path])

    def shard(self, rank: int, world_size: int) -> slice:
        from vis_embed.sampling.schedule_io import rank_rows

        return rank_rows(self.global_batch_size, self.interleave_batch_size, rank, world_size)

    def steps(self, start_step: int = 0) -> Iterator[Any]:
        """Whole steps (``ScheduledBatch``, all B members in slot order) from ``start_step``."""
        from vis_embed.sampling.schedule_io import iter_batches

        yield from iter_batches(self.path, data_fingerprint=self.data_fingerprint, start_step=start_step,
                                rank=0, world_size=1)


def open_schedule(recipe: Any, data: Any) -> ScheduleSource:
    """Open the recipe's schedule, building it first (and saying so) when it does not exist."""
    path = Path(recipe.schedule)
    if not path.is_file():
        if is_main_process():
            print(f"schedule {path} does not exist: building it first from the recipe's sampling settings "
                  f"({recipe.max_steps} steps x {recipe.global_batch_size} members)", flush=True)
            build_schedule(data, path, steps=recipe.max_steps, global_batch_size=recipe.global_batch_size,
                           seed=recipe.seed, settings=recipe.sampling.model_dump(),
                           show_progress=recipe.logging.progress_bar)
        barrier()
    return ScheduleSource(path, data.fingerprint())
