"""``vis-embed encode``: encode a JSONL of items into an ``.npy`` matrix.

Input: one JSON object per line with ``image`` (path, relative to the JSONL's folder unless
absolute, or an http(s) URL) and/or ``text``.

Outputs (all written atomically):

* ``OUTPUT`` (e.g. ``emb.npy``): float32 (N, D), L2-normalised.
* ``OUTPUT`` with ``.ids.json`` (``emb.ids.json``): row alignment -- ``{"lines": [...],
  "ids": [...]}`` where row j of the matrix is input line ``lines[j]`` (1-based, counting
  every physical line) and ``ids[j]`` is that row's ``id`` field (or null).
* With ``--on-error skip`` only: ``emb.rejects.jsonl``, one ``{"line", "field", "reason",
  "row"}`` per skipped line.  Without it (the default, ``raise``) the first bad line stops
  the run with an error naming the file, line and field, and nothing is written.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from vis_embed.errors import DataError
from vis_embed.io import atomic_path, atomic_write_json, parse_jsonl_line, write_jsonl
from vis_embed.model.embedding_model import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS
from vis_embed.model.prompts import PROMPT_FORMATS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="hub id or local checkpoint directory")
    parser.add_argument("--input", required=True, type=Path, help="items JSONL (image?, text?)")
    parser.add_argument("--output", required=True, type=Path, help="embeddings .npy to write")
    parser.add_argument("--adapter", type=Path, default=None, help="peft LoRA adapter directory")
    parser.add_argument("--instruction", default=None, help="prepended to every item's text")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-pixels", type=int, default=DEFAULT_MAX_PIXELS)
    parser.add_argument("--min-pixels", type=int, default=DEFAULT_MIN_PIXELS)
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: auto)")
    parser.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: bf16 on CUDA)")
    parser.add_argument("--prompt-format", choices=PROMPT_FORMATS, default="chat")
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                        help="skip: write bad lines to OUTPUT.rejects.jsonl and encode the rest")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def sidecar_paths(output: Path) -> tuple[Path, Path]:
    """``(ids_path, rejects_path)`` for an output like ``emb.npy``."""
    stem = output.with_suffix("") if output.suffix == ".npy" else output
    return Path(f"{stem}.ids.json"), Path(f"{stem}.rejects.jsonl")


def read_items(path: Path, on_error: str) -> tuple[list[dict[str, Any]], list[int], list[dict[str, Any]]]:
    """Parse the JSONL: ``(items, line_numbers, rejects)``; malformed lines raise or are rejected."""
    if not path.is_file():
        raise DataError("input file not found", path=path)
    items: list[dict[str, Any]] = []
    lines: list[int] = []
    rejects: list[dict[str, Any]] = []
    with path.open("r", encoding="utf-8") as handle:
        for line_number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                row = parse_jsonl_line(raw, path, line_number)
            except DataError as error:
                if on_error == "raise":
                    raise
                rejects.append({"line": line_number, "field": None, "reason": error.reason,
                                "row": raw.rstrip("\n")})
                continue
            items.append({"image": row.get("image"), "text": row.get("text"), "id": row.get("id")})
            lines.append(line_number)
    return items, lines, rejects


def run(args: argparse.Namespace) -> int:
    from vis_embed.model.embedder import Embedder

    input_path: Path = args.input
    items, lines, rejects = read_items(input_path, args.on_error)
    embedder = Embedder.from_pretrained(
        args.model, adapter=args.adapter, device=args.device, dtype=args.dtype,
        min_pixels=args.min_pixels, max_pixels=args.max_pixels, prompt_format=args.prompt_format)
    try:
        embeddings, kept, errors = embedder.encode_partial(
            items, instruction=args.instruction, batch_size=args.batch_size,
            show_progress=not args.no_progress, base_dir=input_path.parent,
            on_error=args.on_error)
    except DataError as exc:
        raise _anchor(exc, input_path, lines) from None
    for index, error in errors.items():
        anchored = _anchor(error, input_path, lines)
        rejects.append({"line": anchored.line, "field": anchored.field, "reason": anchored.reason,
                        "row": _jsonable(items[index])})
    rejects.sort(key=lambda reject: reject["line"])
    ids_path, rejects_path = sidecar_paths(args.output)
    with atomic_path(args.output) as tmp:
        np.save(tmp, embeddings)
    atomic_write_json(ids_path, {"input": str(input_path), "lines": [lines[i] for i in kept],
                                 "ids": [items[i].get("id") for i in kept]})
    if args.on_error == "skip":
        write_jsonl(rejects_path, rejects)
    summary = f"wrote {embeddings.shape[0]} x {embeddings.shape[1]} embeddings to {args.output}"
    if rejects:
        summary += f"; {len(rejects)} rejected line(s) in {rejects_path}"
    print(summary)
    return 0


def _anchor(error: DataError, input_path: Path, lines: list[int]) -> DataError:
    """Re-anchor an item error to the JSONL line and field it came from (keeps the file name)."""
    index = getattr(error, "item_index", None)
    reason = error.reason if error.path is None else f"{error.reason}: {error.path}"
    return DataError(reason, path=input_path, line=None if index is None else lines[index],
                     field=error.field)


def _jsonable(item: dict[str, Any]) -> dict[str, Any]:
    return {key: value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
            for key, value in item.items()}
