"""Several tables that share identities, split as one: ``vis-embed prep resample A B ... OUT``.

Datasets that declare one ``identity_namespace`` (the same products photographed for two
tasks) share identity keys.  Split one file at a time, an identity could be trained on in one
and evaluated in the other, and the evaluation would measure memory, not generalisation to new
identities.  Here the held-out identities are drawn **once, over the union** of the tables'
usable identities (those with an anchor and a positive in at least one table), and every table
sends exactly those to eval: identity-disjoint across all the tables.  Each table keeps its own
row checks, caps and benchmark (:func:`resample.resample_rows` with ``held_out``), written to
``OUT/<stem>/``; ``OUT/train.yaml`` lists every training split under the shared
``identity_namespace`` (so the scheduler sees one identity once per batch across them) and
``OUT/benchmark.yaml`` every eval gallery.  With fewer than ``min_identities`` identities in the
union, every table falls back to the sample-level split, as a single table would.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from vis_embed.errors import DataError
from vis_embed.prep.common import relative_to, write_report
from vis_embed.prep.resample import (REPORT_FILE, Naming, ResampleOptions, SourceTable, eval_identities,
                                     output_folder, read_source, split_groups, split_source, write_configs,
                                     write_split)


def _check_stems(sources: Sequence[Path]) -> list[str]:
    """Each source's stem names its dataset and its output folder, so two may not share one."""
    stems = [source.stem for source in sources]
    for k, stem in enumerate(stems):
        if stem in stems[:k]:
            raise DataError(f"two sources have the stem {stem!r} (it names the dataset and the output folder "
                            f"OUT/{stem}/): rename one", path=sources[k])
    return stems


def _held_out(tables: Sequence[SourceTable], options: ResampleOptions) -> tuple[frozenset[str] | None, int]:
    """The eval identities drawn over the union of the tables' usable groups (None: too few for an
    identity split, each table falls back), and the union's size."""
    union: set[str] = set()
    for table in tables:
        union |= set(split_groups(table.rows, path=table.source, lines=table.lines,
                                  image_root=table.image_folder).eligible)
    if options.eval_fraction > 0 and len(union) < options.min_identities:
        return None, len(union)
    return eval_identities(union, options, random.Random(options.seed)), len(union)


def resample_files(sources: Sequence[str | Path], out_dir: str | Path, options: ResampleOptions | None = None,
                   file_format: str | None = None, *, image_root: str | Path | None = None, name: str | None = None,
                   meta_task: str = "ID-Rec", identity_namespace: str | None = None) -> dict[str, Any]:
    """Split ``sources`` over their shared identities into ``OUT/<stem>/`` (each as
    :func:`resample.resample_file` lays out one source) with one ``OUT/train.yaml``, one
    ``OUT/benchmark.yaml`` (named ``name``) and one ``OUT/resample_report.json`` (a report per
    source under ``sources``).  ``identity_namespace`` (default ``name``, else the stems joined
    by ``+``) is written on every training dataset.  Every table is read and split before ``OUT``
    is touched; the outputs replace ``OUT`` as one set."""
    options = options or ResampleOptions()
    paths = [Path(source) for source in sources]
    stems, out_dir = _check_stems(paths), Path(out_dir)
    namespace = identity_namespace or name or "+".join(stems)
    tables = [read_source(path, image_root) for path in paths]
    held_out, n_union = _held_out(tables, options)
    splits = [(table, *split_source(table, options, held_out)) for table in tables]
    summary = _summary(splits, stems, options, namespace, n_union)
    with output_folder(out_dir, (*paths, *(t.image_folder for t in tables))) as staging:
        train_entries, benchmark_entries = [], []
        for stem, (table, train_rows, eval_rows, report) in zip(stems, splits):
            naming = Naming(stem, f".{file_format}" if file_format else table.source.suffix,
                            relative_to(table.image_folder, out_dir), meta_task, table.image_folder, namespace)
            train_entry, benchmark_entry = write_split(staging, out_dir, f"{stem}/", train_rows, eval_rows,
                                                       report, naming)
            train_entries.append(train_entry)
            benchmark_entries += [benchmark_entry] if benchmark_entry else []
        write_configs(staging, name or namespace, train_entries, benchmark_entries)
        write_report(staging / REPORT_FILE, summary)
    return summary


def _identities(rows: list[dict[str, Any]]) -> set[str]:
    return {row["identity"] for row in rows if row.get("identity") is not None}


def _summary(splits: list[tuple[SourceTable, list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]],
             stems: list[str], options: ResampleOptions, namespace: str, n_union: int) -> dict[str, Any]:
    """The combined report: totals over the tables, the check this module exists for (no identity
    trained on in one table and held out in another), and each table's own report."""
    trained = set().union(*(_identities(train_rows) for _, train_rows, _, _ in splits))
    held = set().union(*(_identities(eval_rows) for _, _, eval_rows, _ in splits))
    reports = {stem: report for stem, (_, _, _, report) in zip(stems, splits)}
    fallbacks = [report["fallback_reason"] for report in reports.values() if report["fallback_reason"]]
    shared = sorted(trained & held)
    if not fallbacks and shared:
        raise AssertionError(f"identity split leaked identities across sources: {shared[:5]}")
    return {
        "kind": "sources",
        "options": asdict(options),
        "identity_namespace": namespace,
        "split_mode": "sample" if fallbacks else "identity",
        "fallback_reason": (f"only {n_union} usable identities across the {len(stems)} sources (< min_identities="
                            f"{options.min_identities}): each fell back to a sample-level split, so train and eval "
                            "SHARE identities") if fallbacks else None,
        "input": {"rows": sum(len(t.rows) for t, _, _, _ in splits), "usable_identities": n_union},
        "dropped_single_instance_identities": sum(r["dropped_single_instance_identities"] for r in reports.values()),
        "train": {"rows": sum(len(rows) for _, rows, _, _ in splits), "identities": len(trained)},
        "eval": {"rows": sum(len(rows) for _, _, rows, _ in splits), "identities": len(held)},
        "identities_in_both_splits": len(shared),
        "sources": reports,
    }
