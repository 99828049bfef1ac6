"""Training data: the data config YAML and its sub-datasets (kinds ``identity`` and ``pairs``).

``load_train_config`` reads the YAML, reads every data file and validates every row before
anything trains, so a typo on row 90 000 fails in seconds rather than hours into a run.
See docs/data.md for the formats.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vis_embed.data.images import crop_to_bbox, load_image, resolve_image
from vis_embed.data.items import Item, check_bbox, check_item
from vis_embed.data.records import ImageChecker, RowContext, check_id_list, require_str
from vis_embed.data.tables import TABLE_SUFFIXES, read_table
from vis_embed.data.yaml_lines import LineDict, load_yaml_with_lines
from vis_embed.errors import DataError
from vis_embed.io import fingerprint_files, fingerprint_json

KINDS: tuple[str, ...] = ("identity", "pairs")
IDENTITY_SEPARATOR = "::"

# key -> (accepted types, required)
_ENTRY_KEYS: dict[str, tuple[tuple[type, ...], bool]] = {
    "name": ((str,), True),
    "kind": ((str,), True),
    "path": ((str,), True),
    "image_root": ((str,), False),
    "weight": ((int, float), False),
    "query_instruction": ((str, type(None)), False),
    "candidate_instruction": ((str, type(None)), False),
    "identity_namespace": ((str,), False),
}


@dataclass(frozen=True)
class DatasetArrays:
    """Per-dataset arrays for the scheduler; row ``i`` is ``records[i]``.

    ``identity[i]`` is a code into ``identity_keys`` (-1: pairs row without identity).
    Hard negatives of row ``i`` are the row positions
    ``hard_negative_indices[hard_negative_offsets[i]:hard_negative_offsets[i + 1]]`` (CSR).
    """

    ids: np.ndarray                    # object array of str
    identity: np.ndarray               # int64
    identity_keys: list[str]
    hard_negative_offsets: np.ndarray  # int64, shape (n + 1,)
    hard_negative_indices: np.ndarray  # int64

    def hard_negatives_of(self, position: int) -> np.ndarray:
        start, stop = self.hard_negative_offsets[position], self.hard_negative_offsets[position + 1]
        return self.hard_negative_indices[start:stop]


@dataclass(eq=False)
class TrainDataset:
    """One sub-dataset of a training data config, with its validated rows."""

    name: str
    kind: str
    path: Path
    image_root: Path
    weight: float = 1.0
    query_instruction: str | None = None
    candidate_instruction: str | None = None
    identity_namespace: str | None = None
    records: list[dict[str, Any]] = field(default_factory=list, repr=False)
    index: dict[str, int] = field(default_factory=dict, repr=False)
    lines: list[int] = field(default_factory=list, repr=False)
    config_entry: dict[str, Any] = field(default_factory=dict, repr=False)
    _arrays: DatasetArrays | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.records)

    @property
    def namespace(self) -> str:
        """Identity namespace: ``identity_namespace`` or, by default, the dataset name."""
        return self.identity_namespace or self.name

    def get(self, record_id: str) -> dict[str, Any]:
        try:
            return self.records[self.index[record_id]]
        except KeyError:
            raise KeyError(f"dataset {self.name!r} has no record with id {record_id!r}") from None

    def identity_key(self, rec: dict[str, Any]) -> str | None:
        """``"namespace::identity"``; None for a pairs row without identity."""
        identity = rec.get("identity")
        return None if identity is None else f"{self.namespace}{IDENTITY_SEPARATOR}{identity}"

    def resolve_image(self, image: str) -> str:
        return resolve_image(image, self.image_root)

    def query_item(self, rec: dict[str, Any]) -> Item:
        """Query side. Identity rows: the image, cropped to ``bbox`` (a PIL image) if set, + text."""
        if self.kind == "pairs":
            return self._item(rec["query"], rec, "query")
        image_path = self.resolve_image(rec["image"])
        image: Any = image_path
        if "bbox" in rec:
            image = crop_image(image_path, rec["bbox"], where=(self.path, self._line(rec)))
        return {"image": image, "text": rec.get("text")}

    def positive_item(self, rec: dict[str, Any]) -> Item:
        """Candidate side. Identity rows: the full image of the row (no crop, no text)."""
        if self.kind == "pairs":
            return self._item(rec["positive"], rec, "positive")
        return {"image": self.resolve_image(rec["image"]), "text": None}

    def _item(self, obj: dict[str, Any], rec: dict[str, Any], side: str) -> Item:
        """A pairs item with its image resolved, cropped to its ``bbox`` (a PIL image) if set."""
        image = obj.get("image")
        if image is not None:
            image = self.resolve_image(image)
            if "bbox" in obj:
                image = crop_image(image, obj["bbox"], (self.path, self._line(rec)), f"{side}.bbox")
        return {"image": image, "text": obj.get("text")}

    def _line(self, rec: dict[str, Any]) -> int | None:
        position = self.index.get(rec.get("id"))  # type: ignore[arg-type]
        return None if position is None else self.lines[position]

    def arrays(self) -> DatasetArrays:
        """Cached numpy view of ids, identity codes and hard negatives (see ``DatasetArrays``)."""
        if self._arrays is None:
            self._arrays = _dataset_arrays(self)
        return self._arrays


def _dataset_arrays(dataset: TrainDataset) -> DatasetArrays:
    codes: dict[str, int] = {}
    identity = np.full(len(dataset.records), -1, dtype=np.int64)
    offsets = np.zeros(len(dataset.records) + 1, dtype=np.int64)
    negatives: list[int] = []
    for position, rec in enumerate(dataset.records):
        key = dataset.identity_key(rec)
        if key is not None:
            identity[position] = codes.setdefault(key, len(codes))
        negatives.extend(dataset.index[neg] for neg in rec.get("hard_negatives", ()))
        offsets[position + 1] = len(negatives)
    return DatasetArrays(
        ids=np.array([rec["id"] for rec in dataset.records], dtype=object),
        identity=identity,
        identity_keys=list(codes),
        hard_negative_offsets=offsets,
        hard_negative_indices=np.asarray(negatives, dtype=np.int64),
    )


def crop_image(image_path: str, bbox: list[float], where: tuple[Any, int | None] = (None, None),
               field: str = "bbox") -> Any:
    """Load ``image_path`` as the model does (RGB, EXIF-upright) and crop it to ``bbox``.

    ``bbox`` is in pixels of the image *as displayed* (after EXIF orientation), the frame
    in which the positive side -- the full image -- reaches the model.
    """
    image = load_image(image_path)
    try:
        return crop_to_bbox(image, bbox, image_path)
    except DataError as exc:  # name the data row, not only the image file
        raise DataError(exc.reason, path=where[0], line=where[1], field=field) from None


@dataclass
class TrainDataConfig:
    """A validated training data config: ``datasets`` in YAML order."""

    path: Path
    datasets: list[TrainDataset]

    def dataset(self, name: str) -> TrainDataset:
        for dataset in self.datasets:
            if dataset.name == name:
                return dataset
        raise KeyError(f"no dataset named {name!r} in {self.path}")

    def fingerprint(self) -> str:
        """SHA-256 over the data files' contents and the config entries (not image files)."""
        return fingerprint_json({
            "datasets": [dict(ds.config_entry) for ds in self.datasets],
            "files": [fingerprint_files([ds.path]) for ds in self.datasets],
        })


def load_train_config(yaml_path: str | Path, *, check_images: bool = True) -> TrainDataConfig:
    """Read and validate a training data config and every data file it names.

    Raises ``DataError`` naming file, line and field for any problem (see docs/data.md).
    ``check_images=False`` skips the existence check of image files (one stat per image).
    """
    yaml_path = Path(yaml_path).resolve()
    doc = load_yaml_with_lines(yaml_path)
    if not isinstance(doc, LineDict):
        raise DataError("expected a mapping with a 'datasets' list", path=yaml_path, line=1)
    for key in doc:
        if key != "datasets":
            raise DataError("unknown key (allowed: datasets)", path=yaml_path,
                            line=doc.line_of(key), field=str(key))
    entries = doc.get("datasets")
    if not isinstance(entries, list) or not entries:
        raise DataError("'datasets' must be a non-empty list", path=yaml_path,
                        line=doc.line_of("datasets"), field="datasets")
    checker = ImageChecker(check_images)
    datasets: list[TrainDataset] = []
    for position, entry in enumerate(entries):
        dataset = _parse_entry(entry, position, yaml_path)
        if any(other.name == dataset.name for other in datasets):
            raise DataError(f"duplicate dataset name {dataset.name!r}", path=yaml_path,
                            line=entry.line_of("name"), field=f"datasets[{position}].name")
        _load_rows(dataset, checker)
        datasets.append(dataset)
    return TrainDataConfig(path=yaml_path, datasets=datasets)


def _parse_entry(entry: Any, position: int, yaml_path: Path) -> TrainDataset:
    where = f"datasets[{position}]"
    if not isinstance(entry, LineDict):
        raise DataError("expected a mapping", path=yaml_path, field=where)
    for key, value in entry.items():
        line = entry.line_of(key)
        if key not in _ENTRY_KEYS:
            raise DataError(f"unknown key (allowed: {', '.join(_ENTRY_KEYS)})", path=yaml_path,
                            line=line, field=f"{where}.{key}")
        types, _required = _ENTRY_KEYS[key]
        if not isinstance(value, types) or isinstance(value, bool):
            raise DataError(f"wrong type {type(value).__name__}", path=yaml_path, line=line,
                            field=f"{where}.{key}")
    for key, (_types, required) in _ENTRY_KEYS.items():
        if required and key not in entry:
            raise DataError("missing required key", path=yaml_path, line=entry.line,
                            field=f"{where}.{key}")
    name, kind = entry["name"], entry["kind"]
    if kind not in KINDS:
        raise DataError(f"unknown kind {kind!r} (known: {', '.join(KINDS)})", path=yaml_path,
                        line=entry.line_of("kind"), field=f"{where}.kind")
    for key in ("name", "identity_namespace"):
        value = entry.get(key)
        if value is not None and (IDENTITY_SEPARATOR in value or not value.strip()):
            raise DataError(f"must be non-empty and not contain {IDENTITY_SEPARATOR!r}",
                            path=yaml_path, line=entry.line_of(key), field=f"{where}.{key}")
    weight = float(entry.get("weight", 1.0))
    if not weight > 0:
        raise DataError("weight must be > 0", path=yaml_path, line=entry.line_of("weight"),
                        field=f"{where}.weight")
    data_path = (yaml_path.parent / entry["path"]).resolve()
    if data_path.suffix.lower() not in TABLE_SUFFIXES:
        raise DataError("data files must be .jsonl or .parquet", path=yaml_path,
                        line=entry.line_of("path"), field=f"{where}.path")
    if not data_path.is_file():
        raise DataError(f"data file not found: {data_path}", path=yaml_path,
                        line=entry.line_of("path"), field=f"{where}.path")
    image_root = (yaml_path.parent / entry["image_root"]).resolve() if "image_root" in entry \
        else data_path.parent
    return TrainDataset(
        name=name, kind=kind, path=data_path, image_root=image_root, weight=weight,
        query_instruction=entry.get("query_instruction"),
        candidate_instruction=entry.get("candidate_instruction"),
        identity_namespace=entry.get("identity_namespace"),
        config_entry={key: entry[key] for key in _ENTRY_KEYS if key in entry},
    )


def _load_rows(dataset: TrainDataset, checker: ImageChecker) -> None:
    validate_row = _validate_identity_row if dataset.kind == "identity" else _validate_pairs_row
    for line, row in read_table(dataset.path):
        ctx = RowContext(dataset.path, line)
        record_id = require_str(row, "id", ctx)
        if record_id in dataset.index:
            first = dataset.lines[dataset.index[record_id]]
            raise ctx.error("id", f"duplicate id {record_id!r} (first on line {first})")
        validate_row(row, ctx, dataset, checker)
        if "hard_negatives" in row:
            check_id_list(row["hard_negatives"], "hard_negatives", ctx)
        dataset.index[record_id] = len(dataset.records)
        dataset.records.append(row)
        dataset.lines.append(line)
    if not dataset.records:
        raise DataError("data file has no rows", path=dataset.path)
    _check_hard_negatives(dataset)
    if dataset.kind == "identity":
        _check_no_single_instance_identity(dataset)


def _validate_identity_row(row: dict[str, Any], ctx: RowContext, dataset: TrainDataset,
                           checker: ImageChecker) -> None:
    image = require_str(row, "image", ctx)
    require_str(row, "identity", ctx)
    require_str(row, "text", ctx, optional=True)
    if "bbox" in row:
        check_bbox(row["bbox"], "bbox", path=ctx.path, line=ctx.line)
    checker.check(dataset.resolve_image(image), "image", ctx)  # type: ignore[arg-type]


def _validate_pairs_row(row: dict[str, Any], ctx: RowContext, dataset: TrainDataset,
                        checker: ImageChecker) -> None:
    for side in ("query", "positive"):
        if side not in row:
            raise ctx.error(side, "missing required field")
        item = check_item(row[side], side, path=ctx.path, line=ctx.line)
        if "image" in item:
            checker.check(dataset.resolve_image(item["image"]), f"{side}.image", ctx)
    require_str(row, "identity", ctx, optional=True)


def _check_hard_negatives(dataset: TrainDataset) -> None:
    for position, rec in enumerate(dataset.records):
        for negative in rec.get("hard_negatives", ()):
            if negative not in dataset.index:
                raise DataError(f"unknown id {negative!r}: hard negatives must be ids of rows of "
                                f"dataset {dataset.name!r}", path=dataset.path,
                                line=dataset.lines[position], field="hard_negatives")
            if negative == rec["id"]:
                raise DataError("a row cannot be its own hard negative", path=dataset.path,
                                line=dataset.lines[position], field="hard_negatives")
            key = dataset.identity_key(rec)
            if key is not None and key == dataset.identity_key(dataset.get(negative)):
                # the loss masks same-identity pairs, so such a "negative" would teach nothing
                raise DataError(f"hard negative {negative!r} has the same identity as this row",
                                path=dataset.path, line=dataset.lines[position], field="hard_negatives")


def _check_no_single_instance_identity(dataset: TrainDataset) -> None:
    """An identity row's positive is another row of its identity, so every identity needs >= 2."""
    counts = Counter(rec["identity"] for rec in dataset.records)
    singles = [identity for identity, count in counts.items() if count == 1]
    if singles:
        first = next(pos for pos, rec in enumerate(dataset.records) if counts[rec["identity"]] == 1)
        raise DataError(
            f"identity {dataset.records[first]['identity']!r} has a single instance "
            f"({len(singles)} such identities in this file); an identity row needs another row of "
            "the same identity as its positive -- drop them with `vis-embed prep resample`",
            path=dataset.path, line=dataset.lines[first], field="identity")
