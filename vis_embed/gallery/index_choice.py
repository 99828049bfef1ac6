"""The one index chooser: which :class:`~vis_embed.vectors.index_spec.IndexSpec` a requested one
(``auto`` or a named kind, as a spec or its name) builds, for eval, ``vis-embed index``, ``search``
and the server.  What it returns is canonical: a kind of the vocabulary (``flat`` with its
precision and device, never an alias), at the gallery's width.

With a memory budget (a stored index: ``vis-embed index --memory``), ``auto`` picks by size and
budget, like autofaiss does for a memory limit: ``flat`` (exact) while the gallery is small
enough to scan (at most :data:`FLAT_AUTO_ROWS` rows) and its floats fit the budget; else
``binary`` (1 bit a dimension, re-ranked with the floats on disk) when its codes fit; else
``ivf-pq`` with as many code bytes as fit.  A named kind that does not fit is an error.

Without one (an evaluation: its metrics must be exact), ``auto`` is the fastest exact search
on this machine.  Every exact kind returns the same top-k, rows of equal score included (higher
score first, then the smaller row id: :mod:`vis_embed.gallery.search`'s tie policy), up to the
float rounding of scores (faiss and torch sum float32 products in their own order, exact-bf16
re-scores in float64, so rows whose scores differ in the last bits may swap); they differ in speed,
and which is fastest depends on the hardware:

- a GPU torch can use: flat on the GPU (``exact-gpu``: float32 products and top-k on the GPU);
- a CPU with AMX (``amx_bf16``): flat at bfloat16 (``exact-bf16``) -- its bf16 products run several
  times faster than float32 ones, so the bf16 shortlist wins clearly;
- a CPU with ``avx512_bf16`` but no AMX: bf16 products are at most ~2x float32, which the
  shortlist's overhead may eat, so a short calibration (one timed search of each kind on a
  synthetic gallery of the real width) decides;
- any other CPU: flat (faiss, ``exact``): without native bf16 products every bf16 product is
  converted in software and the shortlist is ~4x slower than numpy.

The machine's decision is made once per process and width, and is reported in results.json
(a stored index's in index.json).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass

import faiss
import numpy as np
import torch

from vis_embed.errors import ConfigError
from vis_embed.gallery.search_bf16 import Bf16ShortlistIndex, check_bf16_products
from vis_embed.vectors.index_spec import AUTO, IndexSpec, bytes_per_vector, pq_bytes_for
from vis_embed.provenance import cpu_flags  # the one /proc/cpuinfo reader

log = logging.getLogger(__name__)

FLAT_AUTO_ROWS = 262_144       # with a budget: beyond this an exact scan per query is slow; codes are chosen
# the calibration: large enough that products dominate the search, small enough to take about a second
CALIBRATION_GALLERY, CALIBRATION_QUERIES, CALIBRATION_REPEATS = 8192, 256, 2


@dataclass(frozen=True)
class IndexChoice:
    spec: IndexSpec  # what runs: a canonical kind (never auto or an alias), at the gallery's width when resolved
    reason: str      # why, in words (recorded next to the kind in results.json / index.json)

    @property
    def kind(self) -> str:
        """The canonical kind that runs (results.json's ``index``, index.json's ``kind``)."""
        return self.spec.kind


_FLAT, _FLAT_BF16, _FLAT_GPU = IndexSpec(kind="flat"), IndexSpec.named("exact-bf16"), IndexSpec.named("exact-gpu")


def gpu_available() -> bool:
    return torch.cuda.is_available()


def bf16_shortlist_usable(dim: int) -> bool:
    """Whether this torch build's bf16 products meet the shortlist's error bound (see search)."""
    try:
        check_bf16_products(dim)
    except RuntimeError:
        return False
    return True


def bf16_faster_than_faiss(dim: int) -> bool:
    """Time one search of each exact CPU kind on a synthetic gallery of width ``dim`` (best of a few)."""
    rng = np.random.default_rng(0)
    gallery = rng.standard_normal((CALIBRATION_GALLERY, dim), dtype=np.float32)
    gallery /= np.linalg.norm(gallery, axis=1, keepdims=True)
    queries = gallery[:CALIBRATION_QUERIES] + 0.1 * rng.standard_normal((CALIBRATION_QUERIES, dim), dtype=np.float32)
    faiss_index = faiss.IndexFlatIP(dim)
    faiss_index.add(gallery)
    seconds = {}
    for kind, index in (("exact", faiss_index), ("exact-bf16", Bf16ShortlistIndex(gallery))):
        best = float("inf")
        for _ in range(CALIBRATION_REPEATS):
            started = time.perf_counter()
            index.search(queries, 10)
            best = min(best, time.perf_counter() - started)
        seconds[kind] = best
    log.info("index calibration (%d x %d): faiss exact %.3f s, exact-bf16 %.3f s",
             CALIBRATION_GALLERY, dim, seconds["exact"], seconds["exact-bf16"])
    return seconds["exact-bf16"] < seconds["exact"]


@functools.cache
def choose_index(dim: int) -> IndexChoice:
    """The fastest exact index kind for galleries of width ``dim`` on this machine."""
    if gpu_available():
        return IndexChoice(_FLAT_GPU, "torch sees a GPU")
    flags = cpu_flags()
    if "amx_bf16" in flags and bf16_shortlist_usable(dim):
        return IndexChoice(_FLAT_BF16, "CPU has AMX (native bf16 matrix products)")
    if "avx512_bf16" in flags and bf16_shortlist_usable(dim):
        if bf16_faster_than_faiss(dim):
            return IndexChoice(_FLAT_BF16, "CPU has avx512_bf16; calibration: bf16 shortlist faster than faiss")
        return IndexChoice(_FLAT, "CPU has avx512_bf16; calibration: faiss faster than the bf16 shortlist")
    return IndexChoice(_FLAT, "no GPU and no native bf16 matrix products on this CPU")


def resolve_index(requested: str | IndexSpec, dim: int, rows: int | None = None, budget: int | None = None,
                  **fields: object) -> IndexChoice:
    """What ``requested`` (an :class:`IndexSpec`, or a name of
    :data:`~vis_embed.vectors.index_spec.INDEX_NAMES`) builds for ``rows`` vectors of width ``dim``:
    itself when named (checked against ``budget``), else the module docstring's choice.  The spec
    returned is canonical, at width ``dim``, with ``pq_bytes`` filled; ``fields`` (rescore, nlist,
    ...) are set on it."""
    wanted = requested if isinstance(requested, IndexSpec) else IndexSpec.named(requested)
    if wanted.kind == AUTO:
        choice = choose_index(dim) if budget is None else _by_budget(rows or 1, dim, budget)
        chosen = choice.spec
    else:
        choice = IndexChoice(wanted, "requested") if budget is None else _fitting(wanted, rows or 1, dim, budget)
        chosen = wanted.model_copy(update={"pq_bytes": wanted.pq_bytes or choice.spec.pq_bytes})
    pq_bytes = chosen.pq_bytes
    if chosen.kind == "ivf-pq" and pq_bytes is None:  # no budget: the most code bytes
        pq_bytes = pq_bytes_for(dim, math.inf)
    return IndexChoice(IndexSpec(**{**chosen.model_dump(), "dims": dim, "pq_bytes": pq_bytes, **fields}),
                       choice.reason)


def _by_budget(rows: int, dim: int, budget: int) -> IndexChoice:
    per_vector = budget / rows
    binary = bytes_per_vector("ubinary", dim)
    if per_vector < binary:
        return _fitting(IndexSpec(kind="ivf-pq"), rows, dim, budget, "binary codes exceed the memory budget")
    if rows <= FLAT_AUTO_ROWS and bytes_per_vector("float32", dim) <= per_vector:
        return IndexChoice(_FLAT, f"{rows} rows (<= {FLAT_AUTO_ROWS}) whose floats fit the budget: exact search")
    return IndexChoice(IndexSpec(kind="binary"), f"{rows} rows: binary codes ({binary} B a vector) fit the budget; "
                                                 f"re-ranked with the float vectors on disk")


def _fitting(wanted: IndexSpec, rows: int, dim: int, budget: int, why: str = "requested") -> IndexChoice:
    """``wanted`` when ``rows`` of it fit ``budget`` (ivf-pq: with the most code bytes that fit)."""
    per_vector = budget / rows
    if wanted.kind == "ivf-pq" and wanted.pq_bytes is None:
        pq = pq_bytes_for(dim, per_vector)
        if pq is None:
            raise ConfigError(f"--memory: {budget / 2 ** 30:.3g} GB holds no index of {rows} vectors")
        return IndexChoice(wanted.model_copy(update={"pq_bytes": pq}), f"{why}; {pq} code bytes per vector fit")
    needs = wanted.model_copy(update={"dims": dim}).bytes_per_vector
    if needs > per_vector:
        raise ConfigError(f"--memory: a {wanted.kind} index of {rows} x {dim} needs {needs * rows / 2 ** 30:.3g} GB, "
                          f"over the {budget / 2 ** 30:.3g} GB budget")
    return IndexChoice(wanted, why)
