"""Reading and writing record files: JSONL or Parquet, chosen by the file suffix.

Both formats yield the same rows: Parquet fills absent struct fields and columns with
nulls, so keys whose value is ``None`` are dropped (at the top level and inside item
dicts) -- a JSONL row and its Parquet round-trip compare equal.  For Parquet, the "line"
reported in errors is the 1-based row number.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from vis_embed.errors import DataError
from vis_embed.io import MAX_LINE_BYTES, atomic_path, read_jsonl, write_jsonl

TABLE_SUFFIXES: tuple[str, ...] = (".jsonl", ".parquet")


# Levels of objects and lists a row may nest (an item in a row needs 4): JSON nested a few hundred
# deep parses, then overflowed the stack of the first recursive walk over it (this one).
MAX_NESTING = 100


def _drop_nulls(value: Any, depth: int = 0) -> Any:
    """``value`` without ``None`` values; ValueError when nested deeper than :data:`MAX_NESTING`."""
    if depth > MAX_NESTING and isinstance(value, (dict, list)):
        raise ValueError(f"nested deeper than {MAX_NESTING} levels")
    if isinstance(value, dict):
        return {key: _drop_nulls(inner, depth + 1) for key, inner in value.items() if inner is not None}
    if isinstance(value, list):
        return [_drop_nulls(inner, depth + 1) for inner in value]
    return value


def _row_without_nulls(row: dict[str, Any], path: Path, line: int) -> dict[str, Any]:
    try:
        return _drop_nulls(row)
    except ValueError as exc:
        raise DataError(str(exc), path=path, line=line) from None


# Rows of a Parquet file decoded at once: PARQUET_BATCH_ROWS, fewer where the row groups' metadata
# says rows are large (their uncompressed size per row), so that a batch holds about
# PARQUET_BATCH_BYTES: 300 rows of 1 MiB in a zstd file of 15 kB were decoded at once (1 GB peak for row 1).
PARQUET_BATCH_ROWS = 8192
PARQUET_BATCH_BYTES = 64 << 20


def _parquet_batch_rows(parquet_file: Any, path: Path) -> int:
    """The batch size for ``parquet_file``; a row group whose rows average more than a JSONL line
    may hold (:data:`~vis_embed.io.MAX_LINE_BYTES`) is refused, before anything is decompressed."""
    metadata = parquet_file.metadata
    largest, first_row = 1, 1
    for group in range(metadata.num_row_groups):
        info = metadata.row_group(group)
        row_bytes = -(-info.total_byte_size // info.num_rows) if info.num_rows else 0
        if row_bytes > MAX_LINE_BYTES:
            last = first_row + info.num_rows - 1
            rows = f"row {first_row}" if last == first_row else f"rows {first_row}-{last}"
            raise DataError(f"{rows} (row group {group}) hold {row_bytes:,} bytes each on average, over the limit "
                            f"of one row ({MAX_LINE_BYTES:,} bytes, as for a JSONL line)", path=path)
        largest, first_row = max(largest, row_bytes), first_row + info.num_rows
    return max(1, min(PARQUET_BATCH_ROWS, PARQUET_BATCH_BYTES // largest))


def check_table_suffix(path: str | Path, field: str | None = None) -> None:
    if Path(path).suffix.lower() not in TABLE_SUFFIXES:
        raise DataError(f"unsupported file type {Path(path).suffix!r}; use .jsonl or .parquet",
                        path=path, field=field)


def read_table(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_or_row_number, row)`` from a ``.jsonl`` or ``.parquet`` file."""
    path = Path(path)
    check_table_suffix(path)
    if not path.is_file():
        raise DataError("file not found", path=path)
    if path.suffix.lower() == ".jsonl":
        for line_number, row in read_jsonl(path):
            yield line_number, _row_without_nulls(row, path, line_number)
        return
    import pyarrow.parquet as pq

    try:  # pages read through a 1 MiB buffer: pyarrow's default pre-buffers whole row groups (a file's worth)
        parquet_file = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise DataError(f"cannot read Parquet file ({exc})", path=path) from None
    row_number = 0
    batches = parquet_file.iter_batches(batch_size=_parquet_batch_rows(parquet_file, path))
    while True:
        try:  # a corrupt page surfaces only when its batch is decoded (OSError, ArrowInvalid, ...)
            batch = next(batches, None)
            rows = [] if batch is None else batch.to_pylist()
        except Exception as exc:  # noqa: BLE001  (pyarrow raises several types for corrupt data)
            raise DataError(f"cannot read Parquet data at or after row {row_number + 1} ({exc})", path=path) from None
        if batch is None:
            return
        for row in rows:
            row_number += 1
            yield row_number, _row_without_nulls(row, path, row_number)


def write_table(path: str | Path, rows: Iterable[dict[str, Any]]) -> Path:
    """Atomically write ``rows`` as JSONL or Parquet according to the suffix of ``path``."""
    path = Path(path)
    check_table_suffix(path)
    if path.suffix.lower() == ".jsonl":
        return write_jsonl(path, rows)
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = list(rows)
    if not rows:
        raise DataError("refusing to write an empty table", path=path)
    # pa.array infers the struct type from *all* rows (Table.from_pylist uses the first only)
    table = pa.Table.from_struct_array(pa.array(rows))
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path
