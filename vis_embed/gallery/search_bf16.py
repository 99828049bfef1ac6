"""Exact top-k inner-product search that does the heavy matrix product in bfloat16.

The ``exact-bf16`` index kind of :mod:`vis_embed.gallery.search`: a bf16 product shortlists
candidates with a proven error bound and only the shortlist is scored exactly.  Fast where bf16
matrix products are native (CPUs with AMX); :mod:`vis_embed.gallery.index_choice` decides
where ``--index auto`` uses it.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from vis_embed.gallery.hit_order import hit_order


def float32_matrix(matrix: np.ndarray, name: str) -> np.ndarray:
    """``matrix`` as a contiguous float32 2-D array (a copy only where needed); ``name`` is what
    the error calls it when it is not 2-D.  The one input check of both search modules."""
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {matrix.shape}")
    return matrix



_FLOAT32_UNIT_ROUNDOFF = 2.0 ** -24
# bf16 keeps 8 significant bits: rounding s to the nearest bf16 value v moves it by at most half
# a unit in the last place, 2^-8 * 2^e, where 2^e <= |v| is the start of v's binade (a power of
# two is representable, so rounding never leaves the binade downwards): |v - s| <= 2^-8 |v|.
# (Scores far below 1e-38, where bf16 underflows, are outside this bound.)
_BF16_RELATIVE_ERROR = 2.0 ** -8


def check_bf16_products(dim: int, rows: int = 256, seed: int = 0) -> None:
    """Check that ``torch.mm`` on bf16 accumulates in float32 and rounds once, as the bound of
    :class:`Bf16ShortlistIndex` assumes (oneDNN, on x86 CPUs, does); raise if not.

    Sums of ``dim`` positive bf16 values in [1, 2) are exact in float32 (< 24 bits), so a
    float32-accumulating product is off only by its final rounding (<= 2^-8 |v|); one that
    rounds partial sums to bf16 drifts 2-3x beyond that on some of ``rows`` such sums.
    """
    dim = min(dim, 2**16)  # beyond 2^16 terms the float32 sum itself stops being exact
    generator = torch.Generator().manual_seed(seed)
    gallery = (1 + torch.rand(rows, dim, generator=generator)).to(torch.bfloat16)
    product = torch.mm(torch.ones(1, dim, dtype=torch.bfloat16), gallery.T).double()[0]
    exact = gallery.double().sum(dim=1)
    if bool(((product - exact).abs() > _BF16_RELATIVE_ERROR * product.abs()).any()):
        raise RuntimeError("this torch build's bf16 matrix product does not accumulate in float32 "
                           "(partial sums are rounded), so exact-bf16 cannot certify its results; "
                           "use --index flat")


class Bf16ShortlistIndex:
    """Exact top-k inner-product search that does the heavy matrix product in bfloat16.

    Exact search is one (queries x gallery) matrix product; bf16 products run 4-8x faster than
    float32 ones on CPUs with AMX, but round scores.  This index uses them only to
    *shortlist*, with a bound on the rounding that makes the result exact:

    1. Scores ``v`` from bf16 queries q~ and gallery rows x~, accumulated in float32 and rounded
       to bf16, differ from the true scores ``s = q . x`` by at most
       ``err(v) = E_q + 2^-8 |v|`` with
       ``E_q = |q - q~| max|x| + |q~| max|x - x~| + gamma_D |q~| max|x~|``
       (Cauchy-Schwarz on ``q.x - q~.x~ = (q - q~).x + q~.(x - x~)``; ``gamma_D = D u / (1 - D u)``
       bounds float32 accumulation over D terms, u = 2^-24; 2^-8 |v| bounds the output rounding).
    2. The k best shortlisted rows all have true scores >= ``L = v_k - err(v_k)`` (v_k: the k-th
       best bf16 score), so the true k-th best score is >= L, and any row with
       ``v + err(v) < L`` cannot be in the top k.  All other rows are re-scored exactly (float64
       dot products of the float32 vectors) and the best k returned.
    3. Each gallery chunk hands over only its ``shortlist`` best bf16 scores.  If a chunk's last
       handed-over score could still reach L, the query is not certified and is searched again
       by float64 brute force -- the answer is exact in every case, only slower.

    Ties in the final ranking go to the smaller gallery id.  The float32 gallery is referenced,
    not copied; the index adds a bf16 copy (N x D x 2 bytes).
    """

    def __init__(self, gallery: np.ndarray, gallery_chunk: int = 65536, query_chunk: int = 1024,
                 shortlist: int = 32) -> None:
        gallery = float32_matrix(gallery, "gallery")
        if gallery.shape[0] == 0:
            raise ValueError("empty gallery: nothing to search")
        check_bf16_products(gallery.shape[1])
        self.gallery = gallery
        self.gallery_chunk, self.query_chunk, self.shortlist = gallery_chunk, query_chunk, shortlist
        self.gallery_bf16 = torch.empty(gallery.shape, dtype=torch.bfloat16)
        max_norm = max_rounding = max_bf16_norm = 0.0
        for start in range(0, len(gallery), gallery_chunk):
            block = torch.from_numpy(gallery[start:start + gallery_chunk])
            if not torch.isfinite(block).all():
                raise ValueError("gallery holds NaN or infinite values")
            rounded = block.to(torch.bfloat16)
            self.gallery_bf16[start:start + len(block)] = rounded
            low = rounded.float()  # exact; so is block - low (the bits bf16 dropped)
            max_norm = max(max_norm, float(block.norm(dim=1).max()))
            max_rounding = max(max_rounding, float((block - low).norm(dim=1).max()))
            max_bf16_norm = max(max_bf16_norm, float(low.norm(dim=1).max()))
        # float32 norms of D terms are off by < D 2^-24 relative (< 1e-4 for D <= 1600): 0.1% covers it
        safety = 1 + max(1e-3, 2 * gallery.shape[1] * _FLOAT32_UNIT_ROUNDOFF)
        max_norm, max_rounding, max_bf16_norm = (safety * v for v in (max_norm, max_rounding, max_bf16_norm))
        self._max_norm, self._max_rounding, self._max_bf16_norm = max_norm, max_rounding, max_bf16_norm
        self.n_fallback_queries = 0  # queries the bound could not certify (searched by brute force)
        self.n_rescored = 0  # (query, row) pairs re-scored exactly: the shortlist's real size

    @property
    def ntotal(self) -> int:
        return self.gallery.shape[0]

    def score_bound(self, queries: torch.Tensor) -> torch.Tensor:
        """``E_q`` of the class docstring, per query (float64)."""
        dim = queries.shape[1]
        gamma = dim * _FLOAT32_UNIT_ROUNDOFF / (1 - dim * _FLOAT32_UNIT_ROUNDOFF)
        exact, low = queries.double(), queries.to(torch.bfloat16).double()
        low_norm = low.norm(dim=1)
        bound = ((exact - low).norm(dim=1) * self._max_norm + low_norm * self._max_rounding
                 + gamma * low_norm * self._max_bf16_norm)
        return bound * (1 + 1e-6)  # headroom for the float64 rounding of the bound itself

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)`` of shape (Q, k), best first (scores are float32)."""
        queries = float32_matrix(queries, "queries")
        if queries.shape[1] != self.gallery.shape[1]:
            raise ValueError(f"queries have dimension {queries.shape[1]}, the gallery {self.gallery.shape[1]}")
        if not np.isfinite(queries).all():
            raise ValueError("queries hold NaN or infinite values")
        k = min(int(k), self.ntotal)
        if k <= 0:
            raise ValueError("k must be positive")
        scores = np.empty((len(queries), k), dtype=np.float32)
        ids = np.empty((len(queries), k), dtype=np.int64)
        for start in range(0, len(queries), self.query_chunk):
            stop = start + self.query_chunk
            scores[start:stop], ids[start:stop] = self._search_block(queries[start:stop], k)
        return scores, ids

    def _shortlist(self, queries_bf16: torch.Tensor, keep: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per query: the ``keep`` best bf16 scores of every gallery chunk, their ids, and per
        chunk the lowest handed-over score (-inf where the chunk was handed over whole)."""
        n_queries = len(queries_bf16)
        # one preallocated product buffer: a fresh 100+ MB tensor per chunk costs page faults
        buffer = torch.empty(n_queries * min(self.gallery_chunk, self.ntotal), dtype=torch.bfloat16)
        values, ids, floors = [], [], []
        for start in range(0, self.ntotal, self.gallery_chunk):
            chunk = self.gallery_bf16[start:start + self.gallery_chunk]
            product = buffer[:n_queries * len(chunk)].view(n_queries, len(chunk))
            torch.mm(queries_bf16, chunk.T, out=product)
            chunk_keep = min(keep, len(chunk))
            top = torch.topk(product, chunk_keep, dim=1)
            values.append(top.values.float())
            ids.append(top.indices + start)
            floors.append(top.values[:, -1].float() if chunk_keep < len(chunk)
                          else torch.full((n_queries,), -math.inf))
        return torch.cat(values, dim=1).double(), torch.cat(ids, dim=1), torch.stack(floors, dim=1).double()

    def _search_block(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        query_tensor = torch.from_numpy(queries)
        bound = self.score_bound(query_tensor)[:, None]
        values, candidate_ids, floors = self._shortlist(query_tensor.to(torch.bfloat16), max(self.shortlist, k))
        kth = torch.topk(values, k, dim=1).values[:, -1:]
        lower = kth - bound - _BF16_RELATIVE_ERROR * kth.abs()  # true k-th best score >= lower

        def may_reach(v: torch.Tensor) -> torch.Tensor:
            return v + bound + _BF16_RELATIVE_ERROR * v.abs() >= lower

        certified = ~may_reach(floors).any(dim=1)
        candidates = may_reach(values) & certified[:, None]
        scores = np.empty((len(queries), k), dtype=np.float32)
        ids = np.empty((len(queries), k), dtype=np.int64)
        for q in np.flatnonzero(certified.numpy()):  # every certified query has >= k candidates
            rows = candidate_ids[q][candidates[q]].numpy()
            self.n_rescored += len(rows)
            # float64 dot products of the float32 vectors; one query at a time keeps the
            # gathered rows in cache (a 10x difference over one big gather)
            exact = self.gallery[rows].astype(np.float64) @ queries[q].astype(np.float64)
            best = hit_order(exact, rows)[:k]
            scores[q], ids[q] = exact[best], rows[best]
        uncertified = np.flatnonzero(~certified.numpy())
        if len(uncertified):
            self.n_fallback_queries += len(uncertified)
            scores[uncertified], ids[uncertified] = self._brute_force(queries[uncertified], k)
        return scores, ids

    def _brute_force(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """float64 brute force for the queries the bound could not certify (rare, slow):
        the same scores and tie order as the certified path."""
        queries = queries.astype(np.float64)
        kept_scores: list[list[np.ndarray]] = [[] for _ in queries]
        kept_ids: list[list[np.ndarray]] = [[] for _ in queries]
        for start in range(0, self.ntotal, self.gallery_chunk):
            block = queries @ self.gallery[start:start + self.gallery_chunk].astype(np.float64).T
            kth = -np.partition(-block, min(k, block.shape[1]) - 1, axis=1)[:, min(k, block.shape[1]) - 1]
            for q, row in enumerate(block):
                keep = np.flatnonzero(row >= kth[q])  # every row tied with the k-th stays
                kept_scores[q].append(row[keep])
                kept_ids[q].append(keep + start)
        scores = np.empty((len(queries), k), dtype=np.float32)
        ids = np.empty((len(queries), k), dtype=np.int64)
        for q in range(len(queries)):
            row_scores, row_ids = np.concatenate(kept_scores[q]), np.concatenate(kept_ids[q])
            best = hit_order(row_scores, row_ids)[:k]
            scores[q], ids[q] = row_scores[best], row_ids[best]
        return scores, ids
