"""Search on quantized codes, optionally re-ranked with float vectors (sentence-transformers'
``semantic_search_faiss`` / ``semantic_search_usearch`` with a rescore multiplier).

- ``binary``: faiss ``IndexBinaryFlat`` on the packed sign bits (Hamming distance), 1 bit a
  dimension: 32x less than float32.  Without rescoring a hit's score is ``1 - 2 h / d`` (the
  cosine of the two sign vectors), so higher is better as for every other kind.
- ``int8``: faiss ``IndexScalarQuantizer`` with ``QT_8bit`` (each dimension's [min, max] range
  learnt from the gallery cut into 256 steps: the int8 calibration of
  :func:`vis_embed.vectors.transforms.quantize`, done by faiss) and inner-product scores.

``rescore`` K: the codes shortlist ``K x k`` hits, which are scored again as float32 inner
products of the query with the float gallery vectors (``vectors``; a memory-mapped ``.npy``
works: only the shortlisted rows are read) and the best ``k`` kept.
"""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np

from vis_embed.gallery.hit_order import hit_order
from vis_embed.vectors.index_spec import RESCORED_KINDS as CODE_KINDS  # binary, int8, ivf-pq
from vis_embed.vectors.transforms import quantize


def binary_codes_index(gallery: np.ndarray) -> faiss.IndexBinaryFlat:
    codes = quantize(gallery, "ubinary")
    index = faiss.IndexBinaryFlat(codes.shape[1] * 8)  # packbits pads to whole bytes with 0 bits
    index.add(codes)
    return index


def int8_codes_index(gallery: np.ndarray) -> faiss.Index:
    index = faiss.IndexScalarQuantizer(gallery.shape[1], faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
    index.train(gallery)
    index.add(gallery)
    return index


class QuantizedIndex:
    """``.search(queries, k) -> (scores, ids)`` over codes (see the module docstring)."""

    def __init__(self, kind: str, codes: Any, dim: int, vectors: np.ndarray | None = None, rescore: int = 0) -> None:
        if kind not in CODE_KINDS:
            raise ValueError(f"unknown quantized kind {kind!r} (known: {', '.join(CODE_KINDS)})")
        if rescore and vectors is None:
            raise ValueError("rescore needs the float vectors")
        self.kind, self.codes, self.dim, self.vectors, self.rescore = kind, codes, dim, vectors, int(rescore)

    @classmethod
    def build(cls, gallery: np.ndarray, kind: str, rescore: int = 0) -> QuantizedIndex:
        gallery = np.ascontiguousarray(gallery, dtype=np.float32)
        codes = binary_codes_index(gallery) if kind == "binary" else int8_codes_index(gallery)
        return cls(kind, codes, gallery.shape[1], gallery if rescore else None, rescore)

    @property
    def ntotal(self) -> int:
        return int(self.codes.ntotal)

    def _codes_search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.kind != "binary":
            return self.codes.search(queries, k)
        distances, ids = self.codes.search(quantize(queries, "ubinary"), k)
        return (1.0 - 2.0 * distances.astype(np.float32) / self.dim).astype(np.float32), ids.astype(np.int64)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        k = min(int(k), self.ntotal)
        if not self.rescore:
            return self._codes_search(queries, k)
        _scores, shortlist = self._codes_search(queries, min(self.ntotal, k * self.rescore))
        return rescored(queries, shortlist, self.vectors, k)


RESCORE_BLOCK_FLOATS = 2 ** 22  # the gathered floats of one block of queries (16 MB)


def rescored(queries: np.ndarray, shortlist: np.ndarray, vectors: np.ndarray, k: int,
             block_floats: int = RESCORE_BLOCK_FLOATS) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` of each query's ``shortlist`` ids by float32 inner product with ``vectors``
    (ties: the smaller id first); -1 ids (an index short of hits) come last with score -inf.
    Queries go in blocks whose gathered (block, shortlist, dim) floats stay under ``block_floats``
    (one query's at least): 1,024 queries at k 1000 gathered 700 MB at once at width 128."""
    scores = np.empty((len(queries), k), dtype=np.float32)
    ids = np.empty((len(queries), k), dtype=np.int64)
    block = max(1, block_floats // max(1, shortlist.shape[1] * queries.shape[1]))
    for start in range(0, len(queries), block):
        candidates = shortlist[start:start + block]
        missing = candidates < 0
        gathered = np.asarray(vectors[np.where(missing, 0, candidates).ravel()], dtype=np.float32)
        gathered = gathered.reshape(*candidates.shape, -1)
        block_scores = np.einsum("qsd,qd->qs", gathered, queries[start:start + block])
        block_scores[missing] = -np.inf
        order = hit_order(block_scores, candidates)[:, :k]  # missing (-1) last
        scores[start:start + block] = np.take_along_axis(block_scores, order, axis=1)
        ids[start:start + block] = np.where(np.take_along_axis(missing, order, axis=1), -1,
                                            np.take_along_axis(candidates, order, axis=1))
    return scores, ids
