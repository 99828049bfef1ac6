"""Record formats, validation and loading for training and evaluation data.

Formats are documented in docs/data.md.  Entry points::

    from vis_embed.data import load_train_config, load_benchmark
    cfg = load_train_config("train.yaml")   # TrainDataConfig, every row validated
    bench = load_benchmark("benchmark.yaml")  # Benchmark; spec.load_candidates() / load_gallery() / load_qrels()
"""

from __future__ import annotations

from vis_embed.data.benchmark import (
    Benchmark,
    CandidateQuery,
    EvalDatasetSpec,
    GalleryData,
    GalleryRow,
    load_benchmark,
    load_candidates,
    load_gallery,
)
from vis_embed.data.factorize import factorize
from vis_embed.data.image_geometry import crop_to_bbox
from vis_embed.data.images import is_url, load_image, resolve_image
from vis_embed.data.items import ITEM_KEYS, Item, ResolvedItem, check_bbox, check_item
from vis_embed.data.manifest import FILE_ROLES, LAYOUTS
from vis_embed.data.qrels import QrelsData, QrelsRow, load_qrels_dataset
from vis_embed.data.tables import read_table, write_table
from vis_embed.data.train_config import KINDS
from vis_embed.data.train import (
    DatasetArrays,
    TrainDataConfig,
    TrainDataset,
    load_train_config,
)

__all__ = [
    "FILE_ROLES", "ITEM_KEYS", "KINDS", "LAYOUTS", "Benchmark", "CandidateQuery", "DatasetArrays",
    "EvalDatasetSpec", "GalleryData", "GalleryRow", "Item", "QrelsData", "QrelsRow", "ResolvedItem",
    "TrainDataConfig", "TrainDataset", "check_bbox", "check_item", "crop_to_bbox", "factorize", "is_url",
    "load_benchmark", "load_candidates", "load_gallery", "load_image", "load_qrels_dataset", "load_train_config",
    "read_table",
    "resolve_image", "write_table",
]
