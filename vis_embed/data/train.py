"""Training data: the data config YAML and its sub-datasets (kinds ``identity`` and ``pairs``).

``load_train_config`` reads the YAML, reads every data file and validates every row before
anything trains, so a typo on row 90 000 fails in seconds rather than hours into a run.
See docs/data.md for the formats.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vis_embed.data.factorize import factorize
from vis_embed.data.images import resolve_image
from vis_embed.data.items import Item, ResolvedItem, check_bbox, check_item
from vis_embed.data.records import ImageChecker, RowContext, check_id_list, require_str
from vis_embed.config import validate_document
from vis_embed.data.tables import read_table
from vis_embed.data.video import resolve_video
from vis_embed.data.train_config import IDENTITY_SEPARATOR, TrainDataDocument, TrainDataEntry
from vis_embed.data.yaml_lines import load_yaml_with_lines
from vis_embed.errors import DataError
from vis_embed.io import fingerprint_files, fingerprint_json


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
    # loss-label code of each row, one code space across the config (set by load_train_config)
    labels: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)
    _arrays: DatasetArrays | None = field(default=None, repr=False, compare=False)
    _resolved_images: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

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
        """``image`` resolved against ``image_root``, memoised: rows repeat images (MMEB's
        classification labels, crops of one scene), and resolving dominated label encoding."""
        resolved = self._resolved_images.get(image)
        if resolved is None:
            resolved = self._resolved_images[image] = resolve_image(image, self.image_root)
        return resolved

    def query_item(self, rec: dict[str, Any]) -> Item:
        """Query side. Identity rows: the image (with its ``bbox``: the model crops) + text."""
        if self.kind == "pairs":
            return self._item(rec["query"])
        if rec.get("video") is not None:  # an identity row of a clip
            return {"video": self._video(rec["video"]), "text": rec.get("text")}
        item: Item = {"image": self.resolve_image(rec["image"]), "text": rec.get("text")}
        if "bbox" in rec:
            item["bbox"] = rec["bbox"]
        return item

    def positive_item(self, rec: dict[str, Any]) -> Item:
        """Candidate side. Identity rows: the full image of the row (no crop, no text)."""
        if self.kind == "pairs":
            return self._item(rec["positive"])
        if rec.get("video") is not None:
            return {"video": self._video(rec["video"]), "text": None}
        return {"image": self.resolve_image(rec["image"]), "text": None}

    def _video(self, video: Any) -> str | list[str]:
        """A row's video resolved against ``image_root`` like an image (a frame list stays a list)."""
        resolved = resolve_video(video, self.image_root)
        return list(resolved) if isinstance(resolved, tuple) else resolved

    def negative_items(self, rec: dict[str, Any]) -> list[Item]:
        """A pairs row's explicit negative candidates (``negatives``; e.g. MMEB-train's ``neg_*``
        that are no other row's positive): extra candidates of the row's query, resolved like
        its positive.  Empty for identity rows and rows without them."""
        if self.kind != "pairs":
            return []
        return [self._item(obj) for obj in rec.get("negatives", ())]

    def _item(self, obj: dict[str, Any]) -> Item:
        """A pairs item with its image resolved (a ``bbox`` stays: crops happen in the model layer)."""
        return ResolvedItem.of(obj, self.image_root).as_dict()

    def label_key(self, rec: dict[str, Any]) -> Any:
        """What the loss treats as "the same candidate" (hashable): the row's identity key, else
        (a pairs row without identity) its positive as a :class:`ResolvedItem` -- resolved image
        path + bbox + text, scoped to the namespace.  Two classification rows whose positive is
        the label text "circle" are the same candidate: pushing a query away from an identical
        copy of its own positive would only teach noise.  Encoded once per load (``labels``)."""
        key = self.identity_key(rec)
        if key is not None:
            return key
        positive = rec["positive"]  # validated when the row was loaded
        image, bbox, video = positive.get("image"), positive.get("bbox"), positive.get("video")
        return (self.namespace, ResolvedItem(None if image is None else self.resolve_image(image),
                                             positive.get("text"), None if bbox is None else tuple(bbox),
                                             None if video is None else resolve_video(video, self.image_root)))

    def _line(self, rec: dict[str, Any]) -> int | None:
        position = self.index.get(rec.get("id"))  # type: ignore[arg-type]
        return None if position is None else self.lines[position]

    def single_instance_identities(self) -> int:
        """Identities of an identity dataset with one row: never anchors (no other instance to be
        the positive), still usable as designated hard negatives (counted by the scheduler)."""
        if self.kind != "identity":
            return 0
        return int((np.bincount(self.arrays().identity) == 1).sum())

    def arrays(self) -> DatasetArrays:
        """Cached numpy view of ids, identity codes and hard negatives (see ``DatasetArrays``)."""
        if self._arrays is None:
            self._arrays = _dataset_arrays(self)
        return self._arrays


def _dataset_arrays(dataset: TrainDataset) -> DatasetArrays:
    identity, identity_keys = factorize([dataset.identity_key(rec) for rec in dataset.records],
                                        none_is_missing=True)
    offsets = np.zeros(len(dataset.records) + 1, dtype=np.int64)
    negatives: list[int] = []
    for position, rec in enumerate(dataset.records):
        negatives.extend(dataset.index[neg] for neg in rec.get("hard_negatives", ()))
        offsets[position + 1] = len(negatives)
    return DatasetArrays(
        ids=np.array([rec["id"] for rec in dataset.records], dtype=object),
        identity=identity,
        identity_keys=identity_keys,
        hard_negative_offsets=offsets,
        hard_negative_indices=np.asarray(negatives, dtype=np.int64),
    )


def _assign_labels(datasets: list[TrainDataset]) -> None:
    """Every row's loss-label code (``TrainDataset.labels``), encoded once over the whole config
    so that codes compare across datasets (an identity namespace shared by two datasets)."""
    codes, _keys = factorize([ds.label_key(rec) for ds in datasets for rec in ds.records])
    start = 0
    for dataset in datasets:
        dataset.labels = codes[start:start + len(dataset)]
        start += len(dataset)


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
    document = load_yaml_with_lines(yaml_path)
    config = validate_document(TrainDataDocument, document, yaml_path, context={"base": yaml_path.parent})
    checker = ImageChecker(check_images)
    datasets = [_dataset(entry, raw, yaml_path) for entry, raw in zip(config.datasets, document["datasets"])]
    for dataset in datasets:
        _load_rows(dataset, checker)
    _assign_labels(datasets)
    return TrainDataConfig(path=yaml_path, datasets=datasets)


def _dataset(entry: TrainDataEntry, raw: dict[str, Any], yaml_path: Path) -> TrainDataset:
    """The (row-less) dataset of a validated config entry, paths resolved against the YAML's folder."""
    base = yaml_path.parent
    return TrainDataset(
        name=entry.name, kind=entry.kind, path=entry.data_path(base), image_root=entry.image_folder(base),
        weight=float(entry.weight), query_instruction=entry.query_instruction,
        candidate_instruction=entry.candidate_instruction, identity_namespace=entry.identity_namespace,
        # the entry as written (1 stays 1, not 1.0): part of the data fingerprint schedules check
        config_entry={key: raw[key] for key in TrainDataEntry.model_fields if key in raw},
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


def _validate_identity_row(row: dict[str, Any], ctx: RowContext, dataset: TrainDataset,
                           checker: ImageChecker) -> None:
    if row.get("video") is not None:  # a clip: {id, video, identity, text?}
        require_str(row, "identity", ctx)
        require_str(row, "text", ctx, optional=True)
        item = check_item({"video": row["video"], "image": row.get("image"), "bbox": row.get("bbox")}, None,
                          path=ctx.path, line=ctx.line)
        checker.check_video(resolve_video(item["video"], dataset.image_root), "video", ctx)
        return
    image = require_str(row, "image", ctx)
    require_str(row, "identity", ctx)
    require_str(row, "text", ctx, optional=True)
    if "bbox" in row:
        check_bbox(row["bbox"], "bbox", path=ctx.path, line=ctx.line)
    resolved = dataset.resolve_image(image)  # type: ignore[arg-type]
    checker.check(resolved, "image", ctx)
    if "bbox" in row:
        checker.check_bbox(resolved, row["bbox"], "bbox", ctx)


def _validate_pairs_row(row: dict[str, Any], ctx: RowContext, dataset: TrainDataset,
                        checker: ImageChecker) -> None:
    for side in ("query", "positive"):
        if side not in row:
            raise ctx.error(side, "missing required field")
        _check_pairs_item(row[side], side, ctx, dataset, checker)
    require_str(row, "identity", ctx, optional=True)
    negatives = row.get("negatives", [])
    if not isinstance(negatives, list):
        raise ctx.error("negatives", f"expected a list of items, got {type(negatives).__name__}")
    for index, negative in enumerate(negatives):
        _check_pairs_item(negative, f"negatives[{index}]", ctx, dataset, checker)


def _check_pairs_item(value: Any, field: str, ctx: RowContext, dataset: TrainDataset,
                      checker: ImageChecker) -> None:
    """A pairs row's item: valid, its image found and its ``bbox`` inside the image."""
    item = check_item(value, field, path=ctx.path, line=ctx.line)
    if "image" in item:
        resolved = dataset.resolve_image(item["image"])
        checker.check(resolved, f"{field}.image", ctx)
        if "bbox" in item:
            checker.check_bbox(resolved, item["bbox"], f"{field}.bbox", ctx)
    if "video" in item:
        checker.check_video(resolve_video(item["video"], dataset.image_root), f"{field}.video", ctx)


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
