"""Evaluation data: the benchmark manifest YAML and the ``candidates`` / ``gallery`` layouts.

``load_benchmark`` validates the manifest (the pydantic schema in
:mod:`vis_embed.data.manifest`: keys, vocabularies, that files exist) without reading the data
files; ``EvalDatasetSpec.load_candidates()`` / ``.load_gallery()`` read and validate the rows
of the two layouts this package owns. The peer-protocol layouts (2afc, nearid, pair_ap,
asym_recall, human_corr) are parsed by vis_embed.evaluation; their extra manifest keys are kept
in ``EvalDatasetSpec.options``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vis_embed.config import validate_document
from vis_embed.data.eval_options import DatasetOptions
from vis_embed.data.images import resolve_image
from vis_embed.data.items import ITEM_KEYS, Item, ResolvedItem, check_item
from vis_embed.data.manifest import LAYOUTS  # noqa: F401  (re-exported with the spec it describes)
from vis_embed.data.manifest import FILE_ROLES, Manifest, ManifestEntry, files_of_layout
from vis_embed.data.records import ImageChecker, RowContext, require_str
from vis_embed.data.tables import read_table
from vis_embed.data.video import resolve_video
from vis_embed.data.yaml_lines import load_yaml_with_lines
from vis_embed.errors import DataError
from vis_embed.io import fingerprint_files, fingerprint_json


@dataclass(frozen=True)
class CandidateQuery:
    """One query of a ``candidates`` dataset; ``candidates[0]`` is the positive."""

    id: str
    query: Item
    candidates: list[Item]
    line: int


@dataclass(frozen=True)
class GalleryRow:
    id: str
    image: str | None    # absolute path or URL; None for a video row
    identity: str
    text: str | None
    line: int
    video: str | tuple[str, ...] | None = None  # resolved (data/video.resolve_video)

    def item(self) -> Item:
        if self.video is not None:
            return {"video": list(self.video) if isinstance(self.video, tuple) else self.video, "text": self.text}
        return {"image": self.image, "text": self.text}

    def visual(self) -> str | tuple[str, ...] | None:
        """The row's resolved image or video (what "the same file as the query" compares)."""
        return self.image if self.video is None else self.video


@dataclass(frozen=True)
class GalleryData:
    """Queries and gallery of a ``gallery`` dataset (the two files may be the same file)."""

    queries: list[GalleryRow]
    gallery: list[GalleryRow]

    def excluded(self) -> list[list[int]]:
        """For each query, the gallery positions to skip: same id or same resolved image (or video)."""
        by_id: dict[str, list[int]] = defaultdict(list)
        by_image: dict[Any, list[int]] = defaultdict(list)
        for position, row in enumerate(self.gallery):
            by_id[row.id].append(position)
            by_image[row.visual()].append(position)
        return [sorted(set(by_id.get(q.id, ())) | set(by_image.get(q.visual(), ())))
                for q in self.queries]


@dataclass(frozen=True)
class EvalDatasetSpec:
    """One evaluation dataset: a manifest entry (paths resolved to absolute ones), or one
    built in code (``manifest_path``/``line`` then None).  The evaluation layouts read it."""

    name: str
    layout: str
    meta_task: str
    split: str | None = None
    benchmark: str | None = None
    path: Path | None = None
    queries: Path | None = None
    gallery: Path | None = None
    image_root: Path | None = None
    query_instruction: str | None = None
    candidate_instruction: str | None = None
    options: DatasetOptions = field(default_factory=DatasetOptions)  # a dict is validated into one
    manifest_path: Path | None = None
    line: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "options",
                           DatasetOptions.from_values(self.options, self.name, self.manifest_path, self.line))

    @property
    def files(self) -> dict[str, Path]:
        """The data files this dataset names, by role."""
        return {role: Path(getattr(self, role)) for role in FILE_ROLES if getattr(self, role) is not None}

    def file(self, role: str) -> Path:
        """The data file in ``role`` (``path`` | ``queries`` | ``gallery``) of this layout."""
        value = getattr(self, role) if role in FILE_ROLES else None
        if value is None:
            raise DataError(f"dataset {self.name!r} (layout {self.layout}) needs '{role}'",
                            path=self.manifest_path, line=self.line, field=role)
        return Path(value)

    def root_for(self, role: str) -> Path:
        """Folder relative image paths of ``role``'s file are resolved against."""
        return Path(self.image_root) if self.image_root is not None else self.file(role).parent

    def load_candidates(self, *, check_images: bool = True) -> list[CandidateQuery]:
        if self.layout != "candidates":
            raise DataError(f"dataset {self.name!r} has layout {self.layout!r}, not 'candidates'",
                            path=self.manifest_path, line=self.line, field="layout")
        return load_candidates(self.path, self.image_root, check_images=check_images)

    def load_gallery(self, *, check_images: bool = True) -> GalleryData:
        if self.layout != "gallery":
            raise DataError(f"dataset {self.name!r} has layout {self.layout!r}, not 'gallery'",
                            path=self.manifest_path, line=self.line, field="layout")
        return load_gallery(self.queries, self.gallery, self.image_root, check_images=check_images)


@dataclass(frozen=True)
class Benchmark:
    name: str
    path: Path
    datasets: list[EvalDatasetSpec]
    description: str | None = None

    def fingerprint(self) -> str:
        """SHA-256 over the manifest and every data file it names (not image files)."""
        files = [self.path]
        for spec in self.datasets:
            for data_path in (spec.path, spec.queries, spec.gallery):
                if data_path is not None:
                    files.extend(sorted(p for p in data_path.rglob("*") if p.is_file())
                                 if data_path.is_dir() else [data_path])
        return fingerprint_json([fingerprint_files([f]) for f in files])

    def dataset(self, name: str) -> EvalDatasetSpec:
        for spec in self.datasets:
            if spec.name == name:
                return spec
        raise KeyError(f"no dataset named {name!r} in {self.path}")


# ---------------------------------------------------------------------------------------------
# Manifest


def load_benchmark(manifest_path: str | Path) -> Benchmark:
    """Read and validate a benchmark manifest; raises ``DataError`` naming file, line and key."""
    manifest_path = Path(manifest_path).resolve()
    document = load_yaml_with_lines(manifest_path)
    manifest = validate_document(Manifest, document, manifest_path, context={"base": manifest_path.parent})
    specs = [_spec(entry, manifest_path, line=getattr(raw, "line", None))
             for entry, raw in zip(manifest.datasets, document["datasets"])]
    description = manifest.description
    return Benchmark(name=manifest.name, path=manifest_path, datasets=specs,
                     description=None if description is None else str(description))


def _spec(entry: ManifestEntry, manifest_path: Path, line: int | None) -> EvalDatasetSpec:
    """The dataset spec of a validated manifest entry, its files resolved against the manifest's folder."""
    base = manifest_path.parent
    files = {key: entry.resolved(base, key) for key in files_of_layout(entry.layout)}
    image_root = entry.resolved(base, "image_root") if entry.image_root is not None \
        else next(iter(files.values())).parent
    return EvalDatasetSpec(
        name=entry.name, benchmark=entry.inferred_benchmark, meta_task=entry.meta_task, split=entry.split,
        layout=entry.layout, manifest_path=manifest_path, line=line, image_root=image_root,
        query_instruction=entry.query_instruction, candidate_instruction=entry.candidate_instruction,
        options=entry.all_options, **files,
    )


# ---------------------------------------------------------------------------------------------
# Rows of the two layouts


def _resolved_item(raw: Any, image_root: Path, field_name: str, ctx: RowContext,
                   checker: ImageChecker, shared: dict[ResolvedItem, Item] | None = None) -> Item:
    """The validated item with its image resolved; equal items share one dict via ``shared``
    (keyed on the item as written: a repeat skips validation and resolution)."""
    if shared is not None and isinstance(raw, dict):
        try:
            known = shared.get(ResolvedItem.unchecked(raw))
        except TypeError:  # an unhashable (hence invalid) value: check_item names it below
            known = None
        if known is not None and raw.keys() <= set(ITEM_KEYS):
            return known  # an identical item was already validated
    item = check_item(raw, field_name, path=ctx.path, line=ctx.line)
    key = ResolvedItem.unchecked(item)
    resolved = {"image": item.get("image"), "text": item.get("text")}
    if resolved["image"] is not None:
        resolved["image"] = resolve_image(resolved["image"], image_root)
        checker.check(resolved["image"], f"{field_name}.image", ctx)
    if "video" in item:
        resolved["video"] = _resolved_video(item["video"], image_root, f"{field_name}.video", ctx, checker)
    if "bbox" in item:
        resolved["bbox"] = item["bbox"]
        checker.check_bbox(resolved["image"], item["bbox"], f"{field_name}.bbox", ctx)  # header only
    if shared is not None:
        shared[key] = resolved
    return resolved


def _resolved_video(video: Any, image_root: Path, field: str, ctx: RowContext,
                    checker: ImageChecker) -> str | list[str]:
    """An item's video resolved against ``image_root`` like an image, and checked to exist."""
    resolved = resolve_video(video, image_root)
    checker.check_video(resolved, field, ctx)
    return list(resolved) if isinstance(resolved, tuple) else resolved


def load_candidates(path: str | Path, image_root: str | Path | None = None, *,
                    check_images: bool = True) -> list[CandidateQuery]:
    """Rows ``{"id", "query": item, "candidates": [item, ...]}``, positive first.

    Equal candidate items (MMEB classification repeats the same 1000 labels for every query)
    are returned as one shared dict, which cuts memory several-fold: treat items as read-only.
    """
    path = Path(path)
    image_root = Path(image_root) if image_root is not None else path.parent
    checker = ImageChecker(check_images)
    queries: list[CandidateQuery] = []
    seen: dict[str, int] = {}
    shared: dict[ResolvedItem, Item] = {}
    for line, row in read_table(path):
        ctx = RowContext(path, line)
        query_id = _unique_id(row, ctx, seen)
        if "query" not in row:
            raise ctx.error("query", "missing required field")
        query = _resolved_item(row["query"], image_root, "query", ctx, checker)
        candidates = row.get("candidates")
        if "candidates" not in row:
            raise ctx.error("candidates", "missing required field")
        if not isinstance(candidates, list) or not candidates:
            raise ctx.error("candidates", "expected a non-empty list of items (positive first)")
        items = [_resolved_item(candidate, image_root, f"candidates[{k}]", ctx, checker, shared)
                 for k, candidate in enumerate(candidates)]
        queries.append(CandidateQuery(id=query_id, query=query, candidates=items, line=line))
    if not queries:
        raise DataError("data file has no rows", path=path)
    return queries


def _unique_id(row: dict[str, Any], ctx: RowContext, seen: dict[str, int]) -> str:
    row_id = require_str(row, "id", ctx)
    if row_id in seen:
        raise ctx.error("id", f"duplicate id {row_id!r} (first on line {seen[row_id]})")
    seen[row_id] = ctx.line
    return row_id  # type: ignore[return-value]


def _read_gallery_rows(path: Path, image_root: Path, checker: ImageChecker) -> list[GalleryRow]:
    rows: list[GalleryRow] = []
    seen: dict[str, int] = {}
    for line, row in read_table(path):
        ctx = RowContext(path, line)
        row_id = _unique_id(row, ctx, seen)
        image, video = None, None
        if row.get("video") is not None:  # a clip row: {"id", "video", "identity", "text"?}
            checked = check_item({"video": row["video"], "image": row.get("image")}, path=path, line=line)
            video = _resolved_video(checked["video"], image_root, "video", ctx, checker)
        else:
            image = resolve_image(require_str(row, "image", ctx), image_root)  # type: ignore[arg-type]
            checker.check(image, "image", ctx)
        identity = require_str(row, "identity", ctx)
        text = require_str(row, "text", ctx, optional=True)
        rows.append(GalleryRow(id=row_id, image=image, identity=identity, text=text, line=line,  # type: ignore[arg-type]
                               video=tuple(video) if isinstance(video, list) else video))
    if not rows:
        raise DataError("data file has no rows", path=path)
    return rows


def load_gallery(queries_path: str | Path, gallery_path: str | Path,
                 image_root: str | Path | None = None, *, check_images: bool = True) -> GalleryData:
    """Rows ``{"id", "image", "identity", "text"?}`` (or ``"video"`` in place of ``"image"``) in both files.

    Every query must have at least one gallery row of its identity that is not excluded
    (same id / same image file), otherwise its P@1 would be 0 whatever the model does.
    """
    queries_path, gallery_path = Path(queries_path), Path(gallery_path)
    image_root = Path(image_root) if image_root is not None else queries_path.parent
    checker = ImageChecker(check_images)
    data = GalleryData(queries=_read_gallery_rows(queries_path, image_root, checker),
                       gallery=_read_gallery_rows(gallery_path, image_root, checker))
    by_identity: dict[str, set[int]] = defaultdict(set)
    for position, row in enumerate(data.gallery):
        by_identity[row.identity].add(position)
    for query, excluded in zip(data.queries, data.excluded()):
        if not by_identity.get(query.identity, set()) - set(excluded):
            raise DataError(f"identity {query.identity!r} has no other instance in the gallery "
                            f"{gallery_path.name}; this query can never be answered",
                            path=queries_path, line=query.line, field="identity")
    return data
