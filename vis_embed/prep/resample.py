"""Identity-aware re-sampling and train/eval splitting of ``identity`` (or ``pairs``) rows.

Order of operations (all random choices from one ``random.Random(seed)`` over sorted
identity names, so the output depends only on the rows and the seed):

1. group rows by identity; a ``pairs`` row without identity is grouped by its loss label
   (its positive, as training labels it: ``TrainDataset.label_key``), so rows whose
   positive is the same class label never land on both sides;
2. ``identity`` rows: drop identities with a single instance -- an anchor needs another
   row of its identity as positive, and an eval query needs a second instance to find;
3. split: **identity-disjoint** (``eval_fraction`` of the identities go to eval) when at
   least ``min_identities`` identities remain; otherwise fall back to a **sample-level**
   split (each identity keeps >= 2 rows on each side it appears on, so identities are
   shared) and say so in the report;
4. cap the training split: at most ``max_identities`` identities and
   ``max_images_per_identity`` rows per identity (the paper: 7.5K x <= 4 from GLDv2);
   ``max_eval_identities`` caps the eval split;
5. hard negatives pointing to a row not in the same output file are removed (counted).

Rows keep their input order in the outputs.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vis_embed.data.eval_rows import unique_id
from vis_embed.data.items import check_item
from vis_embed.data.records import RowContext, require_str
from vis_embed.data.tables import read_table, write_table
from vis_embed.data.train import TrainDataset
from vis_embed.prep.common import relative_to, write_report, write_yaml
from vis_embed.errors import DataError
from vis_embed.io import atomic_directory
from vis_embed.prep.resample_benchmark import GALLERY_STEM, QUERIES_STEM, gallery_benchmark

REPORT_FILE = "resample_report.json"  # also the marker of an output folder this command may replace


@dataclass(frozen=True)
class ResampleOptions:
    eval_fraction: float = 0.1
    max_identities: int | None = None
    max_images_per_identity: int | None = None
    max_eval_identities: int | None = None
    min_identities: int = 10
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.eval_fraction < 1:
            raise DataError(f"eval_fraction must be in [0, 1), got {self.eval_fraction}", field="eval_fraction")
        for name in ("max_identities", "max_images_per_identity", "max_eval_identities"):
            value = getattr(self, name)
            if value is not None and value < (2 if name == "max_images_per_identity" else 1):
                raise DataError(f"{name} is too small ({value})", field=name)


def _split_keys(rows: list[dict[str, Any]], kind: str, path: str | Path | None,
                lines: Iterable[int], image_root: str | Path | None) -> list[str]:
    """Each row's group (its identity, or a pairs row's loss label), after checking the fields the
    split relies on: DataErrors name the file, the row's real line (blank lines count) and the
    field, never a TypeError."""
    # training's own labelling (TrainDataset.label_key): rows whose positives are the same item
    # ("tench") are one class to the loss, so a split must keep them on one side too
    labeller = TrainDataset(name="resample", kind="pairs", path=Path(path or "."),
                            image_root=Path(image_root or "."))
    seen: dict[str, int] = {}
    keys = []
    for row, line in zip(rows, lines):
        ctx = RowContext(path or "<rows>", line)
        unique_id(row, ctx, seen)  # a duplicate would be written out twice, silently
        identity = require_str(row, "identity", ctx, optional=kind == "pairs")
        if kind == "identity" and row.get("video") is None:
            require_str(row, "image", ctx)  # the benchmark compares instances by their file
        if kind == "pairs":
            for side in ("query", "positive"):
                if side not in row:
                    raise ctx.error(side, "missing required field")
                check_item(row[side], side, path=ctx.path, line=line)
        # \x00: no identity string collides with a label
        keys.append("\x00label:" + repr(labeller.label_key(row)) if identity is None else identity)
    return keys


def _detect_kind(rows: list[dict[str, Any]]) -> str:
    return "pairs" if rows and "query" in rows[0] else "identity"


def eval_identities(names: Iterable[str], options: ResampleOptions, rng: random.Random) -> frozenset[str]:
    """The identities held out: ``eval_fraction`` of ``names`` (at least one), drawn by ``rng``."""
    shuffled = sorted(names)
    rng.shuffle(shuffled)
    n_eval = max(1, round(options.eval_fraction * len(shuffled))) if options.eval_fraction > 0 else 0
    return frozenset(shuffled[:n_eval])


def _identity_split(groups: dict[str, list[int]], held_out: frozenset[str]
                    ) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    return ({n: m for n, m in groups.items() if n not in held_out},
            {n: m for n, m in groups.items() if n in held_out})


def _sample_split(groups: dict[str, list[int]], options: ResampleOptions, rng: random.Random,
                  min_rows: int) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    train: dict[str, list[int]] = {}
    evaluation: dict[str, list[int]] = {}
    for name in sorted(groups):
        positions = list(groups[name])
        rng.shuffle(positions)
        n_eval = max(min_rows, round(options.eval_fraction * len(positions))) if options.eval_fraction > 0 else 0
        if n_eval and len(positions) - n_eval >= min_rows:
            evaluation[name] = positions[:n_eval]
            train[name] = positions[n_eval:]
        else:
            train[name] = positions
    return train, evaluation


def _cap(groups: dict[str, list[int]], max_groups: int | None, max_rows: int | None,
         rng: random.Random) -> tuple[dict[str, list[int]], int]:
    """Keep at most ``max_groups`` groups and ``max_rows`` rows per group; return dropped-row count."""
    before = sum(len(v) for v in groups.values())
    names = sorted(groups)
    if max_groups is not None and len(names) > max_groups:
        names = sorted(rng.sample(names, max_groups))
    capped = {}
    for name in names:
        positions = sorted(groups[name])
        if max_rows is not None and len(positions) > max_rows:
            positions = sorted(rng.sample(positions, max_rows))
        capped[name] = positions
    return capped, before - sum(len(v) for v in capped.values())


def _materialise(rows: list[dict[str, Any]], groups: dict[str, list[int]]) -> tuple[list[dict[str, Any]], int]:
    """Rows of ``groups`` in input order, with hard negatives restricted to this output."""
    positions = sorted(p for members in groups.values() for p in members)
    kept_ids = {rows[p]["id"] for p in positions}
    removed = 0
    out = []
    for p in positions:
        row = dict(rows[p])
        if "hard_negatives" in row:
            negatives = [n for n in row["hard_negatives"] if n in kept_ids]
            removed += len(row["hard_negatives"]) - len(negatives)
            if negatives:
                row["hard_negatives"] = negatives
            else:
                del row["hard_negatives"]
        out.append(row)
    return out, removed


def _side_summary(rows: list[dict[str, Any]], groups: dict[str, list[int]]) -> dict[str, int]:
    return {"rows": len(rows), "identities": len(groups)}


@dataclass(frozen=True)
class SplitGroups:
    """A table's rows grouped for the split (identity, or a pairs row's loss label)."""
    kind: str
    groups: dict[str, list[int]]   # group -> row positions
    min_rows: int                  # rows a group needs to be used (identity: 2, an anchor and its positive)

    @property
    def eligible(self) -> dict[str, list[int]]:
        return {name: members for name, members in self.groups.items() if len(members) >= self.min_rows}


def split_groups(rows: list[dict[str, Any]], *, path: str | Path | None = None, lines: Iterable[int] | None = None,
                 image_root: str | Path | None = None) -> SplitGroups:
    """Check ``rows`` (errors name ``path`` and the real line) and group them for the split."""
    kind = _detect_kind(rows)
    groups: dict[str, list[int]] = defaultdict(list)
    for position, key in enumerate(_split_keys(rows, kind, path, lines or range(1, len(rows) + 1), image_root)):
        groups[key].append(position)
    return SplitGroups(kind, dict(groups), 2 if kind == "identity" else 1)


def resample_rows(rows: list[dict[str, Any]], options: ResampleOptions = ResampleOptions(), *,
                  path: str | Path | None = None, lines: list[int] | None = None,
                  image_root: str | Path | None = None, held_out: frozenset[str] | None = None
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Return ``(train_rows, eval_rows, report)``; see the module docstring for the rules.
    ``path`` and ``lines`` (default: 1, 2, ...) are where the rows came from, for errors;
    ``image_root`` resolves the positives' images that label rows without identity.
    ``held_out``: the eval identities, decided over several tables that share identities
    (:mod:`vis_embed.prep.resample_sources`); an identity split then, whatever the count."""
    grouped = split_groups(rows, path=path, lines=lines, image_root=image_root)
    kind, groups, min_rows = grouped.kind, grouped.groups, grouped.min_rows
    rng = random.Random(options.seed)
    singles = [name for name, members in groups.items() if len(members) < min_rows]
    eligible = grouped.eligible

    fallback_reason = None
    if held_out is None and options.eval_fraction > 0 and len(eligible) < options.min_identities:
        fallback_reason = (f"only {len(eligible)} identities with >= {min_rows} instances (< min_identities="
                           f"{options.min_identities}): fell back to a sample-level split, so train and eval "
                           "SHARE identities and eval measures generalisation to new images of known "
                           "identities, not to new identities")
        train_groups, eval_groups = _sample_split(eligible, options, rng, min_rows)
    else:
        train_groups, eval_groups = _identity_split(
            eligible, eval_identities(eligible, options, rng) if held_out is None else held_out)
    train_groups, capped_train_rows = _cap(train_groups, options.max_identities,
                                           options.max_images_per_identity, rng)
    eval_groups, capped_eval_rows = _cap(eval_groups, options.max_eval_identities, None, rng)
    train_rows, removed_train = _materialise(rows, train_groups)
    eval_rows, removed_eval = _materialise(rows, eval_groups)

    shared = sorted(set(train_groups) & set(eval_groups))
    report = {
        "kind": kind,
        "options": asdict(options),
        "split_mode": "sample" if fallback_reason else "identity",
        "fallback_reason": fallback_reason,
        "input": {"rows": len(rows), "identities": len(groups)},
        "dropped_single_instance_identities": len(singles) if kind == "identity" else 0,
        "dropped_single_instance_rows": len(singles) if kind == "identity" else 0,
        "capped_rows": {"train": capped_train_rows, "eval": capped_eval_rows},
        "hard_negative_refs_removed": removed_train + removed_eval,
        "train": _side_summary(train_rows, train_groups),
        "eval": _side_summary(eval_rows, eval_groups),
        "identities_in_both_splits": len(shared),
    }
    if fallback_reason is None and shared:  # the invariant this module exists for
        raise AssertionError(f"identity split leaked identities: {shared[:5]}")
    return train_rows, eval_rows, report


def resample_file(source: str | Path, out_dir: str | Path, options: ResampleOptions = ResampleOptions(),
                  file_format: str | None = None, *, image_root: str | Path | None = None,
                  name: str | None = None, meta_task: str = "ID-Rec",
                  identity_namespace: str | None = None) -> dict[str, Any]:
    """Split ``source`` into ``OUT/train.<fmt>`` and ``OUT/eval.<fmt>`` and write

    * ``OUT/train.yaml``: a data config with the training split (dataset ``name``, default
      the source's stem; kind from the rows);
    * ``OUT/benchmark.yaml`` with ``OUT/eval_queries.<fmt>`` and ``OUT/eval_gallery.<fmt>``
      (identity rows with an eval split; see :mod:`vis_embed.prep.resample_benchmark`): a
      ``gallery`` dataset, benchmark ``other``, meta-task ``meta_task``, split ``IND`` (its
      training split is trained on);
    * ``OUT/resample_report.json``.

    The files are one set: written into a staging folder that replaces ``OUT`` whole, so a
    rerun never leaves an earlier run's eval files beside this one's.  ``OUT`` must be new,
    empty or an earlier output (it holds ``resample_report.json``).  Image paths in the rows
    are copied unchanged; both YAMLs set ``image_root`` to ``image_root`` (default: the
    source's folder, the source's own default); ``identity_namespace``, when given, is written
    into ``train.yaml``.  Several sources that share identities: :mod:`.resample_sources`.
    """
    out_dir = Path(out_dir)
    table = read_source(source, image_root)
    train_rows, eval_rows, report = split_source(table, options)
    source, image_folder = table.source, table.image_folder
    with output_folder(out_dir, (source, image_folder)) as staging:
        naming = Naming(name or source.stem, f".{file_format}" if file_format else source.suffix,
                        relative_to(image_folder, out_dir), meta_task, image_folder, identity_namespace)
        train_entry, benchmark_entry = write_split(staging, out_dir, "", train_rows, eval_rows, report, naming)
        write_configs(staging, naming.name, [train_entry], [benchmark_entry] if benchmark_entry else [])
        write_report(staging / REPORT_FILE, report)
    return report


@dataclass(frozen=True)
class SourceTable:
    """One source file's rows, their real line numbers, and the folder its image paths are under."""
    source: Path
    rows: list[dict[str, Any]]
    lines: list[int]
    image_folder: Path


def read_source(source: str | Path, image_root: str | Path | None) -> SourceTable:
    """``source``'s rows; ``image_root`` default: the source's folder."""
    source = Path(source)
    numbered = list(read_table(source))
    return SourceTable(source, [row for _, row in numbered], [line for line, _ in numbered],
                       Path(image_root) if image_root is not None else source.parent)


def split_source(table: SourceTable, options: ResampleOptions, held_out: frozenset[str] | None = None
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """:func:`resample_rows` of one source, its report naming it; a DataError when no training row is left."""
    train_rows, eval_rows, report = resample_rows(table.rows, options, path=table.source, lines=table.lines,
                                                  image_root=table.image_folder, held_out=held_out)
    if not train_rows:
        raise DataError("no training rows left after re-sampling", path=table.source)
    return train_rows, eval_rows, {**report, "source": str(table.source)}


def output_folder(out_dir: Path, inputs: tuple[Path, ...]) -> AbstractContextManager[Path]:
    """The staging folder that replaces ``out_dir`` whole (new, empty or an earlier output: it
    holds :data:`REPORT_FILE`; never one holding ``inputs``)."""
    return atomic_directory(out_dir, marker=REPORT_FILE, what="a `prep resample` output folder", inputs=inputs,
                            flag="OUT_DIR")


@dataclass(frozen=True)
class Naming:
    """How one source's outputs are named: its dataset name, the tables' suffix, where its images are."""
    name: str
    suffix: str
    root: str          # image_root as written in the YAMLs (relative to OUT)
    meta_task: str
    image_folder: Path
    identity_namespace: str | None = None


def write_split(staging: Path, out_dir: Path, folder: str, train_rows: list[dict[str, Any]],
                eval_rows: list[dict[str, Any]], report: dict[str, Any], naming: Naming
                ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One source's tables into ``staging/folder`` (``""`` or ``"name/"``); the report names the
    paths they will have in ``out_dir``.  Returns its training-config dataset entry and its
    benchmark dataset entry (None without one), paths relative to ``out_dir``."""
    suffix = naming.suffix
    write_table(staging / f"{folder}train{suffix}", train_rows)
    report["train"]["path"] = str(out_dir / f"{folder}train{suffix}")
    train_entry = {"name": naming.name, "kind": report["kind"], "path": f"{folder}train{suffix}",
                   "image_root": naming.root}
    if naming.identity_namespace is not None:
        train_entry["identity_namespace"] = naming.identity_namespace
    if eval_rows:
        write_table(staging / f"{folder}eval{suffix}", eval_rows)
        report["eval"]["path"] = str(out_dir / f"{folder}eval{suffix}")
    queries, gallery, report["benchmark"] = gallery_benchmark(eval_rows, report["kind"], naming.image_folder)
    if not queries:
        return train_entry, None
    write_table(staging / f"{folder}{QUERIES_STEM}{suffix}", queries)
    write_table(staging / f"{folder}{GALLERY_STEM}{suffix}", gallery)
    return train_entry, {"name": naming.name, "benchmark": "other", "meta_task": naming.meta_task, "split": "IND",
                         "layout": "gallery", "queries": f"{folder}{QUERIES_STEM}{suffix}",
                         "gallery": f"{folder}{GALLERY_STEM}{suffix}", "image_root": naming.root}


def write_configs(staging: Path, name: str, train_entries: list[dict[str, Any]],
                  benchmark_entries: list[dict[str, Any]]) -> None:
    """``train.yaml`` (a data config of the training splits) and, with eval galleries,
    ``benchmark.yaml`` (benchmark ``name``)."""
    write_yaml(staging / "train.yaml", {"datasets": train_entries})
    if benchmark_entries:
        write_yaml(staging / "benchmark.yaml", {"name": name, "datasets": benchmark_entries})
