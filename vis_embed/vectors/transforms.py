"""Matryoshka truncation and quantization of embedding matrices: the one place for both.

- :func:`truncate` keeps the first ``dim`` coordinates and renormalises to unit length
  (Kusupati et al. 2022; what sentence-transformers' ``truncate_dim`` and the OpenAI/vLLM
  ``dimensions`` field do).  Any prefix is a vector; it is a *good* one when the model was
  trained with ``loss.matryoshka_dims`` (:mod:`vis_embed.training.losses.matryoshka`).
- :func:`quantize` follows sentence-transformers' ``quantize_embeddings``: ``float16`` a cast;
  ``uint8``/``int8`` each dimension's ``[min, max]`` range (calibration ``ranges``, (2, D))
  cut into 256 steps; ``ubinary`` ``np.packbits`` of the signs (> 0), ``binary`` the same
  bytes shifted by -128 into int8.

numpy only (no torch, no faiss): the command lines import this for their checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vis_embed.config import member_of
from vis_embed.errors import DataError
from vis_embed.vectors.options import BIT_PRECISIONS, PRECISIONS



def check_dim(dim: Any, full_dim: int, field: str = "dim") -> int:
    """``dim`` if it is an int in [1, full_dim]; else a DataError naming ``field``."""
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not 1 <= int(dim) <= full_dim:
        raise DataError(f"must be an integer from 1 to the model's width {full_dim}, got {dim!r}", field=field)
    return int(dim)


def check_matryoshka_dims(dims: Sequence[int], full_dim: int | None = None,
                          field: str = "matryoshka_dims") -> list[int]:
    """Matryoshka dims as a strictly increasing list of positive ints (each <= ``full_dim`` when
    given); else a DataError naming ``field``."""
    dims = list(dims)
    if not dims or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
        raise DataError(f"must be a non-empty list of positive integers, got {dims!r}", field=field)
    if any(b <= a for a, b in zip(dims, dims[1:])):
        raise DataError(f"must be strictly increasing, got {dims}", field=field)
    if full_dim is not None and dims[-1] > full_dim:
        raise DataError(f"{dims[-1]} exceeds the model's embedding width {full_dim}", field=field)
    return dims


def check_precision(precision: Any, field: str = "precision") -> str:
    return member_of(precision, PRECISIONS, "precision", field)


def l2_normalise(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (float32); an all-zero row stays zero."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, np.finfo(np.float32).tiny)


def truncate(matrix: np.ndarray, dim: int | None) -> np.ndarray:
    """The first ``dim`` coordinates of each row, renormalised (``dim`` None or the full width:
    the matrix as float32, untouched)."""
    matrix = np.asarray(matrix, dtype=np.float32)
    if dim is None or dim == matrix.shape[1]:
        return matrix
    check_dim(dim, matrix.shape[1])
    return l2_normalise(matrix[:, :dim])


def calibration_ranges(matrix: np.ndarray) -> np.ndarray:
    """(2, D) float32: each dimension's min (row 0) and max (row 1) -- sentence-transformers' ranges."""
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.shape[0] == 0:
        raise DataError("cannot calibrate int8/uint8 ranges on zero vectors", field="ranges")
    return np.stack([matrix.min(axis=0), matrix.max(axis=0)]).astype(np.float32)


def check_ranges(ranges: Any, dim: int, field: str = "ranges") -> np.ndarray:
    ranges = np.asarray(ranges, dtype=np.float32)
    if ranges.shape != (2, dim) or not np.isfinite(ranges).all() or (ranges[1] < ranges[0]).any():
        raise DataError(f"expected finite (2, {dim}) [min; max] ranges with min <= max, got shape "
                        f"{ranges.shape}", field=field)
    return ranges


def quantize(matrix: np.ndarray, precision: str, ranges: np.ndarray | None = None) -> np.ndarray:
    """``matrix`` (N, D) float at ``precision`` (see the module docstring).

    ``ranges`` (int8/uint8 only): the (2, D) calibration of :func:`calibration_ranges`; None
    calibrates on ``matrix`` itself.  Unlike sentence-transformers, values outside the ranges
    are clipped: a query beyond the gallery's range would otherwise wrap around (255 -> 0).
    """
    check_precision(precision)
    matrix = np.asarray(matrix, dtype=np.float32)
    if precision == "float32":
        return matrix
    if precision == "float16":
        return matrix.astype(np.float16)
    if precision in BIT_PRECISIONS:
        packed = np.packbits(matrix > 0, axis=1)
        return packed if precision == "ubinary" else (packed.astype(np.int16) - 128).astype(np.int8)
    ranges = calibration_ranges(matrix) if ranges is None else check_ranges(ranges, matrix.shape[1])
    steps = (ranges[1] - ranges[0]) / 255
    steps = np.where(steps > 0, steps, 1.0)  # a constant dimension: every value is step 0
    levels = np.clip(np.rint((matrix - ranges[0]) / steps), 0, 255)
    return levels.astype(np.uint8) if precision == "uint8" else (levels - 128).astype(np.int8)


def vllm_matryoshka_fields(dims: Sequence[int] | None, full_dim: int) -> dict[str, Any]:
    """What an exported ``config.json`` adds for vLLM: ``is_matryoshka`` and
    ``matryoshka_dimensions`` (the trained dims plus the full width: vLLM accepts only listed
    ``dimensions``); {} for a model trained without Matryoshka dims."""
    if not dims:
        return {}
    listed = sorted({*map(int, dims), int(full_dim)})
    return {"is_matryoshka": True, "matryoshka_dimensions": listed}
