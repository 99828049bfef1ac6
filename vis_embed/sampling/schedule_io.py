"""The schedule file: writing, metadata, fingerprint checks, and streaming batches by rank.

Format (docs/scheduling.md): one Parquet table, ``steps × B`` rows in (step, slot, position)
order, columns ``step`` (int32), ``slot`` (int32), ``dataset``, ``query_id``,
``positive_id`` (strings), ``role`` (``anchor`` | ``hard_negative``) and ``label`` (int64:
the loss-label code of the member's positive, computed once by the data loader; the loss
masks same-label candidates).  A file without ``label`` (written before it existed) still
reads: its batches carry ``label=None`` and the trainer derives the codes from the data.  Row groups hold
whole steps, so reading from step ``s`` skips earlier row groups without decoding them.
Schema metadata:

- ``vis_embed.data_fingerprint``: fingerprint of the data files + data config
  (``TrainDataConfig.fingerprint()``), or of the in-memory arrays;
- ``vis_embed.args_fingerprint``: fingerprint of the scheduling arguments;
- ``vis_embed.schedule``: JSON with the format version, arguments, dataset names and the
  scheduler's report.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vis_embed.errors import ConfigError, DataError, FingerprintMismatchError
from vis_embed.io import atomic_path, fingerprint_json
from vis_embed.sampling.types import ROLES, Schedule

FORMAT_VERSION = 1
COLUMNS: tuple[str, ...] = ("step", "slot", "dataset", "query_id", "positive_id", "role")  # required
LABEL_COLUMN = "label"  # written by build_schedule; optional when reading (older files)
META_DATA_FINGERPRINT = "vis_embed.data_fingerprint"
META_ARGS_FINGERPRINT = "vis_embed.args_fingerprint"
META_SCHEDULE = "vis_embed.schedule"
_ROWS_PER_GROUP = 1 << 16


@dataclass(frozen=True)
class ScheduleInfo:
    """What a schedule file says about itself (its metadata)."""

    path: Path
    data_fingerprint: str
    args_fingerprint: str
    steps: int
    global_batch_size: int
    interleave_batch_size: int
    hard_negatives: int
    seed: int
    datasets: list[str]
    arguments: dict[str, Any]
    report: dict[str, Any]


@dataclass(frozen=True)
class ScheduledMember:
    slot: int
    dataset: str
    query_id: str
    positive_id: str
    role: str
    label: int | None = None


@dataclass(frozen=True)
class ScheduledBatch:
    """The members of one step for one rank, in slot order."""

    step: int
    slot: list[int]
    dataset: list[str]
    query_id: list[str]
    positive_id: list[str]
    role: list[str]
    label: list[int] | None = None  # None: a schedule file without the ``label`` column

    def __len__(self) -> int:
        return len(self.slot)

    def members(self) -> list[ScheduledMember]:
        labels = self.label if self.label is not None else [None] * len(self.slot)
        return [ScheduledMember(*fields) for fields in
                zip(self.slot, self.dataset, self.query_id, self.positive_id, self.role, labels)]


# --------------------------------------------------------------------------- fingerprints


def arguments_fingerprint(arguments: dict[str, Any]) -> str:
    return fingerprint_json(arguments)


# --------------------------------------------------------------------------- writing


def schedule_table(schedule: Schedule, metadata: dict[str, str] | None = None):
    """The schedule as a pyarrow Table with the documented columns (and ``metadata``)."""
    import pyarrow as pa

    offsets = np.concatenate([[0], np.cumsum([len(ids) for ids in schedule.dataset_ids])]).astype(np.int64)
    all_ids = pa.array(np.concatenate(schedule.dataset_ids) if schedule.dataset_ids else [], type=pa.string())
    base = offsets[:-1][schedule.dataset.astype(np.int64)]
    columns = {
        "step": pa.array(schedule.step, type=pa.int32()),
        "slot": pa.array(schedule.slot, type=pa.int32()),
        "dataset": pa.array(schedule.dataset_names, type=pa.string()).take(pa.array(schedule.dataset)),
        "query_id": all_ids.take(pa.array(base + schedule.query_row)),
        "positive_id": all_ids.take(pa.array(base + schedule.positive_row)),
        "role": pa.array(list(ROLES), type=pa.string()).take(pa.array(schedule.role)),
    }
    if schedule.label is not None:
        columns[LABEL_COLUMN] = pa.array(np.asarray(schedule.label, dtype=np.int64), type=pa.int64())
    table = pa.table(columns)
    return table.replace_schema_metadata(metadata or {})


def write_schedule(schedule: Schedule, path: str | Path, data_fingerprint: str,
                   steps_per_row_group: int | None = None) -> Path:
    """Write ``schedule`` atomically as Parquet; returns the path.

    Row groups hold ``steps_per_row_group`` whole steps (default: ~64k rows), the unit a
    reader starting from a later step skips.
    """
    import pyarrow.parquet as pq

    settings = schedule.settings
    arguments = settings.to_json()
    info = {"format_version": FORMAT_VERSION, "arguments": arguments,
            "datasets": schedule.dataset_names,
            "columns": list(COLUMNS) + ([LABEL_COLUMN] if schedule.label is not None else []),
            "report": schedule.report}
    metadata = {META_DATA_FINGERPRINT: data_fingerprint,
                META_ARGS_FINGERPRINT: arguments_fingerprint(arguments),
                META_SCHEDULE: json.dumps(info)}
    table = schedule_table(schedule, metadata)
    steps_per_group = steps_per_row_group or max(1, _ROWS_PER_GROUP // settings.global_batch_size)
    path = Path(path)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, row_group_size=steps_per_group * settings.global_batch_size,
                       compression="zstd")
    return path


# --------------------------------------------------------------------------- reading


def read_schedule_info(path: str | Path) -> ScheduleInfo:
    """Metadata of a schedule file; ``DataError`` if it is not one."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise DataError("schedule file not found", path=path)
    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # pyarrow raises several types for non-Parquet input
        raise DataError(f"not a Parquet file ({exc})", path=path) from None
    metadata = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    missing = [c for c in COLUMNS if c not in schema.names]
    if missing or META_SCHEDULE not in metadata:
        raise DataError(f"not a vis_embed schedule (missing {missing or [META_SCHEDULE]})", path=path)
    try:
        info = json.loads(metadata[META_SCHEDULE])
        if info.get("format_version") != FORMAT_VERSION:
            raise DataError(f"unsupported schedule format version {info.get('format_version')} "
                            f"(this vis_embed reads {FORMAT_VERSION})", path=path)
        arguments = info["arguments"]
        return ScheduleInfo(path=path, data_fingerprint=metadata[META_DATA_FINGERPRINT],
                            args_fingerprint=metadata[META_ARGS_FINGERPRINT], steps=arguments["steps"],
                            global_batch_size=arguments["global_batch_size"],
                            interleave_batch_size=arguments["interleave_batch_size"],
                            hard_negatives=arguments["hard_negatives"], seed=arguments["seed"],
                            datasets=list(info["datasets"]), arguments=arguments, report=info.get("report", {}))
    except DataError:  # a ValueError too: kept as it is
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"damaged schedule metadata ({type(exc).__name__}: {exc}); rebuild it with "
                        f"`vis-embed schedule`", path=path, field=META_SCHEDULE) from None


def check_data_fingerprint(path: str | Path, data_fingerprint: str) -> ScheduleInfo:
    """Refuse (``FingerprintMismatchError``) a schedule built from other data."""
    info = read_schedule_info(path)
    if info.data_fingerprint != data_fingerprint:
        raise FingerprintMismatchError(
            f"{path} was built from different training data (schedule's data fingerprint "
            f"{info.data_fingerprint[:12]}…, current data {data_fingerprint[:12]}…); rebuild it with "
            f"`vis-embed schedule`")
    return info


def rank_rows(global_batch_size: int, interleave_batch_size: int, rank: int, world_size: int) -> slice:
    """Rows of a step that rank ``rank`` of ``world_size`` receives: whole slots or a contiguous part of one."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"rank {rank} is not in 0..{world_size - 1}")
    if global_batch_size % world_size:
        raise ConfigError(f"global batch size {global_batch_size} is not divisible by world size {world_size}")
    per_rank = global_batch_size // world_size
    if per_rank % interleave_batch_size and interleave_batch_size % per_rank:
        raise ConfigError(
            f"{world_size} ranks x {per_rank} members cannot hold whole slots of {interleave_batch_size} "
            f"members nor equal contiguous parts of one; choose a world size for which "
            f"{global_batch_size}/W is a multiple or a divisor of {interleave_batch_size}")
    return slice(rank * per_rank, (rank + 1) * per_rank)


def iter_batches(path: str | Path, *, data_fingerprint: str | None, start_step: int = 0, rank: int = 0,
                 world_size: int = 1) -> Iterator[ScheduledBatch]:
    """Stream the batches of a schedule from ``start_step`` on, the part that belongs to ``rank``.

    ``data_fingerprint``: the current data's fingerprint (``TrainDataConfig.fingerprint()``);
    a schedule built from other data raises ``FingerprintMismatchError`` before anything is
    yielded.  Pass ``None`` only to inspect a schedule without data.  Reads one row group at
    a time; row groups before ``start_step`` are skipped without being decoded.
    """
    import pyarrow.parquet as pq

    info = read_schedule_info(path) if data_fingerprint is None else check_data_fingerprint(path, data_fingerprint)
    batch = info.global_batch_size
    rows = rank_rows(batch, info.interleave_batch_size, rank, world_size)
    if not 0 <= start_step <= info.steps:
        raise ConfigError(f"start step {start_step} is outside 0..{info.steps}")
    parquet = pq.ParquetFile(path)
    if parquet.metadata.num_rows != info.steps * batch:  # before any step trains, not after the last
        raise DataError(f"schedule has {parquet.metadata.num_rows} rows, expected {info.steps} x {batch}", path=path)
    names = list(COLUMNS) + ([LABEL_COLUMN] if LABEL_COLUMN in parquet.schema_arrow.names else [])
    first_row = 0
    for group in range(parquet.metadata.num_row_groups):
        group_rows = parquet.metadata.row_group(group).num_rows
        if group_rows % batch or first_row % batch:
            raise DataError(f"row group {group} does not hold whole steps of {batch} rows", path=path)
        first_step, steps_here = first_row // batch, group_rows // batch
        first_row += group_rows
        if first_step + steps_here <= start_step:
            continue
        table = parquet.read_row_group(group, columns=names)
        columns = {name: table.column(name).to_numpy(zero_copy_only=False) for name in names}
        _check_rows(table, columns, first_step * batch, info, path)
        for offset in range(max(0, start_step - first_step), steps_here):
            step = first_step + offset
            lo = offset * batch
            part = slice(lo + rows.start, lo + rows.stop)
            yield ScheduledBatch(step=step, slot=columns["slot"][part].tolist(),
                                 dataset=columns["dataset"][part].tolist(),
                                 query_id=columns["query_id"][part].tolist(),
                                 positive_id=columns["positive_id"][part].tolist(),
                                 role=columns["role"][part].tolist(),
                                 label=(columns[LABEL_COLUMN][part].tolist()
                                        if LABEL_COLUMN in columns else None))


def _check_rows(table: Any, columns: dict[str, np.ndarray], first_row: int, info: ScheduleInfo, path: Path) -> None:
    """The rows of one row group as the format has them, else ``DataError`` naming the row
    (1-based, as for every Parquet file) and field: every value present, ``step`` and ``slot``
    in (step, slot, position) order, one known dataset per slot, known roles, a slot starting
    with an anchor.  An edited or damaged file is refused here, not trained on."""
    for name in columns:
        column = table.column(name)
        if column.null_count:
            row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise DataError("empty value in the schedule; the file was edited or damaged: rebuild it with "
                            "`vis-embed schedule`", path=path, line=first_row + row + 1, field=name)
    batch, size = info.global_batch_size, info.interleave_batch_size
    position = np.arange(first_row, first_row + table.num_rows)
    known_dataset, known_role = set(info.datasets), set(ROLES)
    problems = {  # field -> (rows that break the format, what the format wants)
        "step": (columns["step"] != position // batch, "the rows of a step together, steps in order"),
        "slot": (columns["slot"] != position % batch // size,
                 f"slots 0..{batch // size - 1} of {size} rows each, in order"),
        "dataset": (np.fromiter((name not in known_dataset for name in columns["dataset"]), bool, len(position))
                    | (np.repeat(columns["dataset"].reshape(-1, size)[:, 0], size) != columns["dataset"]),
                    f"one of the {len(info.datasets)} datasets it was built from, the same for a slot's rows"),
        "role": (np.fromiter((role not in known_role for role in columns["role"]), bool, len(position))
                 | ((position % size == 0) & (columns["role"] != ROLES[0])),
                 f"one of {list(ROLES)}, a slot's first row an anchor"),
    }
    for name, (wrong, wanted) in problems.items():
        if wrong.any():
            row = int(np.flatnonzero(wrong)[0])
            value = columns[name][row:row + 1].tolist()[0]
            raise DataError(f"{value!r} in the schedule where the format has {wanted}; "
                            f"the file was edited or damaged: rebuild it with `vis-embed schedule`",
                            path=path, line=first_row + row + 1, field=name)
