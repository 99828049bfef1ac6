"""Top-k inner-product search over an embedding gallery (faiss), plus a numpy reference.

Embeddings are L2-normalised, so inner product == cosine similarity.  ``exact`` uses a flat
index (brute force, BLAS-blocked inside faiss); ``ivf`` is an inverted-file index for very
large galleries: it visits only ``nprobe`` of ``nlist`` clusters, trading recall for speed.
"""

from __future__ import annotations

import math

import faiss
import numpy as np

INDEX_KINDS: tuple[str, ...] = ("exact", "ivf")


def _as_float32(matrix: np.ndarray, name: str) -> np.ndarray:
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {matrix.shape}")
    return matrix


def build_index(gallery: np.ndarray, kind: str = "exact", nlist: int | None = None,
                nprobe: int | None = None, seed: int = 0) -> faiss.Index:
    """An inner-product index holding ``gallery`` (N, D)."""
    gallery = _as_float32(gallery, "gallery")
    if gallery.shape[0] == 0:
        raise ValueError("empty gallery: nothing to search")
    dim = gallery.shape[1]
    if kind == "exact":
        index = faiss.IndexFlatIP(dim)
    elif kind == "ivf":
        # ~4 sqrt(N) lists is the usual faiss guidance; at least 39 training points per list.
        nlist = nlist or max(1, min(int(4 * math.sqrt(gallery.shape[0])), gallery.shape[0] // 39))
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = seed
        index.train(gallery)
        index.nprobe = nprobe or max(1, nlist // 8)
    else:
        raise ValueError(f"unknown index kind {kind!r}; expected one of {INDEX_KINDS}")
    index.add(gallery)
    return index


def search(index: faiss.Index, queries: np.ndarray, k: int,
           batch_size: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, ids)`` of shape (Q, k), best first; ids are -1 where fewer than k exist."""
    queries = _as_float32(queries, "queries")
    k = min(int(k), index.ntotal)
    if k <= 0:
        raise ValueError("k must be positive and the index non-empty")
    scores = np.empty((queries.shape[0], k), dtype=np.float32)
    ids = np.empty((queries.shape[0], k), dtype=np.int64)
    for start in range(0, queries.shape[0], batch_size):
        stop = start + batch_size
        scores[start:stop], ids[start:stop] = index.search(queries[start:stop], k)
    return scores, ids


def numpy_topk(queries: np.ndarray, gallery: np.ndarray, k: int,
               query_chunk: int = 1024, gallery_chunk: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by chunked matmul + argpartition: the reference faiss is checked against.

    Chunking both sides bounds memory to ``query_chunk x (gallery_chunk + k)`` scores.
    """
    queries = _as_float32(queries, "queries")
    gallery = _as_float32(gallery, "gallery")
    if gallery.shape[0] == 0:
        raise ValueError("empty gallery: nothing to search")
    k = min(int(k), gallery.shape[0])
    out_scores = np.empty((queries.shape[0], k), dtype=np.float32)
    out_ids = np.empty((queries.shape[0], k), dtype=np.int64)
    for q_start in range(0, queries.shape[0], query_chunk):
        query_block = queries[q_start:q_start + query_chunk]
        best_scores = np.full((len(query_block), 0), -np.inf, dtype=np.float32)
        best_ids = np.zeros((len(query_block), 0), dtype=np.int64)
        for g_start in range(0, gallery.shape[0], gallery_chunk):
            block = query_block @ gallery[g_start:g_start + gallery_chunk].T
            block_k = min(k, block.shape[1])
            top = np.argpartition(-block, block_k - 1, axis=1)[:, :block_k]
            merged_scores = np.concatenate([best_scores, np.take_along_axis(block, top, axis=1)], axis=1)
            merged_ids = np.concatenate([best_ids, top + g_start], axis=1)
            keep = min(k, merged_scores.shape[1])
            top = np.argpartition(-merged_scores, keep - 1, axis=1)[:, :keep]
            best_scores = np.take_along_axis(merged_scores, top, axis=1)
            best_ids = np.take_along_axis(merged_ids, top, axis=1)
        order = np.argsort(-best_scores, axis=1, kind="stable")
        out_scores[q_start:q_start + query_chunk] = np.take_along_axis(best_scores, order, axis=1)
        out_ids[q_start:q_start + query_chunk] = np.take_along_axis(best_ids, order, axis=1)
    return out_scores, out_ids
