"""The trainer's view of the offline schedule: whole steps, fingerprint and settings checks, build-if-missing.

Thin layer over :mod:`vis_embed.sampling` (planning, reading, fingerprints).  The trainer reads
each step *whole* -- every rank needs all B identity labels for the loss mask -- and keeps its contiguous shard of
slots (``schedule_io.rank_rows``), so gathering ranks in order rebuilds slot order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vis_embed.io import fingerprint_files
from vis_embed.sampling.build import build_schedule
from vis_embed.errors import ConfigError, DataError
from vis_embed.sampling.schedule_io import LABEL_COLUMN, check_data_fingerprint, iter_batches, rank_rows
from vis_embed.sampling.settings import SamplingOptions
from vis_embed.distributed import barrier, is_main_process
from vis_embed.training.recipe import recipe_key

if TYPE_CHECKING:
    from vis_embed.data.train import TrainDataConfig
    from vis_embed.sampling.schedule_io import ScheduledBatch, ScheduleInfo
    from vis_embed.sampling.settings import ScheduleSettings
    from vis_embed.training.recipe import Recipe

log = logging.getLogger(__name__)


def write_recipe_schedule(data: TrainDataConfig, path: str | Path, *, steps: int, global_batch_size: int, seed: int,
                          sampling: SamplingOptions | dict[str, Any] | None = None,
                          show_progress: bool = True) -> Path:
    """Plan and write (atomically, with its report) the schedule a recipe asks for.

    ``sampling`` is the recipe's ``sampling:`` section (its defaults; unset
    ``interleave_batch_size`` = one slot per batch); ``steps``, ``global_batch_size`` and
    ``seed`` come from the recipe's top level.
    """
    options = sampling if isinstance(sampling, SamplingOptions) else SamplingOptions.from_values(sampling or {})
    settings = options.schedule_settings(steps=steps, global_batch_size=global_batch_size, seed=seed)
    build_schedule(data, path, settings, show_progress=show_progress, log_report=show_progress)
    return Path(path)


class ScheduleSource:
    """Steps of a schedule file, checked against the training data's fingerprint.

    Every step carries its members' loss-label codes: the file's ``label`` column (a file
    written before that column existed is refused: rebuild it).
    """

    def __init__(self, path: str | Path, data_fingerprint: str, data: TrainDataConfig | None = None) -> None:
        self.path = Path(path)
        self.data_fingerprint = data_fingerprint
        self.data = data
        self.info = check_data_fingerprint(self.path, data_fingerprint)  # FingerprintMismatchError
        if not has_label_column(self.path):
            raise ConfigError(f"schedule {self.path} has no '{LABEL_COLUMN}' column (written by an older "
                              f"vis_embed); rebuild it with `vis-embed schedule`, or delete it and the trainer "
                              f"builds it")
        self.num_steps = int(self.info.steps)
        self.global_batch_size = int(self.info.global_batch_size)
        self.interleave_batch_size = int(self.info.interleave_batch_size)
        self.fingerprint = fingerprint_files([self.path])

    def shard(self, rank: int, world_size: int) -> slice:
        return rank_rows(self.global_batch_size, self.interleave_batch_size, rank, world_size)

    def steps(self, start_step: int = 0) -> Iterator[ScheduledBatch]:
        """Whole steps (``ScheduledBatch``, all B members in slot order) from ``start_step``."""
        for batch in iter_batches(self.path, data_fingerprint=self.data_fingerprint, start_step=start_step,
                                  rank=0, world_size=1):
            if self.data is not None:
                check_members(batch, self.data, self.path)
            yield batch


def check_members(batch: ScheduledBatch, data: TrainDataConfig, path: Path) -> None:
    """Every member of a whole step names rows of its dataset and carries the loss label the data
    gives its positive (``TrainDataset.labels``), else ``DataError`` naming the schedule's row
    (1-based) and field.  The data fingerprint says the data is the one scheduled; this says the
    file's rows are still the ones written for it (an edited id would fail mid-step, an edited or
    stale label would silently change which candidates the loss masks)."""
    first_row = batch.step * len(batch) + 1
    for position, member in enumerate(batch.members()):
        try:
            dataset = data.dataset(member.dataset)
        except KeyError:
            raise DataError(f"dataset {member.dataset!r} is not in {data.path}", path=path,
                            line=first_row + position, field="dataset") from None
        for field, record_id in (("query_id", member.query_id), ("positive_id", member.positive_id)):
            if record_id not in dataset.index:
                raise DataError(f"{record_id!r} is no row of dataset {member.dataset!r} ({dataset.path}); the file "
                                f"was edited: rebuild it with `vis-embed schedule`", path=path,
                                line=first_row + position, field=field)
        label = int(dataset.labels[dataset.index[member.positive_id]])
        if member.label != label:
            raise DataError(f"label {member.label} where the data's label of {member.positive_id!r} is {label}; the "
                            f"file was edited or written by another vis_embed: rebuild it with `vis-embed schedule`",
                            path=path, line=first_row + position, field=LABEL_COLUMN)


def has_label_column(path: Path) -> bool:
    import pyarrow.parquet as pq

    return LABEL_COLUMN in pq.read_schema(path).names


def open_schedule(recipe: Recipe, data: TrainDataConfig) -> ScheduleSource:
    """Open the recipe's schedule, building it first (and saying so) when it does not exist;
    an existing one must have been built with the recipe's settings (:func:`check_schedule_settings`)."""
    path = Path(recipe.schedule)
    settings = recipe.schedule_settings()  # what a missing file is built with and an existing one must record
    if not path.is_file():
        if is_main_process():
            log.info("schedule %s does not exist: building it first from the recipe's sampling settings "
                     "(%d steps x %d members)", path, recipe.max_steps, recipe.global_batch_size)
            build_schedule(data, path, settings, show_progress=recipe.logging.progress_bar,
                           log_report=recipe.logging.progress_bar)
        barrier()
    source = ScheduleSource(path, data.fingerprint(), data)
    check_schedule_settings(source.info, settings)
    return source


def check_schedule_settings(info: ScheduleInfo, wanted: ScheduleSettings) -> None:
    """Refuse a schedule file built with other settings than ``wanted`` (the recipe's).

    Every argument the file records must equal the recipe's, except ``steps``, which may exceed
    max_steps (a run may stop before its schedule ends).  Otherwise an ablation arm would train
    on another arm's batches while recipe.yaml and the model card record its own sampling.
    """
    recorded = info.arguments
    problems = [f"{'.'.join(recipe_key(name))}: {recorded.get(name, 'not recorded')!r} in the file, "
                f"{value!r} in the recipe"
                for name, value in wanted.to_json().items() if name != "steps" and recorded.get(name) != value]
    if info.steps < wanted.steps:
        problems.append(f"max_steps: the file has {info.steps} steps, fewer than the recipe's {wanted.steps}")
    if problems:
        raise ConfigError(f"schedule {info.path} was built with other settings than the recipe's: "
                          f"{'; '.join(problems)}. Point `schedule` at another path (the trainer builds it "
                          f"there), delete this file, or set the recipe to the file's values")
