"""Reading an index directory (:mod:`vis_embed.gallery.store`) as one whole build, or refusing it.

- **One build.**  ``vis-embed index`` writes a new directory and renames it over the old one
  (io.atomic_directory), then removes the old.  Reading its files one path at a time mixed
  builds while it ran (161 of ~12,900 loads paired one build's ``ids.json`` with another's
  ``index.faiss``).  Here every file is opened relative to *one* open directory handle, so all
  of them come from the same build; a file that vanished meanwhile (the old build being
  removed), or the directory itself between the writer's two renames, makes the loader start
  again with the directory's new build (:class:`BuildReplaced`), until a build reads whole.
- **Regular files only.**  Opened without following symbolic links and without blocking, then
  checked with ``fstat``: a FIFO (which hung ``serve`` at start-up), a device (``/dev/zero``
  read to 2.3 GB) or a link is refused before a byte is read.
- **Sizes from headers.**  ``index.json`` is a validated model (:class:`IndexFile`); the
  faiss file's stored lengths are walked (:mod:`.faiss_headers`) and ``vectors.npy``'s header
  read (``numpy.lib.format``) and both checked against its rows and width *before* anything is
  allocated; the JSON files are read no further than a cap.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np
from pydantic import ConfigDict, Field

from vis_embed.config import FileRecord, ModelRecord
from vis_embed.errors import DataError
from vis_embed.vectors.index_spec import STORED_KINDS
from vis_embed.io import json_value, not_regular, without_bom

INDEX_FILE, VECTORS_FILE, IDS_FILE, SETTINGS_FILE = "index.faiss", "vectors.npy", "ids.json", "index.json"
FORMAT_VERSION = 1
MAX_SETTINGS_BYTES = 16 * 2 ** 20  # index.json: settings and an embedding config, a few KB in practice
MAX_ID_BYTES = 4096                 # ids.json: at most this many bytes per row on average
FINITE_BLOCK = 2 ** 20              # floats checked for NaN at a time
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class BuildReplaced(Exception):
    """The directory was replaced by a new build while its files were being opened: read again."""


class IndexFile(FileRecord):
    """``index.json``: what :func:`~vis_embed.gallery.store.write_index` writes and
    :class:`~vis_embed.gallery.store.GalleryIndex` reads, validated.  Every key but the first four
    is optional, so an index.json of an earlier vis-embed loads; unknown keys are kept (what a
    newer writer adds)."""

    model_config = ConfigDict(strict=True)
    format_version: Literal[1]
    kind: Literal[STORED_KINDS]  # type: ignore[valid-type]  (Literal of index_spec's tuple)
    rows: int = Field(gt=0)
    dim: int = Field(gt=0)
    kind_requested: str | None = None   # --kind as given (auto or a stored kind)
    kind_reason: str | None = None      # why the chooser built this kind
    bytes_per_vector: int | None = Field(None, gt=0)
    memory_budget_gb: float | None = None
    memory_given: bool | None = None    # --memory given (else half the machine's memory)
    rescore: int = Field(0, ge=0)
    # an ivf-pq build's faiss parameters (absent for the other kinds)
    nlist: int | None = Field(None, gt=0)
    nprobe: int | None = Field(None, gt=0)
    pq_bytes: int | None = Field(None, gt=0)
    pq_bits: int | None = Field(None, gt=0)
    embeddings: str | None = None       # the encode output the vectors came from
    model: ModelRecord | None = None
    embedding_config: dict[str, Any] | None = None

    @property
    def fingerprint(self) -> str | None:
        """The fingerprint of the model that made the vectors (None: unknown)."""
        return self.model.fingerprint if self.model is not None else None


@contextmanager
def opened_build(directory: Path, names: tuple[str, ...]) -> Iterator[dict[str, BinaryIO]]:
    """``{name: binary file}`` of the names present in ``directory``, all opened through one
    handle of it (one build); regular files only.  BuildReplaced when a name vanished because
    the directory was replaced meanwhile."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except FileNotFoundError:
        if _mid_swap(directory) or directory.is_dir():  # gone between the writer's renames, or back already
            raise BuildReplaced from None
        raise DataError("not an index directory (not found); write one with vis-embed index", path=directory,
                        field="index") from None
    except OSError as exc:
        raise DataError(f"not an index directory ({exc.strerror}); write one with vis-embed index",
                        path=directory, field="index") from None
    with ExitStack() as stack:
        stack.callback(os.close, dir_fd)
        files: dict[str, BinaryIO] = {}
        for name in names:
            try:
                fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                if _replaced(directory, dir_fd):
                    raise BuildReplaced from None
                continue
            except OSError as exc:
                raise _not_regular(directory / name, "a symbolic link" if os.path.islink(directory / name)
                                   else f"not readable ({exc.strerror})") from None
            handle = stack.enter_context(os.fdopen(fd, "rb"))
            what = not_regular(os.fstat(fd).st_mode)
            if what is not None:
                raise _not_regular(directory / name, what)
            files[name] = handle
        yield files


def _mid_swap(directory: Path) -> bool:
    """The writer has moved the old build aside and not yet renamed the new one in (io.atomic_directory)."""
    return any(directory.parent.glob(f".{directory.name}.old-*"))


def _replaced(directory: Path, dir_fd: int) -> bool:
    try:
        now = os.stat(directory)
    except OSError:
        return True
    opened = os.fstat(dir_fd)
    return (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino)


def _not_regular(path: Path, what: str) -> DataError:
    return DataError(f"is {what}, not a regular file: an index directory holds regular files only", path=path)


def file_size(handle: BinaryIO) -> int:
    return os.fstat(handle.fileno()).st_size


def read_json_file(handle: BinaryIO, path: Path, limit: int) -> Any:
    """The JSON value of ``handle`` (at most ``limit`` bytes, UTF-8, a BOM allowed), NaN and
    Infinity refused; every problem a DataError naming ``path``."""
    size = file_size(handle)
    if size > limit:
        raise DataError(f"{size} bytes, more than the {limit} this file can hold; a damaged index", path=path)
    data = without_bom(handle.read(limit + 1))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text (invalid byte at offset {exc.start})", path=path) from None
    return json_value(text, path, finite=True)


def read_settings(handle: BinaryIO, path: Path) -> IndexFile:
    return IndexFile.of_file(read_json_file(handle, path, MAX_SETTINGS_BYTES), path)


def read_ids(handle: BinaryIO, path: Path, rows: int) -> list[Any]:
    """``ids.json``: a list of ``rows`` distinct ids, no NaN or Infinity."""
    try:
        ids = read_json_file(handle, path, rows * MAX_ID_BYTES + 1024)
    except DataError as exc:
        raise DataError(f"unreadable ids ({exc.reason}); build the index again", path=path, line=exc.line,
                        field="ids") from None
    if not isinstance(ids, list) or len(ids) != rows:
        count = len(ids) if isinstance(ids, list) else type(ids).__name__
        raise DataError(f"{count} ids for the index's {rows} rows: a damaged index; build it again", path=path,
                        field="ids")
    duplicate = first_duplicate(ids)
    if duplicate is not None:
        raise DataError(f"rows {duplicate[0]} and {duplicate[1]} share the id {ids[duplicate[1]]!r}", path=path,
                        field="ids")
    return ids


def first_duplicate(ids: list[Any]) -> tuple[int, int] | None:
    """The rows of the first id two rows share (ids compared as JSON), else None."""
    first_row: dict[str, int] = {}
    for row, value in enumerate(ids):
        key = json.dumps(value, sort_keys=True)
        if key in first_row:
            return first_row[key], row
        first_row[key] = row
    return None


def mapped_vectors(handle: BinaryIO, path: Path, rows: int, dim: int) -> np.ndarray:
    """``vectors.npy`` memory-mapped, once its header says (rows, dim) little-endian float32
    in C order and the file holds exactly that; its values finite."""
    try:
        version = np.lib.format.read_magic(handle)
        reader = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        if version not in reader:
            raise ValueError(f"unsupported .npy version {version}")
        shape, fortran, dtype = reader[version](handle)
    except ValueError as exc:
        raise DataError(f"not a .npy array header ({exc})", path=path, field="vectors") from None
    offset = handle.tell()
    if dtype != np.dtype("<f4") or fortran or tuple(shape) != (rows, dim) or \
            file_size(handle) != offset + rows * dim * 4:
        raise DataError(f"holds {dtype} {tuple(shape)} in {file_size(handle)} bytes; the index needs float32 "
                        f"({rows}, {dim}): a damaged index; build it again", path=path, field="vectors")
    vectors = np.memmap(handle, dtype="<f4", mode="r", offset=offset, shape=(rows, dim))
    check_finite(vectors.reshape(-1), path, "vectors")
    return vectors


def check_finite(values: np.ndarray, path: Path, field: str) -> None:
    """DataError unless every value of the flat array is finite (checked a block at a time)."""
    for start in range(0, len(values), FINITE_BLOCK):
        if not np.isfinite(values[start:start + FINITE_BLOCK]).all():
            raise DataError("NaN or infinite values: a damaged index; build it again", path=path, field=field)


def needed_files(kind: str, rescore: int) -> tuple[str, ...]:
    return (SETTINGS_FILE, INDEX_FILE, IDS_FILE) + ((VECTORS_FILE,) if rescore and kind != "flat" else ())


def missing(files: dict[str, BinaryIO], names: tuple[str, ...], directory: Path) -> None:
    """DataError naming the first of ``names`` not opened."""
    for name in names:
        if name not in files:
            what = "not an index directory" if name == SETTINGS_FILE else "a damaged index"
            raise DataError(f"{what} (no {name}); write one with vis-embed index", path=directory / name,
                            field="index")
