"""Encode a JSONL of items into an ``.npy`` matrix: the library half of ``vis-embed encode``
(arguments: :mod:`vis_embed.model.cli`).

Input: one JSON object per line: an item (:mod:`vis_embed.data.items`: ``image`` -- a path,
relative to the JSONL's folder unless absolute, or an http(s) URL -- and/or ``text``, and
optionally ``bbox``) plus an optional ``id``.  Any other key is an error naming it.

Outputs (all written atomically):

* ``OUTPUT`` (e.g. ``emb.npy``): float32 (N, D), L2-normalised.
* ``OUTPUT`` with ``.ids.json`` (``emb.ids.json``): row alignment -- ``{"lines": [...],
  "ids": [...], "embedding_config": {...}}`` where row j of the matrix is input line
  ``lines[j]`` (1-based, counting every physical line), ``ids[j]`` is that row's ``id`` field
  (or null), ``embedding_config`` the effective settings the vectors were made with
  (:class:`vis_embed.model.embedding_config.EmbeddingConfig`) and ``model`` its name, adapter
  and fingerprint (weights + adapter + settings).
  It also records the stored form, ``dim`` and ``precision`` (``--dim``, ``--precision``:
  :mod:`vis_embed.vectors.stored_form`).
* With ``--precision int8|uint8`` only: ``emb.ranges.npy``, (2, D) float32 per-dimension
  [min; max] the vectors were quantized with (``--ranges emb.ranges.npy`` quantizes queries the
  same way); ``emb.ids.json`` then names where they came from (``ranges``).
* With ``--on-error skip`` only: ``emb.rejects.jsonl``, one ``{"line", "field", "reason",
  "row"}`` per skipped line (lines that are not UTF-8 or not JSON, items that break the contract,
  unreadable images, items the model embeds as NaN).  Without it (the default, ``raise``) the
  first bad line stops the run with an error naming the file, line and field, and nothing is
  written.  A previous run's ``emb.rejects.jsonl`` is removed by a run that writes none.

The files are one set: ``emb.ids.json`` is its commit record.  The new set is written
to temporary files first; only when all are complete is the old ``emb.ids.json`` removed, the
others renamed into place and the new ``emb.ids.json`` renamed in last.  A write that fails (a
full disk) leaves the previous set whole and loadable (an ``error:`` naming the output, exit 2);
a run killed mid-swap leaves no ``emb.ids.json``, and :func:`read_encoded` refuses a matrix
without (or not matching) its alignment.

Texts longer than the model's maximum (``EmbeddingModel.token_limit``) are cut at the end of
the item's text, never the instruction or image, and counted in the summary.

Under ``torchrun`` the ranks share the items (:mod:`vis_embed.model.runtime.encode_shards`: resumable
shards in ``OUTPUT`` with ``.shards/``, removed once the output is written) and rank 0 writes
the same files as one process would.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ConfigDict

from vis_embed.config import FileRecord, ModelRecord
from vis_embed.data.items import check_item
from vis_embed.distributed import all_gather_object, broadcast_object, get_world_size, local_device, torchrun_group
from vis_embed.embedding_cache import CacheStats
from vis_embed.errors import DataError
from vis_embed.vectors.stored_form import StoredForm, ranges_path
from vis_embed.io import (atomic_path, check_regular_file, parse_jsonl_line, read_json_value,
                          read_text_lines_or_errors)
from vis_embed.model.runtime.embedder import Embedder
from vis_embed.model.runtime.encode_shards import encode_across_ranks, remove_shards, shards_dir


class EncodedAlignment(FileRecord):
    """``emb.ids.json``: the row alignment an encode run writes and its readers (:func:`read_encoded`,
    the gallery's index) read, validated.  The keys are the file's (see the module docstring);
    every one is optional, so an ``.ids.json`` of an earlier vis-embed loads, and unknown keys are
    kept (what a newer writer adds, e.g. a new stored-form record)."""

    model_config = ConfigDict(strict=True)
    input: str | None = None                          # the JSONL encoded
    lines: list[int] = []                             # row j = input line lines[j] (1-based)
    ids: list[Any] | None = None                      # row j's ``id`` field (or null)
    embedding_config: dict[str, Any] | None = None    # the effective EmbeddingConfig's dump
    dim: int | None = None                            # the stored form (vectors/stored_form.py)
    precision: str | None = None
    ranges: str | None = None                         # int8/uint8: where the ranges came from
    model: ModelRecord | None = None                  # model_record: name, adapter, fingerprint


def sidecar_paths(output: Path) -> tuple[Path, Path]:
    """``(ids_path, rejects_path)`` for an output like ``emb.npy``."""
    stem = output.with_suffix("") if output.suffix == ".npy" else output
    return Path(f"{stem}.ids.json"), Path(f"{stem}.rejects.jsonl")


def read_items(path: Path, on_error: str) -> tuple[list[dict[str, Any]], list[Any], list[int], list[dict[str, Any]]]:
    """Parse the JSONL: ``(items, ids, line_numbers, rejects)``; malformed lines and items that
    break the item contract raise or are rejected."""
    check_regular_file(path, "input")
    items: list[dict[str, Any]] = []
    ids: list[Any] = []
    lines: list[int] = []
    rejects: list[dict[str, Any]] = []
    for line_number, raw in read_text_lines_or_errors(path):
        if isinstance(raw, str) and not raw.strip():
            continue
        try:
            if isinstance(raw, DataError):  # not UTF-8
                raise raw
            row = parse_jsonl_line(raw, path, line_number)
            item = check_item({key: value for key, value in row.items() if key != "id"},
                              path=path, line=line_number)
        except DataError as error:
            if on_error == "raise":
                raise
            rejects.append({"line": line_number, "field": error.field, "reason": error.reason,
                            "row": raw.rstrip("\n") if isinstance(raw, str) else None})
            continue
        items.append(item)
        ids.append(row.get("id"))
        lines.append(line_number)
    return items, ids, lines, rejects


@dataclass(frozen=True)
class EncodedFile:
    """What :func:`encode_jsonl` wrote."""

    output: Path
    rows: int
    dim: int
    ids_path: Path
    rejects: int
    rejects_path: Path | None  # written with on_error="skip" only
    truncated: int = 0  # items whose text was cut to the model's token limit

    def summary(self) -> str:
        text = f"wrote {self.rows} x {self.dim} embeddings to {self.output}"
        if self.rejects:
            text += f"; {self.rejects} rejected line(s) in {self.rejects_path}"
        if self.truncated:
            text += f"; {self.truncated} item(s) had their text cut to the model's token limit"
        return text


def encode_jsonl(model: str | Path, input_path: Path, output: Path, *, adapter: str | Path | None = None,
                 instruction: str | None = None, batch_size: int = 16, device: str | None = None,
                 compile: bool | None = None, on_error: str = "raise", show_progress: bool = True,
                 cache_stats: CacheStats | None = None, workers: int | str = "auto",
                 storage: StoredForm | None = None, **settings: Any) -> EncodedFile:
    """Encode every item of ``input_path`` with ``model`` (+ ``adapter``) into ``output`` and its sidecars.

    ``settings``: EmbeddingConfig fields (prompt_format, min_pixels, max_pixels, max_length,
    dtype, attn_implementation); None or absent = the value recorded with the model, else the default.

    ``storage``: the width and precision written (``--dim``, ``--precision``; default float32 at
    the model's width).

    Launched by torchrun, every rank calls this and encodes a share (``cache_stats``, when
    given, counts this rank's encoded and reused shards); rank 0 writes, every rank returns
    what it wrote.
    """
    input_path, output = Path(input_path), Path(output)
    items, ids, lines, rejects = read_items(input_path, on_error)
    with torchrun_group():
        embedder = Embedder.from_pretrained(
            model, adapter=adapter, device=device or local_device(), compile=compile, workers=workers, **settings)
        storage = (storage or StoredForm()).checked(embedder.embedding_dim, embedder.embedding_config)
        try:
            if get_world_size() == 1:
                encoded = embedder.encode_partial(
                    items, instruction=instruction, batch_size=batch_size,
                    show_progress=show_progress, base_dir=input_path.parent, on_error=on_error)
            else:
                encoded = encode_across_ranks(
                    embedder, items, work_dir=shards_dir(output), instruction=instruction, batch_size=batch_size,
                    show_progress=show_progress, base_dir=input_path.parent, on_error=on_error, stats=cache_stats)
        except DataError as exc:
            raise anchor_error(exc, input_path, lines) from None
        finally:
            embedder.close()  # the preparation worker processes
        truncated = sum(all_gather_object(embedder.model.truncated_items))
        written = None if encoded is None else _write_outputs(
            encoded, items, ids, lines, rejects, input_path, output, on_error, truncated,
            embedder.embedding_config.to_json(), storage, model_record(embedder, model, adapter))
        written = broadcast_object(written)  # also: no rank drops the shards before rank 0 has written
    if get_world_size() > 1:
        remove_shards(shards_dir(output))
    return written


def model_record(embedder: Embedder, model: str | Path, adapter: str | Path | None) -> ModelRecord:
    """Which model made the vectors (``.ids.json``'s ``model``): an index built from them refuses
    queries of another model (:mod:`vis_embed.gallery.store`)."""
    return ModelRecord(name=str(model), adapter=None if adapter is None else str(adapter),
                       fingerprint=embedder.fingerprint())


def _write_outputs(encoded: tuple[np.ndarray, list[int], dict[int, DataError]], items: list[dict[str, Any]],
                   ids: list[Any], lines: list[int], rejects: list[dict[str, Any]], input_path: Path,
                   output: Path, on_error: str, truncated: int = 0,
                   embedding_config: dict[str, Any] | None = None,
                   storage: StoredForm | None = None, model: ModelRecord | None = None) -> EncodedFile:
    """Write the matrix, the row alignment and (skip mode) the rejects of an encoded JSONL."""
    embeddings, kept, errors = encoded
    embeddings, ranges, stored = (storage or StoredForm()).apply(embeddings)
    rejects = rejects_of(errors, items, ids, lines, rejects, input_path)
    ids_path, rejects_path = sidecar_paths(output)
    alignment = EncodedAlignment(input=str(input_path), lines=[lines[i] for i in kept], ids=[ids[i] for i in kept],
                                 embedding_config=embedding_config, **stored, **({"model": model} if model else {}))
    try:
        _commit_set(output, ids_path, rejects_path if on_error == "skip" else None, embeddings, rejects, alignment,
                    ranges)
    except OSError as exc:  # disk full, quota, read-only: the previous set is still whole
        raise DataError(f"cannot write the output ({exc.strerror or exc}); the previous output, if any, "
                        f"is unchanged", path=output) from None
    if on_error != "skip":
        rejects_path.unlink(missing_ok=True)  # a previous run's rejects do not describe this output
    if ranges is None:
        ranges_path(output).unlink(missing_ok=True)  # nor a previous run's int8/uint8 ranges
    return EncodedFile(output=output, rows=int(embeddings.shape[0]), dim=int(embeddings.shape[1]),
                       ids_path=ids_path, rejects=len(rejects),
                       rejects_path=rejects_path if on_error == "skip" else None, truncated=truncated)


def _commit_set(output: Path, ids_path: Path, rejects_path: Path | None, embeddings: np.ndarray,
                rejects: list[dict[str, Any]], alignment: EncodedAlignment, ranges: np.ndarray | None = None) -> None:
    """Write the whole new set to temporary files first and only then swap it in: a write
    that fails (a full disk) leaves the previous complete set loadable.  The swap is renames
    only (no new space); ``ids_path``, the commit record, is removed before the others are
    replaced and put in place last, so a crash mid-swap leaves a set :func:`read_encoded` refuses."""
    with contextlib.ExitStack() as stack:
        # Entered in commit order, left in reverse: matrix, then rejects, then the ids record.
        ids_tmp = stack.enter_context(atomic_path(ids_path))
        rejects_tmp = None if rejects_path is None else stack.enter_context(atomic_path(rejects_path))
        ranges_tmp = None if ranges is None else stack.enter_context(atomic_path(ranges_path(output)))
        matrix_tmp = stack.enter_context(atomic_path(output))
        np.save(matrix_tmp, embeddings)
        if ranges_tmp is not None:
            np.save(ranges_tmp, ranges)
        if rejects_tmp is not None:
            rejects_tmp.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rejects),
                                   encoding="utf-8")
        ids_tmp.write_text(json.dumps(alignment.as_json(), indent=2), encoding="utf-8")
        ids_path.unlink(missing_ok=True)  # all written: the old set stops being one from here on


def rejects_of(errors: dict[int, DataError], items: list[dict[str, Any]], ids: list[Any], lines: list[int],
               rejects: list[dict[str, Any]], input_path: Path) -> list[dict[str, Any]]:
    """The rejects file's rows: the reader's ``rejects`` plus one per item error, in line order."""
    rejects = list(rejects)
    for index, error in errors.items():
        anchored = anchor_error(error, input_path, lines)
        rejects.append({"line": anchored.line, "field": anchored.field, "reason": anchored.reason,
                        "row": _jsonable({**items[index], "id": ids[index]})})
    rejects.sort(key=lambda reject: reject["line"])
    return rejects


def read_encoded(output: str | Path) -> tuple[np.ndarray, EncodedAlignment]:
    """``(embeddings, alignment)`` of an encode output, checked to be one set: a matrix whose
    ``.ids.json`` is missing (a run killed while writing) or lists another row count is refused."""
    output = Path(output)
    ids_path, _rejects = sidecar_paths(output)
    if not output.exists():
        raise DataError("embedding matrix not found", path=output)
    check_regular_file(output, "embedding matrix")
    if not ids_path.exists():
        raise DataError(f"no row alignment {ids_path.name} beside it: the encode run that wrote it did "
                        f"not finish; run it again", path=output)
    check_regular_file(ids_path, "row alignment")
    try:
        # mapped first: a header claiming more rows than the file holds fails before any allocation
        embeddings = np.array(np.load(output, mmap_mode="r"))
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(f"not a .npy matrix ({exc})", path=output) from None
    # not an object, or "lines" not a list of row numbers: a DataError naming the file (and key)
    alignment = EncodedAlignment.of_file(read_json_value(ids_path), ids_path)
    if len(alignment.lines) != len(embeddings):
        raise DataError(f"{len(embeddings)} rows but {ids_path.name} lists {len(alignment.lines)}: "
                        f"the two come from different runs; run encode again", path=output)
    return embeddings, alignment


def anchor_error(error: DataError, input_path: Path, lines: list[int]) -> DataError:
    """Re-anchor an item error to the JSONL line and field it came from (keeps the file name)."""
    index = getattr(error, "item_index", None)
    # error.path is a file worth naming (an image), except the "items[i]" of a non-finite vector
    # or a crashed preparation worker.
    named_file = error.path is not None and not str(error.path).startswith("items[")
    reason = f"{error.reason}: {error.path}" if named_file else error.reason
    return DataError(reason, path=input_path, line=None if index is None else lines[index],
                     field=error.field)


def _jsonable(item: dict[str, Any]) -> dict[str, Any]:
    return {key: value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
            for key, value in item.items()}
