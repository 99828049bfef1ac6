"""Converters for the published MMEB files (VLM2Vec, TIGER-Lab/MMEB-train and MMEB-eval).

MMEB-train rows have exactly the columns ``qry, qry_image_path, pos_text, pos_image_path,
neg_text, neg_image_path``; MMEB-eval rows ``qry_text, qry_img_path, tgt_text[],
tgt_img_path[]`` (positive first).  An image is marked in the text by a ``<|image_1|>``
placeholder and its path is in the matching ``*_path`` column (empty string: no image).
We strip the placeholder (our prompt builder inserts the image itself) and keep the rest of
the text -- which holds VLM2Vec's task instruction -- as the item's text, so the
converted datasets carry no separate ``query_instruction``.

Negatives (``neg_text`` / ``neg_image_path``) are never dropped: a negative equal to the
positive of another row of the same dataset becomes that row's id in ``hard_negatives`` (the
scheduler puts it in the same batch); any other negative is kept as the row's explicit
negative candidate (``negatives: [item]``; the trainer adds it to the loss's candidates)
and counted as *unlinked* in the report.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from pathlib import Path
from typing import Any

from tqdm import tqdm

from vis_embed.prep.common import discover_sources, read_sources, relative_to, write_report, write_yaml
from vis_embed.prep.hub import resolve_inputs
from vis_embed.data.images import is_url
from vis_embed.data.items import NOT_UNICODE, is_encodable
from vis_embed.data.tables import write_table
from vis_embed.errors import DataError
from vis_embed.data.taxonomy import MMEB_DATASETS

TRAIN_COLUMNS: tuple[str, ...] = ("qry", "qry_image_path", "pos_text", "pos_image_path",
                                  "neg_text", "neg_image_path")
EVAL_COLUMNS: tuple[str, ...] = ("qry_text", "qry_img_path", "tgt_text", "tgt_img_path")
IMAGE_PLACEHOLDER = re.compile(r"<\|image_\d+\|>")


def strip_placeholder(text: str | None) -> str | None:
    """Remove ``<|image_N|>`` markers and surrounding whitespace; None if nothing is left."""
    if text is None:
        return None
    cleaned = IMAGE_PLACEHOLDER.sub("", text).strip()
    return cleaned or None


def _string_column(row: dict[str, Any], column: str, path: Path, line: int) -> str:
    if column not in row:
        return ""  # null in Parquet (nulls are dropped on read) means "no value", like ""
    value = row[column]
    if not isinstance(value, str):
        raise DataError(f"expected a string, got {type(value).__name__}", path=path, line=line, field=column)
    _check_unicode(value, column, path, line)
    return value


def _check_unicode(value: str, column: str, path: Path, line: int) -> None:
    """A lone surrogate (JSON's "\\ud800") cannot be written as UTF-8: named here, not a traceback on write."""
    if not is_encodable(value):
        raise DataError(NOT_UNICODE, path=path, line=line, field=column)


def mmeb_item(text: str, image_path: str) -> dict[str, str] | None:
    """An item from an MMEB text/path pair; None when both are empty."""
    item: dict[str, str] = {}
    if image_path.strip():
        item["image"] = image_path.strip()
    cleaned = strip_placeholder(text)
    if cleaned is not None:
        item["text"] = cleaned
    return item or None


@functools.lru_cache(maxsize=256)
def _parquet_columns(path: Path) -> frozenset[str]:
    import pyarrow.parquet as pq

    return frozenset(pq.read_schema(path).names)


def _check_columns(row: dict[str, Any], columns: tuple[str, ...], required: tuple[str, ...],
                   path: Path, line: int) -> None:
    # Parquet nulls are dropped from rows on read, so presence is checked on the file schema
    present = _parquet_columns(path) if path.suffix.lower() == ".parquet" else row.keys()
    missing = [c for c in required if c not in present]
    if missing:
        raise DataError(f"missing MMEB column(s) {', '.join(missing)} (expected {', '.join(columns)})",
                        path=path, line=line, field=missing[0])


class _ImageCounter:
    """Counts image paths that do not exist under ``image_root`` (reported, not fatal)."""

    def __init__(self, image_root: Path | None, enabled: bool) -> None:
        self.image_root, self.enabled = image_root, enabled
        self.checked: dict[str, bool] = {}

    def note(self, item: dict[str, str] | None) -> None:
        if not self.enabled or item is None or "image" not in item or is_url(item["image"]):
            return
        image = item["image"]
        if image not in self.checked:
            self.checked[image] = (self.image_root / image).is_file()  # type: ignore[operator]

    def missing(self) -> list[str]:
        return sorted(image for image, found in self.checked.items() if not found)


def convert_mmeb_train_rows(name: str, files: list[Path], image_counter: _ImageCounter | None = None
                            ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of one MMEB-train subset -> (``pairs`` rows, report)."""
    rows: list[dict[str, Any]] = []
    negatives: list[tuple[int, dict[str, str]]] = []
    stats: Counter[str] = Counter()
    for path, line, source in tqdm(read_sources(files), desc=f"mmeb-train {name}", unit=" rows",
                                   leave=False, disable=None):
        # the three *_image_path / *_text columns of the query and positive must exist
        _check_columns(source, TRAIN_COLUMNS, TRAIN_COLUMNS[:4], path, line)
        values = {c: _string_column(source, c, path, line) for c in TRAIN_COLUMNS}
        query = mmeb_item(values["qry"], values["qry_image_path"])
        positive = mmeb_item(values["pos_text"], values["pos_image_path"])
        for side, item, column in (("query", query, "qry"), ("positive", positive, "pos_text")):
            if item is None:
                raise DataError(f"empty {side}: no text and no image", path=path, line=line, field=column)
        for text_col, image_col in (("qry", "qry_image_path"), ("pos_text", "pos_image_path"),
                                    ("neg_text", "neg_image_path")):
            if IMAGE_PLACEHOLDER.search(values[text_col]) and not values[image_col].strip():
                stats["placeholder_without_image"] += 1
        row: dict[str, Any] = {"id": str(len(rows)), "query": query, "positive": positive}
        negative = mmeb_item(values["neg_text"], values["neg_image_path"])
        if negative is not None:
            negatives.append((len(rows), negative))
        if image_counter is not None:
            for item in (query, positive, negative):
                image_counter.note(item)
        rows.append(row)
    linked = _link_negatives(rows, negatives)
    report = {
        "name": name, "source_files": [str(p) for p in files], "rows": len(rows),
        "negatives": len(negatives), "negatives_linked_as_hard_negatives": linked,
        "negatives_kept_unlinked": len(negatives) - linked,
        "placeholder_without_image": stats["placeholder_without_image"],
    }
    return rows, report


def _item_key(item: dict[str, str]) -> tuple[str | None, str | None]:
    return item.get("image"), item.get("text")


def _link_negatives(rows: list[dict[str, Any]], negatives: list[tuple[int, dict[str, str]]]) -> int:
    """Turn a negative into a hard-negative id when it is another row's positive; count links."""
    first_row_with_positive: dict[tuple[str | None, str | None], str] = {}
    for row in rows:
        first_row_with_positive.setdefault(_item_key(row["positive"]), row["id"])
    linked = 0
    for position, negative in negatives:
        row = rows[position]
        target = first_row_with_positive.get(_item_key(negative))
        if target is not None and _item_key(row["positive"]) != _item_key(negative):
            row["hard_negatives"] = [target]
            linked += 1
        else:
            row["negatives"] = [negative]
    return linked


def convert_mmeb_eval_rows(name: str, files: list[Path], image_counter: _ImageCounter | None = None
                           ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of one MMEB-eval dataset -> (``candidates`` rows, report)."""
    rows: list[dict[str, Any]] = []
    candidate_counts: list[int] = []
    for path, line, source in tqdm(read_sources(files), desc=f"mmeb-eval {name}", unit=" rows",
                                   leave=False, disable=None):
        _check_columns(source, EVAL_COLUMNS, EVAL_COLUMNS, path, line)
        query = mmeb_item(_string_column(source, "qry_text", path, line),
                          _string_column(source, "qry_img_path", path, line))
        if query is None:
            raise DataError("empty query: no text and no image", path=path, line=line, field="qry_text")
        texts, images = source.get("tgt_text"), source.get("tgt_img_path")
        for column, value in (("tgt_text", texts), ("tgt_img_path", images)):
            if not isinstance(value, list) or not all(isinstance(v, str) or v is None for v in value):
                raise DataError("expected a list of strings", path=path, line=line, field=column)
            for v in value:
                _check_unicode(v or "", column, path, line)
        if len(texts) != len(images) or not texts:
            raise DataError(f"tgt_text has {len(texts)} entries but tgt_img_path {len(images)} "
                            "(need the same, non-zero length)", path=path, line=line, field="tgt_img_path")
        candidates = []
        for k, (text, image) in enumerate(zip(texts, images)):
            item = mmeb_item(text or "", image or "")
            if item is None:
                raise DataError(f"candidate {k} has no text and no image", path=path, line=line,
                                field="tgt_text")
            candidates.append(item)
        if image_counter is not None:
            for item in (query, *candidates):
                image_counter.note(item)
        rows.append({"id": str(len(rows)), "query": query, "candidates": candidates})
        candidate_counts.append(len(candidates))
    report = {"name": name, "source_files": [str(p) for p in files], "rows": len(rows),
              "candidates_per_query": {"min": min(candidate_counts, default=0),
                                       "max": max(candidate_counts, default=0)}}
    return rows, report


def _image_root_for(image_root: Path | None, files: list[Path]) -> Path:
    return Path(image_root) if image_root is not None else files[0].parent


def convert_mmeb_train(inputs: list[str | Path], out_dir: str | Path, *, image_root: str | Path | None = None,
                       split: str | None = None, file_format: str = "jsonl",
                       check_images: bool = True, hub: bool = False,
                       subsets: list[str] | None = None) -> dict[str, Any]:
    """Convert MMEB-train subsets into ``pairs`` files + ``OUT/train.yaml`` + a JSON report.

    ``image_root``: the folder the ``*_image_path`` values are relative to (default: the
    source file's folder).  An input may be a hub dataset id (``TIGER-Lab/MMEB-train``; all
    configs, or ``subsets``), read with ``datasets.load_dataset`` (:mod:`vis_embed.prep.hub`).
    Returns the report (also written to ``OUT/mmeb_train_report.json``).
    """
    out_dir = Path(out_dir)
    inputs = resolve_inputs(inputs, out_dir, split, hub, subsets, image_root)  # hub ids -> OUT/hub/
    sources = discover_sources(inputs, split)
    entries, reports = [], []
    for name, files in sources.items():
        root = _image_root_for(Path(image_root) if image_root else None, files)
        counter = _ImageCounter(root, check_images)
        rows, report = convert_mmeb_train_rows(name, files, counter)
        data_path = write_table(out_dir / f"{name}.{file_format}", rows)
        report["missing_images"] = len(counter.missing())
        report["missing_image_examples"] = counter.missing()[:5]
        reports.append(report)
        entries.append({"name": name, "kind": "pairs", "path": data_path.name,
                        "image_root": relative_to(root, out_dir)})
    write_yaml(out_dir / "train.yaml", {"datasets": entries})
    summary = {"datasets": reports, "train_config": str(out_dir / "train.yaml"),
               "rows": sum(r["rows"] for r in reports),
               "negatives_kept_unlinked": sum(r["negatives_kept_unlinked"] for r in reports),
               "missing_images": sum(r["missing_images"] for r in reports)}
    write_report(out_dir / "mmeb_train_report.json", summary)
    return summary


def convert_mmeb_eval(inputs: list[str | Path], out_dir: str | Path, *, image_root: str | Path | None = None,
                      split: str | None = None, file_format: str = "jsonl", check_images: bool = True,
                      benchmark_name: str = "mmeb", meta_task: str | None = None,
                      eval_split: str | None = None, hub: bool = False,
                      subsets: list[str] | None = None) -> dict[str, Any]:
    """Convert MMEB-eval datasets into ``candidates`` files + ``OUT/benchmark.yaml`` + a report.

    Dataset names must be MMEB's (the folder / file names of the release, e.g. ``ImageNet-1K``)
    so that their meta-task and IND/OOD split come from the 36-dataset taxonomy; a dataset
    outside it needs ``meta_task`` and ``eval_split``.  Manifest entries follow the taxonomy's order.
    An input may be a hub dataset id (``TIGER-Lab/MMEB-eval``: one config per dataset) read with
    ``datasets.load_dataset`` (:mod:`vis_embed.prep.hub`).
    """
    out_dir = Path(out_dir)
    inputs = resolve_inputs(inputs, out_dir, split, hub, subsets, image_root)  # hub ids -> OUT/hub/
    sources = discover_sources(inputs, split)
    groups: dict[str, tuple[str, str]] = {}
    for name, files in sources.items():
        if name in MMEB_DATASETS:
            groups[name] = MMEB_DATASETS[name]
        elif meta_task and eval_split:
            groups[name] = (meta_task, eval_split)
        else:
            raise DataError(f"{name!r} is not one of the 36 MMEB datasets; name the folder after one "
                            "(e.g. ImageNet-1K) or pass --meta-task and --eval-split", path=files[0])
    order = {name: position for position, name in enumerate(MMEB_DATASETS)}
    names = sorted(sources, key=lambda n: (order.get(n, len(order)), n))
    entries, reports = [], []
    for name in names:
        files = sources[name]
        root = _image_root_for(Path(image_root) if image_root else None, files)
        counter = _ImageCounter(root, check_images)
        rows, report = convert_mmeb_eval_rows(name, files, counter)
        data_path = write_table(out_dir / "eval" / f"{name}.{file_format}", rows)
        report["missing_images"] = len(counter.missing())
        report["missing_image_examples"] = counter.missing()[:5]
        reports.append(report)
        group_task, group_split = groups[name]
        entries.append({"name": name, "benchmark": "MMEB", "meta_task": group_task, "split": group_split,
                        "layout": "candidates", "path": relative_to(data_path, out_dir),
                        "image_root": relative_to(root, out_dir)})
    write_yaml(out_dir / "benchmark.yaml", {"name": benchmark_name, "datasets": entries})
    summary = {"datasets": reports, "manifest": str(out_dir / "benchmark.yaml"),
               "mmeb_datasets_absent": [n for n in MMEB_DATASETS if n not in sources],
               "missing_images": sum(r["missing_images"] for r in reports)}
    write_report(out_dir / "mmeb_eval_report.json", summary)
    return summary
