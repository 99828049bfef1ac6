"""Small I/O helpers shared by every package: atomic writes, JSONL reading, fingerprints.

Atomic writes matter because users kill long jobs: a half-written schedule, cache or
checkpoint must never be mistaken for a complete one.  We write to a temporary sibling and
``os.replace`` it into place (atomic on POSIX within one filesystem).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import stat
from collections.abc import Iterable, Iterator
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from vis_embed.errors import ConfigError, DataError


# A Hugging Face Hub repository id: ``owner/name`` (models and datasets alike).
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_hub_id(reference: str | Path) -> bool:
    """The one rule for "Hub id or local path": ``owner/name`` that does not exist on disk is a
    Hub id; anything else (``a/b/c``, ``./x``, ``~/x``, ``/abs``, a bare ``name``, an existing
    ``owner/name`` folder) is a local path."""
    text = str(reference)
    return bool(HUB_ID.match(text)) and not Path(text).expanduser().exists()


def ignore_interrupts() -> None:
    """A worker process's first call: Ctrl-C (SIGINT, sent to the terminal's whole process group)
    is left to the parent command, which stops its workers and prints one ``interrupted`` line;
    a worker that took it too printed its own KeyboardInterrupt traceback beneath."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def safe_name(name: str) -> str:
    """A file-system-safe file stem for a free-text name (``MSCOCO_t2i`` stays, ``a/b`` -> ``a_b``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "dataset"


_TEMP_ATTEMPTS = 100


def _temp_name(directory: Path, prefix: str, suffix: str = "") -> Path:
    return directory / f"{prefix}{secrets.token_hex(6)}{suffix}"


def _new_temp_file(directory: Path, prefix: str, suffix: str = "") -> tuple[int, Path]:
    """A new, exclusively created file in ``directory`` (open for writing) and its path.

    Created with mode 0666 so that the kernel applies the umask as for a plain ``open()``
    (0644 under umask 022): written files are shared like any other.  Unlike mkstemp (0600)
    plus a chmod, this never reads the process umask -- which can only be read by setting it,
    a process-wide change that races with other threads creating files.
    """
    for _ in range(_TEMP_ATTEMPTS):
        name = _temp_name(directory, prefix, suffix)
        with contextlib.suppress(FileExistsError):
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666), name
    raise FileExistsError(f"no free temporary name in {directory} after {_TEMP_ATTEMPTS} attempts")


def _new_temp_directory(directory: Path, prefix: str) -> Path:
    """A new directory in ``directory``, mode 0777 less the umask (as ``mkdir``; see above)."""
    for _ in range(_TEMP_ATTEMPTS):
        name = _temp_name(directory, prefix)
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o777)
            return name
    raise FileExistsError(f"no free temporary name in {directory} after {_TEMP_ATTEMPTS} attempts")


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` so readers see either the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _new_temp_file(path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any, indent: int = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=False) + "\n")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary file path next to ``path``; rename it into place on success.

    For writers that want a file name (numpy.save, pyarrow.parquet.write_table, savefig).
    The temporary name keeps ``path``'s suffix so such writers do not append another.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _new_temp_file(path.parent, prefix=f".{path.stem}.tmp-", suffix=path.suffix)
    os.close(fd)  # writers reopen the name and keep its mode
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def check_replaceable(path: str | Path, marker: str, what: str, inputs: Iterable[str | Path] = (),
                      flag: str = "--out") -> None:
    """ConfigError naming ``flag`` unless a writer may replace the folder ``path``: it is missing,
    empty, or holds ``marker`` (an earlier output of the same writer, ``what``), and none of
    ``inputs`` lies inside it.  Replacing deletes what was there: a folder of someone's files
    (``--out ~/photos``), a regular file, or the very input being read must never go that way."""
    path = Path(path)
    shown = f"{flag} {path}"
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{shown}: is a file, not a folder; choose a new or empty folder")
    for source in inputs:
        if Path(source).exists() and Path(source).resolve().is_relative_to(path.resolve()):
            raise ConfigError(f"{shown}: holds the input {source}, which replacing it would delete; "
                              f"choose another folder")
    if path.is_dir() and any(path.iterdir()) and not (path / marker).is_file():
        raise ConfigError(f"{shown}: holds files and is not {what} (no {marker}); replacing it would delete "
                          f"them: choose a new or empty folder")


@contextlib.contextmanager
def atomic_directory(path: str | Path, *, marker: str | None = None, what: str = "",
                     inputs: Iterable[str | Path] = (), flag: str = "--out") -> Iterator[Path]:
    """Yield a temporary directory; on success it replaces ``path`` (e.g. a checkpoint).

    An existing ``path`` is moved aside first and removed only after the new one is in
    place, so a crash at any point leaves at least one complete directory; the temporary
    directory is removed on any failure.  With ``marker`` (a folder the user named), ``path``
    is first checked to be one this writer may replace (:func:`check_replaceable`).
    """
    path = Path(path)
    if marker is not None:
        check_replaceable(path, marker, what, inputs, flag)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_temp_directory(path.parent, prefix=f".{path.name}.tmp-")
    try:
        yield tmp
        _swap_in(tmp, path)
    finally:  # after a swap tmp is gone already; after any failure it must not stay (it can be GBs)
        shutil.rmtree(tmp, ignore_errors=True)


def _swap_in(tmp: Path, path: Path) -> None:
    """Rename ``tmp`` to ``path``, an existing ``path`` moved aside first and removed after.

    Two writers of one ``path`` race: the other may rename its directory in between our move
    aside and our rename (which then fails, ENOTEMPTY).  Its build is complete, so it is moved
    aside in turn and the rename tried again: the last writer wins, as with a file."""
    for _ in range(_TEMP_ATTEMPTS):
        old = _move_aside(path)
        try:
            os.replace(tmp, path)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                if old is not None:  # put the previous directory back; if that fails it stays aside, whole
                    with contextlib.suppress(OSError):
                        os.replace(old, path)
                raise
            if old is not None:  # another writer's complete build took its place
                shutil.rmtree(old, ignore_errors=True)
            continue
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return
    raise ConfigError(f"{path}: other writers replaced it {_TEMP_ATTEMPTS} times while this one tried to put its "
                      f"own in place; run one writer at a time")


def _move_aside(path: Path) -> Path | None:
    """``path`` renamed to ``.NAME.old-PID`` (where readers look for a swap in progress), or None
    when there is no ``path``."""
    old = path.parent / f".{path.name}.old-{os.getpid()}"
    try:
        os.replace(path, old)
    except FileNotFoundError:
        return None
    return old


def check_regular_file(path: str | Path, what: str = "", name: str | None = None) -> None:
    """DataError unless ``path`` is a regular file: opening a FIFO blocks until a writer comes
    (forever), and a device can be endless; both are refused before any ``open``.  ``what``
    names the file in the message ("image", "input"); ``name`` replaces the path shown."""
    shown, what = name or str(path), f"{what} " if what else ""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DataError(f"{what}file not found", path=shown) from None
    except OSError as exc:
        raise DataError(f"{what}file is not readable ({exc.strerror})", path=shown) from None
    except ValueError:  # JSON's "\u0000" in a path: no file system takes it
        raise DataError(f"{what}file name holds a NUL character", path=shown.replace("\0", "\\0")) from None
    if stat.S_ISDIR(mode):
        raise DataError(f"{what}path is a directory, not a file", path=shown)
    if not_regular(mode):
        raise DataError(f"{what}path is {not_regular(mode)}, not a regular file", path=shown)


def not_regular(mode: int) -> str | None:
    """What a file of ``mode`` (``os.stat`` / ``os.fstat``) is when not a regular file ("a FIFO
    (named pipe)", "a directory", "a device or socket"); None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) \
        else "a device or socket"


def read_json_value(path: str | Path | Traversable) -> Any:
    """The JSON value of a UTF-8 file (a BOM allowed; a packaged file too); not JSON, nested past
    the recursion limit or not UTF-8: a DataError naming the file."""
    return json_value(read_text(path), path)


def json_value(text: str, path: str | Path | Traversable, finite: bool = False) -> Any:
    """The JSON value of a file's ``text`` (read by :func:`read_json_value`, or by a caller that
    holds the file open: gallery/index_files); not JSON or nested too deeply: a DataError naming
    ``path``.  ``finite``: NaN and Infinity, which are not JSON, are refused too."""

    def no_constant(name: str) -> Any:
        raise DataError(f"holds {name}, which is not JSON (numbers must be finite)", path=path)

    try:
        return json.loads(text, parse_constant=no_constant) if finite else json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"malformed JSON ({exc.msg} at column {exc.colno})", path=path, line=exc.lineno) from None
    except RecursionError:
        raise DataError("JSON nested too deeply", path=path) from None


def without_bom(data: bytes) -> bytes:
    """``data`` without a leading UTF-8 byte-order mark: files saved by common Windows tools
    (Notepad, Excel's "CSV UTF-8") start with one, and it is not part of the first line's text."""
    return data.removeprefix(codecs.BOM_UTF8)


# The most bytes of one input a batch job takes in whole: an image URL's body (data.fetch.UrlPolicy).
MAX_INPUT_BYTES = 256 << 20
# The longest line of a JSONL or text input: one such input inline as a base64 data URI (4/3 its
# size) and room for the row's other fields.  A line without a newline was read whole before
# anything looked at it (3x its size in memory: bytes, text, parsed string).
MAX_LINE_BYTES = MAX_INPUT_BYTES * 4 // 3 + (1 << 20)


def read_text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` of a UTF-8 file; bytes that are not UTF-8 are a
    ``DataError`` naming the file and line (not a ``UnicodeDecodeError`` without either)."""
    for line_number, text in read_text_lines_or_errors(path):
        if isinstance(text, DataError):
            raise text
        yield line_number, text


def read_text(path: str | Path | Traversable) -> str:
    """A whole UTF-8 file (a packaged one too); not a regular file, or bytes that are not UTF-8:
    a ``DataError`` naming the file (and line)."""
    if isinstance(path, (str, os.PathLike)):  # on the file system (a packaged file in a zip is neither)
        check_regular_file(path)  # a FIFO would block the read forever
    path = path if isinstance(path, Traversable) else Path(path)
    data = without_bom(path.read_bytes())
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        raise DataError(f"not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at byte {exc.start - line_start + 1} "
                        f"of the line)", path=path, line=data.count(b"\n", 0, exc.start) + 1) from None


def read_text_lines_or_errors(path: str | Path) -> Iterator[tuple[int, str | DataError]]:
    """Like :func:`read_text_lines`, but a line that is not UTF-8, or longer than
    :data:`MAX_LINE_BYTES`, is yielded as its DataError and reading goes on (for readers that skip
    and count bad lines); a line over the limit is read past in bounded chunks, never held whole."""
    path = Path(path)
    with path.open("rb") as handle:
        line_number = 0
        while raw := handle.readline(MAX_LINE_BYTES + 1):
            line_number += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while (rest := handle.readline(1 << 16)) and not rest.endswith(b"\n"):
                    pass
                yield line_number, DataError(f"line longer than {MAX_LINE_BYTES:,} bytes, the limit of one line "
                                             f"(an image this large belongs in a file, not inline)",
                                             path=path, line=line_number)
                continue
            if line_number == 1:
                raw = without_bom(raw)
            try:
                yield line_number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield line_number, DataError(
                    f"not UTF-8 text (invalid byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)",
                    path=path, line=line_number)


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-empty line; errors name file and line."""
    path = Path(path)
    check_regular_file(path)
    for line_number, line in read_text_lines(path):
        if line.strip():
            yield line_number, parse_jsonl_line(line, path, line_number)


def parse_jsonl_line(line: str, path: str | Path, line_number: int) -> dict[str, Any]:
    """One JSONL line as a dict; a DataError naming file and line otherwise."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"malformed JSON ({exc.msg} at column {exc.colno})",
                        path=path, line=line_number) from None
    except RecursionError:  # a hostile line nested past the interpreter's limit: bounded, named
        raise DataError("JSON nested too deeply", path=path, line=line_number) from None
    if not isinstance(obj, dict):
        raise DataError(f"expected a JSON object, got {type(obj).__name__}", path=path, line=line_number)
    return obj


def read_json_object(path: str | Path) -> dict[str, Any] | None:
    """The JSON object stored at ``path``, or None when the file is absent, is not valid JSON or
    holds something else: for optional side files (a card's facts, a tracker's run id) that a
    later step may find missing or half-written by an older version."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        value = read_json_value(path)
    except DataError:
        return None
    return value if isinstance(value, dict) else None


def read_settings_object(path: str | Path, what: str = "") -> dict[str, Any]:
    """The JSON object of a settings file (a model's recorded embedding_config.json, a DeepSpeed
    config); not JSON, or JSON but not an object: a ConfigError naming ``what`` and the file (a
    setting's file: where a data file's problem is a DataError, this one is a ConfigError)."""
    shown = f"{what} {path}".strip()
    try:
        value = read_json_value(path)
    except DataError as exc:
        raise ConfigError(f"{shown}: not valid JSON ({exc.reason})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{shown}: expected a JSON object, got {type(value).__name__}")
    return value


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> Path:
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return atomic_write_text(path, text)


def fingerprint_files(paths: Iterable[str | Path], chunk_size: int = 1 << 20) -> str:
    """SHA-256 over the contents (not the names or mtimes) of ``paths``, in the given order."""
    digest = hashlib.sha256()
    for path in paths:
        with Path(path).open("rb") as handle:
            while chunk := handle.read(chunk_size):
                digest.update(chunk)
        digest.update(b"\x00")
    return digest.hexdigest()


def fingerprint_json(obj: Any) -> str:
    """Stable SHA-256 of a JSON-serialisable object (keys sorted)."""
    payload = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()
