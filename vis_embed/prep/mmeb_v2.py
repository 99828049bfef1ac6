"""``vis-embed prep mmeb-v2``: the 78 MMEB-V2 tasks from their released sources.

Layout (what ``eval/mmeb_v2.yaml`` points at), one folder per task, ``DIR/<modality>/<task>/``:

* ``qrels`` tasks (video retrieval and classification but SmthSmthV2, every visdoc task):
  ``queries.jsonl``, ``corpus.jsonl`` (``{"id", "text"?, "image"?, "video"?}``) and
  ``qrels.jsonl`` (``{"query_id", "corpus_id", "score"}``, graded);
* ``candidates`` tasks (image tasks, video QA, SmthSmthV2, moment retrieval): ``<task>.jsonl``,
  rows ``{"id", "query", "candidates"}`` with the positive first;
* ``media/``: the task's images, pages and frame folders (``{"video": "media/<clip>"}``: a
  folder of JPEGs), paths relative to the task folder (its image_root);
* ``manifest.json``: layout, files, row counts and the sources read at their revisions.
  ``DIR/provenance.json`` gathers every converted task's sources.

Each task is built in a staging folder that replaces ``DIR/<modality>/<task>`` only when
complete (manifest last), so a task is either complete -- and skipped by a re-run that reads
the same revisions -- or absent; leftovers of an interrupted run are removed and redone.
Tasks that share an archive (the 36 image tasks, the five of each video archive) are converted
together so that the archive is read once.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vis_embed.prep.hub import load_pinned_split, pinned_config_names, pinned_file, source_location
from vis_embed.prep.mmeb_v2_media import Target, extract_wanted
from vis_embed.prep.mmeb_v2_sources import FRAMES_REPO, MODALITIES, REVISIONS, TaskSpec, all_tasks
from vis_embed.prep.mmeb_v2_video import CONVERTERS, Planned
from vis_embed.prep.mmeb_v2_visdoc import beir_task
from vis_embed.data.tables import write_table
from vis_embed.errors import DataError
from vis_embed.io import atomic_directory, atomic_write_json, read_json_object

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"
PROVENANCE = "provenance.json"
REVISION_NOTE = ("'main' is a branch, not a content hash: the reference names no commits; pin a hash in "
                 "vis_embed/prep/mmeb_v2_sources.py REVISIONS for a reproducible conversion")


def select_tasks(modalities: Iterable[str] | None = None, tasks: Iterable[str] | None = None) -> list[TaskSpec]:
    """The tasks to convert, in the reference's order; unknown names are a DataError."""
    known = all_tasks()
    chosen_modalities = list(modalities) if modalities else list(MODALITIES)
    for modality in chosen_modalities:
        if modality not in MODALITIES:
            raise DataError(f"unknown modality {modality!r} (choose from {', '.join(MODALITIES)})",
                            field="--modality")
    names = list(tasks) if tasks else None
    for name in names or ():
        if name not in known:
            raise DataError(f"unknown MMEB-V2 task {name!r} (e.g. {', '.join(list(known)[36:39])}; see "
                            "docs/data.md)", field="--tasks")
        if known[name].modality not in chosen_modalities:
            raise DataError(f"task {name!r} is a {known[name].modality} task, outside --modality "
                            f"{','.join(chosen_modalities)}", field="--tasks")
    return [spec for name, spec in known.items()
            if spec.modality in chosen_modalities and (names is None or name in names)]


def _is_complete(task_dir: Path, spec: TaskSpec) -> bool:
    manifest = read_json_object(task_dir / MANIFEST)
    return bool(manifest) and manifest.get("complete") is True and manifest.get("sources") == spec.sources()


def _remove_leftovers(task_dir: Path) -> None:
    """Folders of an interrupted run: ``.<task>.staging`` and atomic_directory's ``.<task>.tmp-*`` / ``.old-*``."""
    if task_dir.parent.is_dir():
        for leftover in task_dir.parent.glob(f".{task_dir.name}.*"):
            shutil.rmtree(leftover, ignore_errors=True)


@dataclass(frozen=True)
class _Sources:
    """Where datasets are read from: the hub (``root`` None) or a local copy, and datasets' cache."""

    root: Path | None
    cache_dir: Path | None

    def table(self, spec: TaskSpec, config: str | None):  # -> datasets.Dataset
        return load_pinned_split(spec.repo, config, spec.split, REVISIONS[spec.repo], self.root, self.cache_dir)

    def rows(self, spec: TaskSpec) -> Iterator[dict[str, Any]]:
        """The annotation rows; config ``*`` pools every config with its name as ``subset`` (MVBench)."""
        if spec.config != "*":
            yield from self.table(spec, spec.config)
            return
        for config in pinned_config_names(spec.repo, REVISIONS[spec.repo], self.root):
            for row in self.table(spec, config):
                yield {**row, "subset": config}

    def archives(self, names: tuple[str, ...]) -> list[Path]:
        return [pinned_file(FRAMES_REPO, name, REVISIONS[FRAMES_REPO], self.root) for name in names]


def _image_plan(spec: TaskSpec, staging: Path, sources: _Sources) -> Planned:
    """An MMEB image task through today's MMEB-eval row converter, its images out of mmeb_v1.tar.gz."""
    from vis_embed.prep.mmeb import convert_mmeb_eval_rows

    table = sources.table(spec, spec.config)
    copy = staging / ".source.parquet"
    table.to_parquet(str(copy))
    try:
        rows, report = convert_mmeb_eval_rows(spec.name, [copy])
    except DataError as exc:  # name the source, not the staged copy
        where = f"{source_location(spec.repo, sources.root)} [{spec.config}]"
        raise DataError(exc.reason, path=where, line=exc.line, field=exc.field) from None
    finally:
        copy.unlink()
    wanted = set()
    for row in rows:
        for item in (row["query"], *row["candidates"]):
            if "image" in item:
                wanted.add(item["image"])
                item["image"] = f"media/{item['image']}"
    return Planned({f"{spec.name}.jsonl": rows}, wanted,
                   report={"candidates_per_query": report["candidates_per_query"]})


def _plan(spec: TaskSpec, staging: Path, sources: _Sources) -> Planned:
    where = source_location(spec.repo, sources.root)
    if spec.family == "image":
        return _image_plan(spec, staging, sources)
    if spec.family == "beir":
        files, report = beir_task(lambda config: sources.table(spec, config), staging, where)
        return Planned(files, report=report)
    return CONVERTERS[spec.family](spec, sources.rows(spec), where)


def _write_files(task_dir: Path, files: dict[str, list], where: str) -> dict[str, int]:
    for name, rows in files.items():
        if not rows:
            raise DataError(f"no rows for {name}", path=where)
        write_table(task_dir / name, rows)
    return {name: len(rows) for name, rows in files.items()}


def _manifest(spec: TaskSpec, rows: dict[str, int], report: dict[str, Any]) -> dict[str, Any]:
    layout = "qrels" if "qrels.jsonl" in rows else "candidates"
    roles = ({"queries": "queries.jsonl", "corpus": "corpus.jsonl", "qrels": "qrels.jsonl"} if layout == "qrels"
             else {"data": f"{spec.name}.jsonl"})
    return {"task": spec.name, "modality": spec.modality, "layout": layout, "files": roles, "image_root": ".",
            "rows": rows, **report, "sources": spec.sources(), "revision_note": REVISION_NOTE, "complete": True}


@dataclass
class _Staged:
    spec: TaskSpec
    folder: Path  # DIR/<modality>/.<task>.staging: built here, moved into place when complete
    planned: Planned
    rows: dict[str, int]
    target: Target


def _convert_group(specs: list[TaskSpec], out_dir: Path, sources: _Sources) -> None:
    """Tasks that share an archive: rows first (each task's files written as soon as converted),
    then one pass over the archive for all of them, then each task moved into place."""
    staged: list[_Staged] = []
    folders: list[Path] = []
    try:
        for spec in specs:
            log.info("converting %s/%s", spec.modality, spec.name)
            folder = out_dir / spec.modality / f".{spec.name}.staging"
            folders.append(folder)
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            planned = _plan(spec, folder, sources)
            rows = _write_files(folder, planned.files, source_location(spec.repo, sources.root))
            planned.files = {}  # written: free the rows before the next task
            staged.append(_Staged(spec, folder, planned, rows, Target(spec.prefix, planned.wanted, folder / "media")))
        if specs[0].archives:
            archives = sources.archives(specs[0].archives)
            extract_wanted(archives, [s.target for s in staged])
            for item in staged:
                item.target.require_all(archives)
        for item in staged:
            if item.planned.finish is not None:
                more = item.planned.finish(item.folder / "media")
                item.rows.update(_write_files(item.folder, more, source_location(item.spec.repo, sources.root)))
            with atomic_directory(out_dir / item.spec.modality / item.spec.name) as tmp:
                for entry in item.folder.iterdir():
                    entry.replace(tmp / entry.name)
                atomic_write_json(tmp / MANIFEST, _manifest(item.spec, item.rows, item.planned.report))
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def _write_provenance(out_dir: Path) -> None:
    """``DIR/provenance.json`` from the manifests of every complete task under ``DIR``."""
    tasks: dict[str, Any] = {}
    for spec in all_tasks().values():
        manifest = read_json_object(out_dir / spec.modality / spec.name / MANIFEST)
        if manifest and manifest.get("complete") is True:
            tasks[spec.name] = {"modality": spec.modality, "layout": manifest["layout"],
                                "sources": manifest["sources"]}
    repos = sorted({s["repo"] for t in tasks.values() for s in t["sources"]})
    atomic_write_json(out_dir / PROVENANCE, {"revisions": {r: REVISIONS[r] for r in repos},
                                             "revision_note": REVISION_NOTE, "tasks": tasks})


def convert_mmeb_v2(out_dir: str | Path, *, modalities: Iterable[str] | None = None,
                    tasks: Iterable[str] | None = None, source_root: str | Path | None = None) -> dict[str, Any]:
    """Convert the chosen tasks into ``out_dir``; ``source_root``: read every dataset from a local
    copy in the hub layout (``<root>/<owner>/<name>``) instead of the hub.  Returns a summary."""
    out_dir = Path(out_dir)
    converted, skipped = [], []
    groups: dict[tuple[str, ...], list[TaskSpec]] = {}
    for spec in select_tasks(modalities, tasks):
        task_dir = out_dir / spec.modality / spec.name
        if _is_complete(task_dir, spec):
            skipped.append(spec.name)
            continue
        _remove_leftovers(task_dir)
        # tasks sharing an archive are converted together (one read of it); the others one by one
        groups.setdefault(spec.archives or ("", spec.name), []).append(spec)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".datasets-cache-") as cache:
            # a local copy gets a fresh datasets cache (see load_pinned_split); the hub, the user's
            sources = _Sources(Path(source_root), Path(cache)) if source_root is not None else _Sources(None, None)
            for group in groups.values():
                _convert_group(group, out_dir, sources)
                converted.extend(spec.name for spec in group)
    finally:  # the tasks completed before an error are recorded too
        _write_provenance(out_dir)
    return {"converted": converted, "skipped_complete": skipped, "provenance": str(out_dir / PROVENANCE)}
