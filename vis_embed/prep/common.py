"""Helpers shared by the converters: finding source files, writing configs and reports."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from vis_embed.data.tables import TABLE_SUFFIXES, read_table
from vis_embed.errors import DataError
from vis_embed.io import atomic_write_json, atomic_write_text


def _data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in TABLE_SUFFIXES)


def _split_prefix(path: Path) -> str:
    """``original-00000-of-00001.parquet`` -> ``original`` (Hugging Face shard naming)."""
    return path.stem.split("-", 1)[0]


def _select_split(files: list[Path], split: str | None, folder: Path) -> list[Path]:
    groups: dict[str, list[Path]] = defaultdict(list)
    for path in files:
        groups[_split_prefix(path)].append(path)
    if split is not None:
        if split not in groups:
            raise DataError(f"no files of split {split!r} (found: {', '.join(sorted(groups))})", path=folder)
        return groups[split]
    if len(groups) > 1:
        raise DataError(f"several splits in one folder ({', '.join(sorted(groups))}); choose one with "
                        "--split so rows are not converted twice", path=folder)
    return files


def discover_sources(inputs: list[str | Path], split: str | None = None) -> dict[str, list[Path]]:
    """Map dataset name -> its data files.

    An input is a ``.jsonl``/``.parquet`` file (dataset named after its stem, or its folder
    when the stem is a shard name such as ``test-00000-of-00001``), a folder holding data
    files (named after the folder), or a folder of such folders (a Hugging Face snapshot).
    """
    sources: dict[str, list[Path]] = {}

    def add(name: str, files: list[Path]) -> None:
        if name in sources:
            raise DataError(f"two inputs give the dataset name {name!r}", path=files[0])
        sources[name] = files

    for raw in inputs:
        path = Path(raw)
        if path.is_file():
            if path.suffix.lower() not in TABLE_SUFFIXES:
                raise DataError("unsupported file type; use .jsonl or .parquet", path=path)
            shard = "-of-" in path.stem
            add(path.parent.name if shard else path.stem, [path])
        elif path.is_dir():
            files = _data_files(path)
            if files:
                add(path.name, _select_split(files, split, path))
                continue
            subfolders = [sub for sub in sorted(path.iterdir()) if sub.is_dir() and _data_files(sub)]
            if not subfolders:
                raise DataError("no .jsonl or .parquet files here or in its sub-folders", path=path)
            for sub in subfolders:
                add(sub.name, _select_split(_data_files(sub), split, sub))
        else:
            raise DataError("input not found", path=path)
    return sources


def read_sources(files: list[Path]) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    for path in files:
        for line, row in read_table(path):
            yield path, line, row


def relative_to(target: Path, start: Path) -> str:
    """``target`` relative to ``start`` when possible (portable configs), else absolute."""
    try:
        return os.path.relpath(target.resolve(), start.resolve())
    except ValueError:  # different drives on Windows
        return str(target.resolve())


def write_yaml(path: Path, doc: dict[str, Any]) -> Path:
    return atomic_write_text(path, yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))


def write_report(path: Path, report: dict[str, Any]) -> Path:
    return atomic_write_json(path, report)
