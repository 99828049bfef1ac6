"""The render and write phases: each planned image rendered (a worker pool; a pure function of
its spec), the boxes filled into the rows, and the folder written atomically: rows, metadata,
``train.yaml``, ``benchmark.yaml`` and the ``synth.json`` marker with the generator's version."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from vis_embed.prep.synth import render
from vis_embed.prep.synth.modalities import render_special
from vis_embed.prep.synth.plan import BoxRef, Plan
from vis_embed.prep.synth.sampling import Params
from vis_embed.prep.synth.sizes import SynthSize
from vis_embed.io import atomic_directory, check_replaceable, ignore_interrupts, read_json_object

log = logging.getLogger(__name__)

# The benchmark's version: written to synth.json and benchmark.yaml (`version`), which the
# evaluation puts in every dataset's result key and result, so results of two versions are never
# mixed.  Bump when what an evaluation set measures changes.
# 2: SynthEdit's candidates no longer hold the query's own (unedited) source image.
GENERATOR_VERSION = 2
MARKER_FILE = "synth.json"


def _render_job(job: tuple[str, Params, Params | None, int]) -> tuple[str, bytes, list[list[float]]]:
    path, spec, crop, image_size = job
    if (special := render_special(spec)) is not None:  # a document page (--modalities)
        return path, special, []
    image, boxes = render.compose(spec, image_size)
    if crop is not None:
        image = render.crop_to_box(image, boxes[crop["object"]], crop["margin"], image_size)
    return path, render.png_bytes(image), boxes


def _render_all(jobs: list[tuple[str, Params, Params | None]], image_size: int, workers: int,
                show_progress: bool) -> Iterator[tuple[str, bytes, list[list[float]]]]:
    from tqdm.auto import tqdm

    tasks = [(path, spec, crop, image_size) for path, spec, crop in jobs]
    progress = dict(total=len(tasks), desc="rendering", unit="img", disable=not show_progress)
    if workers <= 1:
        yield from tqdm(map(_render_job, tasks), **progress)
        return
    # fork (like torch's DataLoader on Linux): no re-import of the caller's __main__, which
    # spawn/forkserver need (they break scripts without a main guard and stdin programs).
    # Workers only run numpy/PIL code, so threads of a parent that imported torch are harmless.
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    with context.Pool(workers, initializer=ignore_interrupts) as pool:  # Ctrl-C: the parent terminates them
        yield from tqdm(pool.imap(_render_job, tasks, chunksize=64), **progress)


def _resolve_boxes(value: Any, boxes: dict[str, list[list[float]]], image_size: int) -> Any:
    if isinstance(value, BoxRef):
        box = boxes[value.path][value.index]
        if value.margin is not None:
            box = render.crop_window(box, value.margin, image_size, image_size)
        return [round(v, 1) for v in box]
    if isinstance(value, dict):
        return {key: _resolve_boxes(item, boxes, image_size) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve_boxes(item, boxes, image_size) for item in value]
    return value


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n" for row in rows).encode()


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def check_target(out_dir: Path) -> None:
    """Refuse to replace a non-empty folder that is not a previous synth output (io's one rule)."""
    check_replaceable(out_dir, MARKER_FILE, "a synthetic benchmark folder", flag="output folder")


def is_current(out_dir: str | Path) -> bool:
    """``out_dir`` holds a finished synth output of this generator version (its ``synth.json``):
    the study drivers reuse such a folder and re-render any other, so an older benchmark is never
    evaluated under the new one's name."""
    marker = Path(out_dir) / MARKER_FILE
    try:
        return (read_json_object(marker) or {}).get("generator_version") == GENERATOR_VERSION
    except OSError:
        return False


def write_benchmark(out_dir: Path, plan: Plan, size: SynthSize, summary: dict[str, Any], workers: int,
                    show_progress: bool) -> None:
    """Render ``plan``'s images and write every file into a temporary folder that replaces
    ``out_dir`` at the end; ``summary`` (seed, size, settings) goes into ``synth.json``."""
    boxes: dict[str, list[list[float]]] = {}
    with atomic_directory(out_dir) as tmp:
        for path, data, image_boxes in _render_all(plan.jobs, size.image_size, workers, show_progress):
            _write(tmp / path, data)
            boxes[path] = image_boxes
        for path, rows in {**plan.tables, **plan.meta}.items():
            _write(tmp / path, _jsonl(_resolve_boxes(rows, boxes, size.image_size)))
        _write(tmp / "train.yaml", _yaml({"datasets": plan.train_entries}))
        _write(tmp / "benchmark.yaml", _yaml({"name": "synth", "version": GENERATOR_VERSION,
                                              "datasets": plan.manifest_entries}))
        marker = {"generator_version": GENERATOR_VERSION, **summary, "images": len(plan.jobs),
                  "tables": {path: len(rows) for path, rows in sorted(plan.tables.items())}}
        _write(tmp / MARKER_FILE, (json.dumps(marker, indent=2, sort_keys=True) + "\n").encode())


def _yaml(obj: Any) -> bytes:
    header = "# Written by `vis-embed synth`; see docs/synth.md.\n"
    return (header + yaml.safe_dump(obj, sort_keys=False, width=120, allow_unicode=True)).encode()
