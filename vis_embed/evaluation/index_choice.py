"""Which exact gallery search ``--index auto`` runs on this machine.

Every exact kind returns the same top-k; they differ only in speed, and which is fastest
depends on the hardware:

- a GPU torch can use: ``exact-gpu`` (float32 products and top-k on the GPU);
- a CPU with AMX (``amx_bf16``): ``exact-bf16`` -- its bf16 products run several times faster
  than float32 ones, so the bf16 shortlist wins clearly;
- a CPU with ``avx512_bf16`` but no AMX: bf16 products are at most ~2x float32, which the
  shortlist's overhead may eat, so a short calibration (one timed search of each kind on a
  synthetic gallery of the real width) decides;
- any other CPU: ``exact`` (faiss): without native bf16 products every bf16 product is
  converted in software and the shortlist is ~4x slower than numpy.

The decision is made once per process and width, and is reported in results.json.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass

import faiss
import numpy as np
import torch

from vis_embed.evaluation.search_bf16 import Bf16ShortlistIndex, check_bf16_products
from vis_embed.provenance import cpu_flags  # the one /proc/cpuinfo reader

log = logging.getLogger(__name__)

AUTO = "auto"
# the calibration: large enough that products dominate the search, small enough to take about a second
CALIBRATION_GALLERY, CALIBRATION_QUERIES, CALIBRATION_REPEATS = 8192, 256, 2


@dataclass(frozen=True)
class IndexChoice:
    kind: str      # the index kind that runs: one of search.INDEX_KINDS except "auto"
    reason: str    # why, in words (recorded next to the kind in results.json)


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
        return IndexChoice("exact-gpu", "torch sees a GPU")
    flags = cpu_flags()
    if "amx_bf16" in flags and bf16_shortlist_usable(dim):
        return IndexChoice("exact-bf16", "CPU has AMX (native bf16 matrix products)")
    if "avx512_bf16" in flags and bf16_shortlist_usable(dim):
        if bf16_faster_than_faiss(dim):
            return IndexChoice("exact-bf16", "CPU has avx512_bf16; calibration: bf16 shortlist faster than faiss")
        return IndexChoice("exact", "CPU has avx512_bf16; calibration: faiss faster than the bf16 shortlist")
    return IndexChoice("exact", "no GPU and no native bf16 matrix products on this CPU")


def resolve_index(kind: str, dim: int) -> IndexChoice:
    """``kind`` itself, or for ``auto`` the machine's fastest exact kind."""
    if kind != AUTO:
        return IndexChoice(kind, "requested")
    return choose_index(dim)
