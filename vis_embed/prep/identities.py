"""Converters for user identity collections -> ``identity`` rows.

Two inputs:

* a folder of identities, ``ROOT/<identity>/...image files...`` (images may sit in
  sub-folders of the identity folder; files directly under ROOT are skipped and counted);
* a CSV with a header and at least the columns ``path`` and ``identity`` (optional:
  ``id``, ``text``, ``bbox`` as ``"x0,y0,x1,y1"`` or a JSON list).

Image paths are written relative to the output file's folder (absolute when that is not
possible), so the default ``image_root`` of a data config entry finds them.  Rows are in
a deterministic order (sorted paths for folders, file order for CSVs).
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from vis_embed.prep.common import relative_to, write_report
from vis_embed.data.images import is_url
from vis_embed.data.items import check_bbox, is_encodable
from vis_embed.data.records import RowContext
from vis_embed.data.tables import write_table
from vis_embed.errors import DataError
from vis_embed.io import read_text

IMAGE_EXTENSIONS: frozenset[str] = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif",
                                               ".tif", ".tiff"})


def _summary(rows: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    counts = Counter(row["identity"] for row in rows)
    return {"rows": len(rows), "identities": len(counts),
            "single_instance_identities": sum(1 for c in counts.values() if c == 1),
            "max_images_per_identity": max(counts.values(), default=0), **extra}


def identity_folder_rows(root: str | Path, out_dir: str | Path,
                         extensions: frozenset[str] = IMAGE_EXTENSIONS) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows for ``root/<identity>/**/<image>``; ids are the paths relative to ``root``."""
    root, out_dir = Path(root), Path(out_dir)
    if not root.is_dir():
        raise DataError("identity folder not found", path=root)
    rows: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    for path in _walk_files(root, skipped):
        if not path.is_file():
            continue
        relative = path.relative_to(root)
        if not is_encodable(relative.as_posix()):  # the name's bytes are not UTF-8: no JSON string holds it
            skipped["name_not_utf8"] += 1
        elif path.suffix.lower() not in extensions:
            skipped["not_an_image"] += 1
        elif len(relative.parts) < 2:
            skipped["outside_identity_folders"] += 1
        elif any(part.startswith(".") for part in relative.parts):
            skipped["hidden"] += 1
        else:
            rows.append({"id": relative.as_posix(), "image": relative_to(path, out_dir),
                         "identity": relative.parts[0]})
    if not rows:
        raise DataError(f"no images found in identity sub-folders (extensions: {', '.join(sorted(extensions))})",
                        path=root)
    return rows, _summary(rows, source=str(root), skipped=dict(skipped))


def _walk_files(root: Path, skipped: Counter[str]) -> list[Path]:
    """Every file under ``root``, sorted.  Folder symlinks are followed (an identity folder may be
    one), each real folder visited once: a symlink loop or a second link to a folder already
    walked ends there (counted ``folder_seen_before``), so the walk is bounded."""
    seen: set[tuple[int, int]] = set()
    files: list[Path] = []
    for folder, subfolders, names in os.walk(root, followlinks=True):
        status = os.stat(folder)
        if (status.st_dev, status.st_ino) in seen:
            skipped["folder_seen_before"] += 1
            subfolders.clear()
            continue
        seen.add((status.st_dev, status.st_ino))
        files.extend(Path(folder, name) for name in names)
    return sorted(files)


def _parse_bbox(value: str, ctx: RowContext) -> list[float]:
    text = value.strip()
    try:
        parsed = json.loads(text) if text.startswith("[") else [float(v) for v in text.split(",")]
    except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested past json's limit
        raise ctx.error("bbox", f"cannot parse {value!r:.80}; use x0,y0,x1,y1") from None
    return check_bbox(parsed, "bbox", path=ctx.path, line=ctx.line)


def identity_csv_rows(csv_path: str | Path, out_dir: str | Path, image_root: str | Path | None = None
                      ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows from a CSV with columns ``path, identity`` (+ optional ``id, text, bbox``).

    ``path`` values are relative to ``image_root`` (default: the CSV's folder).
    """
    csv_path, out_dir = Path(csv_path), Path(out_dir)
    image_root = Path(image_root) if image_root is not None else csv_path.parent
    if not csv_path.is_file():
        raise DataError("file not found", path=csv_path)
    rows: list[dict[str, Any]] = []
    # read_text: a BOM dropped, bytes that are not UTF-8 a DataError naming the line
    reader = csv.DictReader(io.StringIO(read_text(csv_path), newline=""))
    try:
        header = reader.fieldnames or []
        for column in ("path", "identity"):
            if column not in header:
                raise DataError(f"missing CSV column (header: {', '.join(header) or 'empty'})",
                                path=csv_path, line=1, field=column)
        for record in reader:
            ctx = RowContext(csv_path, reader.line_num)
            rows.append(_csv_row(record, ctx, image_root, out_dir, position=len(rows)))
    except csv.Error as exc:  # e.g. a field over the csv module's limit (131072 characters)
        raise DataError(f"malformed CSV ({exc})", path=csv_path, line=reader.reader.line_num) from None
    if not rows:
        raise DataError("CSV has no rows", path=csv_path)
    return rows, _summary(rows, source=str(csv_path))


def _csv_row(record: dict[str, str | None], ctx: RowContext, image_root: Path, out_dir: Path,
             position: int) -> dict[str, Any]:
    if None in record:  # csv.DictReader files surplus values under the key None
        raise ctx.error(None, "more values than header columns (quote values that contain commas)")
    values = {key: (value or "").strip() for key, value in record.items()}
    for column in ("path", "identity"):
        if not values.get(column):
            raise ctx.error(column, "empty value")
    image = values["path"]
    if not is_url(image):
        image = relative_to(image_root / image, out_dir)
    row: dict[str, Any] = {"id": values.get("id") or str(position), "image": image,
                           "identity": values["identity"]}
    if values.get("text"):
        row["text"] = values["text"]
    if values.get("bbox"):
        row["bbox"] = _parse_bbox(values["bbox"], ctx)
    return row


def _write(rows: list[dict[str, Any]], report: dict[str, Any], out_path: Path) -> dict[str, Any]:
    write_table(out_path, rows)
    report["output"] = str(out_path)
    write_report(out_path.with_name(out_path.stem + "_report.json"), report)
    return report


def convert_identity_folder(root: str | Path, out_path: str | Path, **kwargs: Any) -> dict[str, Any]:
    """Write ``identity`` rows for a folder of identities to ``out_path``; returns the report."""
    out_path = Path(out_path)
    rows, report = identity_folder_rows(root, out_path.parent, **kwargs)
    return _write(rows, report, out_path)


def convert_identity_csv(csv_path: str | Path, out_path: str | Path,
                         image_root: str | Path | None = None) -> dict[str, Any]:
    """Write ``identity`` rows for a (path, identity) CSV to ``out_path``; returns the report."""
    out_path = Path(out_path)
    rows, report = identity_csv_rows(csv_path, out_path.parent, image_root)
    return _write(rows, report, out_path)
