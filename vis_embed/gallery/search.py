"""Top-k inner-product search over an embedding gallery, plus a numpy reference.

Embeddings are L2-normalised, so inner product == cosine similarity.  :func:`build_index` is the
one factory: an :class:`~vis_embed.vectors.index_spec.IndexSpec` in, a searchable index out,
whatever the kind:

- ``auto``: resolved first by :func:`vis_embed.gallery.index_choice.resolve_index` (the fastest
  exact search on this machine: a GPU, AMX, or faiss);
- ``flat``: faiss flat index (float32 brute force, BLAS-blocked inside faiss); at ``precision``
  bfloat16 (alias ``exact-bf16``) :class:`~vis_embed.gallery.search_bf16.Bf16ShortlistIndex`, the
  same exact top-k, found faster where bf16 matrix products are native (CPUs with AMX): a bf16
  product shortlists candidates with a *proven* error bound, and only the shortlist is scored
  exactly; on ``device`` gpu (alias ``exact-gpu``) :class:`TorchExactIndex`, float32 products and
  top-k on a torch device;
- ``ivf-flat`` (alias ``ivf``) / ``ivf-pq``: inverted-file indexes for very large galleries: they
  visit only ``nprobe`` of ``nlist`` clusters, trading recall for speed (approximate);
- ``binary`` / ``int8``: quantized codes (1 bit / 1 byte a dimension,
  :mod:`vis_embed.gallery.quantized_index`), approximate; ``rescore`` K re-ranks a K x k
  shortlist with the float vectors (ivf-pq too).

Ties: one policy, higher score first, then the smaller row id (:func:`tie_order`, applied by
:func:`search` to every kind's hits: faiss returns equal scores by descending id, torch in no
fixed order).  Which of the rows tied at the k-th score make the cut follows it too for the exact
kinds, each of which would otherwise keep an arbitrary subset of them: :func:`numpy_topk` and
:class:`TorchExactIndex` keep every tied row before choosing,
:class:`~vis_embed.gallery.search_bf16.Bf16ShortlistIndex` re-scores them all, and a faiss flat
index searched by :func:`search` looks deeper for a query whose tie crosses the k-th place
(:func:`_flat_search`).  A gallery of repeated vectors gives every exact kind the same hits.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Protocol

import faiss
import numpy as np
import torch

from vis_embed.gallery.hit_order import hit_order  # the one tie rule (quantized_index and search_bf16 call it too)
from vis_embed.gallery.index_choice import resolve_index  # the one chooser of an index kind
from vis_embed.vectors.index_spec import IVF_MIN_POINTS, IndexSpec, default_nprobe, ivf_lists
from vis_embed.gallery.quantized_index import QuantizedIndex
from vis_embed.gallery.search_bf16 import Bf16ShortlistIndex, float32_matrix

__all__ = ["SearchIndex", "TorchExactIndex", "build_index", "non_finite_rows", "numpy_topk", "search", "tie_order"]


class SearchIndex(Protocol):
    """What every index :func:`build_index` returns answers -- faiss's own interface (a faiss index
    is one as it is), which the project's kinds (:class:`TorchExactIndex`,
    :class:`Bf16ShortlistIndex`, :class:`QuantizedIndex`) implement too."""

    ntotal: int  # vectors held

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)`` of shape (Q, k), best first; ids -1 past the vectors held."""
        ...

def non_finite_rows(matrix: np.ndarray) -> np.ndarray:
    """The rows of a 2-D ``matrix`` holding NaN or an infinity (what errors name: the first)."""
    return np.flatnonzero(~np.isfinite(matrix).all(axis=1))


def _finite(matrix: np.ndarray, name: str) -> np.ndarray:
    """``matrix`` (float32, 2-D) when every row is finite; else ValueError naming the first bad
    row: faiss silently drops a NaN gallery vector and scores a NaN query 0."""
    matrix = float32_matrix(matrix, name)
    bad = non_finite_rows(matrix)
    if len(bad):
        raise ValueError(f"{name} row {int(bad[0])} is NaN or infinite ({len(bad)} such rows)")
    return matrix


# ivf-pq trains on at most this many rows (a seeded sample): its product quantizer's training is the
# slow part (minutes at 1,536 dimensions); ivf-flat trains its lists on every row
PQ_TRAIN_ROWS = 100_000
# score matrix of one TorchExactIndex query block: at most this many float32 values (1 GiB)
_GPU_BLOCK_VALUES = 2 ** 28


@contextlib.contextmanager
def _full_float32_products() -> Iterator[None]:
    """float32 matrix products without TF32 (or bf16) shortcuts, whatever the process set."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


class TorchExactIndex:
    """Exact top-k on a torch device: float32 products (``highest`` precision) and ``torch.topk``.

    The gallery is copied to the device once; queries go in blocks whose score matrix stays
    under 1 GiB.  Scores are float32 sums as in faiss.  ``torch.topk`` keeps an arbitrary subset
    of the rows tied at the k-th score, so those queries choose again (:func:`_smallest_tied`).
    """

    def __init__(self, gallery: np.ndarray, device: str | torch.device = "cuda") -> None:
        gallery = float32_matrix(gallery, "gallery")
        if gallery.shape[0] == 0:
            raise ValueError("empty gallery: nothing to search")
        self.device = torch.device(device)
        self.gallery = torch.from_numpy(gallery).to(self.device)

    @property
    def ntotal(self) -> int:
        return self.gallery.shape[0]

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = float32_matrix(queries, "queries")
        k = min(int(k), self.ntotal)
        block = max(1, _GPU_BLOCK_VALUES // self.ntotal)
        scores, ids = [], []
        with _full_float32_products(), torch.no_grad():
            for start in range(0, len(queries), block):
                query_block = torch.from_numpy(queries[start:start + block]).to(self.device)
                products = query_block @ self.gallery.T
                top = torch.topk(products, k, dim=1)
                values, indices = _smallest_tied(products, top.values, top.indices)
                scores.append(values.cpu().numpy())
                ids.append(indices.cpu().numpy())
        if not scores:
            return np.empty((0, k), dtype=np.float32), np.empty((0, k), dtype=np.int64)
        return tie_order(np.concatenate(scores), np.concatenate(ids).astype(np.int64))


def _smallest_tied(products: torch.Tensor, values: torch.Tensor,
                   indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk``'s ``(values, indices)`` of ``products``, where more rows tie at a query's
    k-th score than it kept, chosen again: every row above it and the tied rows of smallest id.
    :func:`hit_order`'s rule, restated on the device: a tie may be the whole gallery (a collapsed
    model), which the host would sort per query; tests/test_gallery_search.py
    (test_the_torch_and_numpy_cuts_choose_the_tied_rows_by_one_rule) pins the two to the same hits."""
    k = values.shape[1]
    kth = values[:, -1:]
    for query in torch.nonzero((products >= kth).sum(dim=1) > k).flatten().tolist():  # rare: repeated rows
        row, bar = products[query], kth[query, 0]
        above = torch.nonzero(row > bar).flatten()
        chosen = torch.cat([above, torch.nonzero(row == bar).flatten()[:k - len(above)]])  # ascending ids
        values[query], indices[query] = row[chosen], chosen
    return values, indices


def tie_order(scores: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each query's hits in the one order of every kind (:func:`hit_order`).  A permutation within
    rows: which rows are hits is the index's.  Which of the rows tied at the k-th score make the
    cut is hit_order's first k too (:func:`_best_columns`, numpy; :func:`_whole_tie`, faiss flat);
    the torch device's cut restates it (:func:`_smallest_tied`, kept on the device for speed)."""
    order = hit_order(scores, ids)
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)


def build_index(gallery: np.ndarray, spec: IndexSpec, seed: int = 0) -> SearchIndex:
    """The one index factory: an inner-product index holding ``gallery`` (N, D) as ``spec`` (``auto``
    resolved by :func:`resolve_index` first; a name is parsed where it enters, with
    :meth:`IndexSpec.named`); every kind answers ``.search(queries, k)``.

    A code kind (binary, int8, ivf-pq) is a :class:`QuantizedIndex` whose ``.codes`` is the faiss
    index; a NaN or infinite row is an error.
    """
    if not isinstance(spec, IndexSpec):
        raise TypeError(f"build_index takes an IndexSpec (IndexSpec.named(name) for a name), got {spec!r}")
    gallery = _finite(gallery, "gallery")
    if gallery.shape[0] == 0:
        raise ValueError("empty gallery: nothing to search")
    rows, dim = gallery.shape
    spec = resolve_index(spec, dim, rows).spec  # auto chosen; width and ivf-pq's code bytes filled
    if spec.kind == "flat":
        if spec.precision == "bfloat16":
            return Bf16ShortlistIndex(gallery)
        if spec.device == "gpu":
            return TorchExactIndex(gallery)
        index = faiss.IndexFlatIP(dim)
        index.add(gallery)
        return index
    if spec.kind in ("binary", "int8"):  # codes, re-ranked with the float gallery when rescore > 0
        return QuantizedIndex.build(gallery, spec.kind, spec.rescore)
    return _ivf_index(gallery, spec, seed)


def _ivf_index(gallery: np.ndarray, spec: IndexSpec, seed: int) -> SearchIndex:
    """ivf-flat (faiss IndexIVFFlat) or ivf-pq (IndexIVFPQ in a QuantizedIndex) of ``gallery``."""
    rows, dim = gallery.shape
    nlist = spec.nlist or ivf_lists(rows)
    if spec.kind == "ivf-flat":
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
    else:  # at least IVF_MIN_POINTS training points per product-quantizer centroid
        nbits = 8 if rows >= 256 * IVF_MIN_POINTS else max(1, int(math.log2(max(2, rows // IVF_MIN_POINTS))))
        index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, nlist, spec.pq_bytes, nbits, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = seed
    sample = gallery if spec.kind == "ivf-flat" or rows <= PQ_TRAIN_ROWS else gallery[np.sort(
        np.random.default_rng(seed).choice(rows, PQ_TRAIN_ROWS, replace=False))]
    index.train(sample)
    index.add(gallery)
    index.nprobe = spec.nprobe or default_nprobe(spec.kind, nlist)
    if spec.kind == "ivf-flat":
        return index
    return QuantizedIndex("ivf-pq", index, dim, gallery if spec.rescore else None, spec.rescore)


def search(index: SearchIndex, queries: np.ndarray, k: int, batch_size: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, ids)`` of shape (Q, k), best first (ties: :func:`tie_order`); ids are -1 where
    fewer than k exist.  A NaN or infinite query is an error (every index kind)."""
    queries = _finite(queries, "queries")
    k = min(int(k), index.ntotal)
    if k <= 0:
        raise ValueError("k must be positive and the index non-empty")
    scores = np.empty((queries.shape[0], k), dtype=np.float32)
    ids = np.empty((queries.shape[0], k), dtype=np.int64)
    for start in range(0, queries.shape[0], batch_size):
        stop = start + batch_size
        found = _flat_search(index, queries[start:stop], k) if isinstance(index, faiss.IndexFlat) \
            else index.search(queries[start:stop], k)
        scores[start:stop], ids[start:stop] = tie_order(*found)
    return scores, ids


def _flat_search(index: faiss.IndexFlat, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A faiss flat search whose k hits follow the tie policy: faiss (1.15) keeps an arbitrary
    subset of the rows tied at the k-th score from k = 100 on (its reservoir).  One more hit is
    fetched; a query whose (k+1)-th score equals its k-th is searched again, deep enough to hold
    the whole tie, and chooses from it (rare but for repeated gallery rows)."""
    fetched = min(k + 1, index.ntotal)
    scores, ids = index.search(queries, fetched)
    if fetched > k:
        for query in np.flatnonzero(scores[:, k] == scores[:, k - 1]):
            scores[query, :k], ids[query, :k] = _whole_tie(index, queries[query:query + 1], k)
    return scores[:, :k], ids[:, :k]


def _whole_tie(index: faiss.IndexFlat, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """One query's k best by (higher score, smaller id), searched deeper until a score below its
    k-th shows the tie at the k-th is held whole (depth doubling: a tie costs its size, at most twice)."""
    depth = min(2 * k, index.ntotal)
    scores, ids = index.search(query, depth)
    while depth < index.ntotal and scores[0, -1] == scores[0, k - 1]:
        depth = min(2 * depth, index.ntotal)
        scores, ids = index.search(query, depth)
    best = hit_order(scores[0], ids[0])[:k]
    return scores[0, best], ids[0, best]


def numpy_topk(queries: np.ndarray, gallery: np.ndarray, k: int,
               query_chunk: int = 1024, gallery_chunk: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by chunked matmul + argpartition: the reference the indexes are checked against
(ties: every row tied at the k-th score is kept until the final :func:`tie_order`).

    Chunking both sides bounds memory to ``query_chunk x (gallery_chunk + k)`` scores; the score
    block is one preallocated buffer (a fresh one per block costs page faults).
    """
    queries = float32_matrix(queries, "queries")
    gallery = float32_matrix(gallery, "gallery")
    if gallery.shape[0] == 0:
        raise ValueError("empty gallery: nothing to search")
    k = min(int(k), gallery.shape[0])
    out_scores = np.empty((queries.shape[0], k), dtype=np.float32)
    out_ids = np.empty((queries.shape[0], k), dtype=np.int64)
    buffer = np.empty(min(query_chunk, len(queries)) * min(gallery_chunk, len(gallery)), dtype=np.float32)
    for q_start in range(0, queries.shape[0], query_chunk):
        query_block = queries[q_start:q_start + query_chunk]
        best_scores = np.full((len(query_block), 0), -np.inf, dtype=np.float32)
        best_ids = np.zeros((len(query_block), 0), dtype=np.int64)
        for g_start in range(0, gallery.shape[0], gallery_chunk):
            gallery_block = gallery[g_start:g_start + gallery_chunk]
            block = buffer[:len(query_block) * len(gallery_block)].reshape(len(query_block), len(gallery_block))
            np.matmul(query_block, gallery_block.T, out=block)
            block_ids = np.broadcast_to(np.arange(g_start, g_start + len(gallery_block)), block.shape)
            top = _best_columns(block, block_ids, min(k, block.shape[1]))
            merged_scores = np.concatenate([best_scores, np.take_along_axis(block, top, axis=1)], axis=1)
            merged_ids = np.concatenate([best_ids, top + g_start], axis=1)
            top = _best_columns(merged_scores, merged_ids, min(k, merged_scores.shape[1]))
            best_scores = np.take_along_axis(merged_scores, top, axis=1)
            best_ids = np.take_along_axis(merged_ids, top, axis=1)
        out_scores[q_start:q_start + query_chunk], out_ids[q_start:q_start + query_chunk] = \
            tie_order(best_scores, best_ids)
    return out_scores, out_ids


def _best_columns(scores: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Column indices of each row's ``k`` best entries by (higher score, smaller id), unordered.
    ``argpartition`` keeps an arbitrary subset of the entries tied at the k-th score, so the rows
    where more tie than it kept choose again among all of them."""
    n = scores.shape[1]
    top = np.argpartition(scores, n - k, axis=1)[:, n - k:]
    kth = np.take_along_axis(scores, top, axis=1).min(axis=1, keepdims=True)
    for row in np.flatnonzero((scores >= kth).sum(axis=1) > k):  # rare: repeated gallery rows
        candidates = np.flatnonzero(scores[row] >= kth[row, 0])
        top[row] = candidates[hit_order(scores[row, candidates], ids[row, candidates])[:k]]
    return top
