"""The form an encode output is stored in: ``--dim`` (Matryoshka width) and ``--precision``.

One class carries both from the command line to the writer (:mod:`vis_embed.model.runtime.encode_file`),
checked once the model's width is known, and says what the output's ``.ids.json`` records.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from vis_embed.errors import ConfigError, DataError
from vis_embed.vectors.options import RANGED_PRECISIONS
from vis_embed.vectors.transforms import (calibration_ranges, check_dim, check_precision, check_ranges, quantize,
                                          truncate)

log = logging.getLogger(__name__)


def ranges_path(output: Path) -> Path:
    """``emb.ranges.npy`` beside an output like ``emb.npy``."""
    output = Path(output)
    stem = output.with_suffix("") if output.suffix == ".npy" else output
    return Path(f"{stem}.ranges.npy")


def load_ranges(path: Path, dim: int) -> np.ndarray:
    """The (2, dim) ranges saved in ``path`` (an ``emb.ranges.npy``; an ``emb.npy`` means its ranges file)."""
    path = Path(path)
    if path.is_file() and not path.name.endswith(".ranges.npy") and ranges_path(path).is_file():
        path = ranges_path(path)
    if not path.is_file():
        raise DataError("ranges file not found", path=path, field="ranges")
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"not a .npy array: {exc}", path=path, field="ranges") from None
    try:
        return check_ranges(loaded, dim)
    except DataError as exc:
        raise DataError(f"{exc.reason} (saved by an encode run at another --dim?)", path=path,
                        field="ranges") from None


def warn_if_not_matryoshka(dim: int | None, full_dim: int, matryoshka_dims: Sequence[int] | None) -> None:
    if dim is not None and dim < full_dim and not matryoshka_dims:
        log.warning("--dim %d: this model records no matryoshka_dims (not trained for truncation); "
                    "its first %d coordinates may embed poorly", dim, dim)


class TrainedWidths(Protocol):
    """What the width check reads of a model's EmbeddingConfig (the model is a layer above)."""

    matryoshka_dims: Sequence[int] | None


@dataclass(frozen=True)
class StoredForm:
    dim: int | None = None          # None: the model's full width
    precision: str = "float32"
    ranges_file: Path | None = None  # int8/uint8: calibration to reuse (e.g. the gallery's)
    ranges: np.ndarray | None = None  # loaded by checked()

    def __post_init__(self) -> None:
        check_precision(self.precision, field="precision")
        if self.dim is not None and (isinstance(self.dim, bool) or self.dim < 1):
            raise ConfigError(f"--dim must be a positive integer, got {self.dim}")
        if self.ranges_file is not None and self.precision not in RANGED_PRECISIONS:
            raise ConfigError(f"--ranges applies to --precision int8 or uint8, not {self.precision}")

    def checked(self, full_dim: int, embedding_config: TrainedWidths | None = None) -> StoredForm:
        """This form with ``dim`` checked against the model's width and ``ranges`` loaded."""
        if self.dim is not None:
            try:
                check_dim(self.dim, full_dim, field="dim")
            except DataError as exc:
                raise ConfigError(f"--dim: {exc.reason}") from None
        warn_if_not_matryoshka(self.dim, full_dim, getattr(embedding_config, "matryoshka_dims", None))
        width = self.dim or full_dim
        return replace(self, ranges=None if self.ranges_file is None else load_ranges(self.ranges_file, width))

    def apply(self, embeddings: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, dict[str, Any]]:
        """``(stored matrix, ranges to save or None, what .ids.json records)``."""
        vectors = truncate(embeddings, self.dim)
        ranges = None
        if self.precision in RANGED_PRECISIONS:
            ranges = self.ranges if self.ranges is not None else calibration_ranges(vectors)
        record = {"dim": int(vectors.shape[1]), "precision": self.precision}
        if ranges is not None:
            record["ranges"] = str(self.ranges_file) if self.ranges_file is not None else "calibrated on these vectors"
        return quantize(vectors, self.precision, ranges), ranges, record
