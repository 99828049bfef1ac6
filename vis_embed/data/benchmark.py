"""Evaluation data: the benchmark manifest YAML and the ``candidates`` / ``gallery`` / ``qrels`` layouts.

``load_benchmark`` validates the manifest (the pydantic schema in
:mod:`vis_embed.data.manifest`: keys, vocabularies, that files exist) without reading the data
files; ``EvalDatasetSpec.load_candidates()`` / ``.load_gallery()`` / ``.load_qrels()`` read and
validate the rows of the three layouts this package owns (qrels: :mod:`vis_embed.data.qrels`).
The peer-protocol layouts (2afc, nearid, pair_ap, asym_recall, human_corr) are parsed by
vis_embed.evaluation; their extra manifest keys are kept
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
from vis_embed.data.items import Item, ResolvedItem, check_item
from vis_embed.data.manifest import FILE_ROLES, Manifest, ManifestEntry, files_of_layout
from vis_embed.data.qrels import QrelsData, load_qrels_dataset
from vis_embed.data.eval_rows import resolved_item, resolved_video, unique_id
from vis_embed.data.records import ImageChecker, RowContext, require_str
from vis_embed.data.tables import read_table
from vis_embed.data.yaml_lines import load_yaml_with_lines
from vis_embed.errors import DataError
from vis_embed.io import fingerprint_files, fingerprint_json, safe_name


@dataclass(frozen=True)
class CandidateQuery:
    """One query of a ``candidates`` dataset; ``candidates[:positives]`` are the positives
    (one, ``candidates[0]``, unless the row says ``"positives": N``: MomentSeeker's queries have
    several correct clips, and a hit on any of them counts, as in VLM2Vec)."""

    id: str
    query: Item
    candidates: list[Item]
    line: int
    positives: int = 1


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
    corpus: Path | None = None
    qrels: Path | None = None
    modality: str | None = None  # MMEB-V2: image | video | visdoc
    image_root: Path | None = None
    query_instruction: str | None = None
    candidate_instruction: str | None = None
    options: DatasetOptions = field(default_factory=DatasetOptions)  # a dict is validated into one
    manifest_path: Path | None = None
    line: int | None = None
    benchmark_version: int | str | None = None  # the manifest's `version` (results of two never mix)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options",
                           DatasetOptions.from_values(self.options, self.name, self.manifest_path, self.line))

    @property
    def files(self) -> dict[str, Path]:
        """The data files this dataset names, by role."""
        return {role: Path(getattr(self, role)) for role in FILE_ROLES if getattr(self, role) is not None}

    def file(self, role: str) -> Path:
        """The data file in ``role`` (``path`` | ``queries`` | ``gallery`` | ``corpus`` | ``qrels``)."""
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

    def load_qrels(self, *, check_images: bool = True) -> QrelsData:
        if self.layout != "qrels":
            raise DataError(f"dataset {self.name!r} has layout {self.layout!r}, not 'qrels'",
                            path=self.manifest_path, line=self.line, field="layout")
        return load_qrels_dataset(self.file("queries"), self.file("corpus"), self.file("qrels"),
                                  self.root_for("queries"), check_images=check_images)


@dataclass(frozen=True)
class Benchmark:
    name: str
    path: Path
    datasets: list[EvalDatasetSpec]
    description: str | None = None
    version: int | str | None = None
    protocol: str | None = None  # the manifest's evaluation protocol (None: the run's default)

    def fingerprint(self) -> str:
        """SHA-256 over the manifest and every data file it names (not image files)."""
        files = [self.path]
        for spec in self.datasets:
            for data_path in spec.files.values():
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
    specs = [_spec(entry, manifest_path, line=getattr(raw, "line", None), version=manifest.version)
             for entry, raw in zip(manifest.datasets, document["datasets"])]
    check_file_stems(specs)
    description = manifest.description
    return Benchmark(name=manifest.name, path=manifest_path, datasets=specs,
                     description=None if description is None else str(description), version=manifest.version,
                     protocol=manifest.protocol)


def check_file_stems(specs: list[EvalDatasetSpec]) -> None:
    """A DataError when two datasets would write the same files under an evaluation's OUT
    (datasets/, runs/, grids/: :func:`~vis_embed.io.safe_name` of the name): names that differ only
    in the characters it replaces, or in case (one file on macOS and Windows).  One result file
    would hold either dataset's result, and one run file the other dataset's run."""
    seen: dict[str, str] = {}
    for spec in specs:
        stem = safe_name(spec.name)
        other = seen.setdefault(stem.casefold(), spec.name)
        if other != spec.name:
            raise DataError(f"datasets {other!r} and {spec.name!r} would share the file name {stem!r} in the "
                            f"output folder; rename one", path=spec.manifest_path, line=spec.line, field="name")


def _spec(entry: ManifestEntry, manifest_path: Path, line: int | None,
          version: int | str | None = None) -> EvalDatasetSpec:
    """The dataset spec of a validated manifest entry, its files resolved against the manifest's folder."""
    base = manifest_path.parent
    files = {key: entry.resolved(base, key) for key in files_of_layout(entry.layout)}
    image_root = entry.resolved(base, "image_root") if entry.image_root is not None \
        else next(iter(files.values())).parent
    return EvalDatasetSpec(
        name=entry.name, benchmark=entry.inferred_benchmark, meta_task=entry.meta_task, split=entry.split,
        layout=entry.layout, manifest_path=manifest_path, line=line, image_root=image_root,
        modality=entry.inferred_modality,
        query_instruction=entry.query_instruction, candidate_instruction=entry.candidate_instruction,
        options=entry.all_options, benchmark_version=version, **files,
    )


# ---------------------------------------------------------------------------------------------
# Rows of the candidates and gallery layouts


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
        query_id = unique_id(row, ctx, seen)
        if "query" not in row:
            raise ctx.error("query", "missing required field")
        query = resolved_item(row["query"], image_root, "query", ctx, checker)
        candidates = row.get("candidates")
        if "candidates" not in row:
            raise ctx.error("candidates", "missing required field")
        if not isinstance(candidates, list) or not candidates:
            raise ctx.error("candidates", "expected a non-empty list of items (positive first)")
        items = [resolved_item(candidate, image_root, f"candidates[{k}]", ctx, checker, shared)
                 for k, candidate in enumerate(candidates)]
        positives = row.get("positives", 1)
        if type(positives) is not int or not 1 <= positives <= len(items):
            raise ctx.error("positives", f"expected an integer from 1 to the number of candidates "
                                         f"({len(items)}), got {positives!r:.40}")
        queries.append(CandidateQuery(id=query_id, query=query, candidates=items, line=line, positives=positives))
    if not queries:
        raise DataError("data file has no rows", path=path)
    return queries


def _read_gallery_rows(path: Path, image_root: Path, checker: ImageChecker) -> list[GalleryRow]:
    rows: list[GalleryRow] = []
    seen: dict[str, int] = {}
    for line, row in read_table(path):
        ctx = RowContext(path, line)
        row_id = unique_id(row, ctx, seen)
        image, video = None, None
        if row.get("video") is not None:  # a clip row: {"id", "video", "identity", "text"?}
            checked = check_item({"video": row["video"], "image": row.get("image")}, path=path, line=line)
            video = resolved_video(checked["video"], image_root, "video", ctx, checker)
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
    _check_shared_ids(data, queries_path, gallery_path)
    by_identity: dict[str, set[int]] = defaultdict(set)
    for position, row in enumerate(data.gallery):
        by_identity[row.identity].add(position)
    for query, excluded in zip(data.queries, data.excluded()):
        if not by_identity.get(query.identity, set()) - set(excluded):
            raise DataError(f"identity {query.identity!r} has no other instance in the gallery "
                            f"{gallery_path.name}; this query can never be answered",
                            path=queries_path, line=query.line, field="identity")
    return data


def _check_shared_ids(data: GalleryData, queries_path: Path, gallery_path: Path) -> None:
    """A gallery row with a query's id is that query's own row (left out of its ranking), so it
    must be of the query's identity: two files numbered apart ("0", "1", ... in each) would
    otherwise silently drop an unrelated row -- perhaps the query's only positive -- per query."""
    gallery_by_id = {row.id: row for row in data.gallery}
    for query in data.queries:
        twin = gallery_by_id.get(query.id)
        if twin is not None and twin.identity != query.identity:
            raise DataError(f"id {query.id!r} is a query of identity {query.identity!r} and, in {gallery_path.name} "
                            f"line {twin.line}, a gallery row of identity {twin.identity!r}; a gallery row with the "
                            "query's id is the query itself and is left out of its ranking: give the two files "
                            "the same id only for the same row", path=queries_path, line=query.line, field="id")
