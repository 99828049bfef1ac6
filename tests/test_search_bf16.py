"""The bf16-shortlist index is an *exact* search: its error bound must hold, and its answers
must equal float32 brute force -- including where bf16 cannot tell rows apart."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vis_embed.gallery import search, search_bf16
from vis_embed.vectors.index_spec import IndexSpec


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    rows = rng.standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def brute_force(queries: np.ndarray, gallery: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best k by float64 scores, ties to the smaller id."""
    full = queries.astype(np.float64) @ gallery.astype(np.float64).T
    ids = np.lexsort((np.broadcast_to(np.arange(gallery.shape[0]), full.shape), -full), axis=1)[:, :k]
    return np.take_along_axis(full, ids, axis=1), ids


@pytest.mark.parametrize("n_gallery,k,gallery_chunk,shortlist", [
    (3000, 10, 512, 32),     # many chunks, each truncated to its shortlist
    (3000, 50, 700, 8),      # k above the shortlist: every chunk hands over k
    (300, 300, 128, 32),     # the whole gallery
    (100, 7, 4096, 32),      # gallery smaller than one chunk
])
def test_equals_brute_force(n_gallery: int, k: int, gallery_chunk: int, shortlist: int) -> None:
    rng = np.random.default_rng(n_gallery + k)
    gallery, queries = unit_rows(rng, n_gallery, 48), unit_rows(rng, 70, 48)
    index = search_bf16.Bf16ShortlistIndex(gallery, gallery_chunk=gallery_chunk, query_chunk=32, shortlist=shortlist)
    scores, ids = search.search(index, queries, k)
    expected_scores, expected_ids = brute_force(queries, gallery, k)
    assert np.array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, rtol=0, atol=1e-6)
    assert index.n_fallback_queries == 0  # random data: the bound certifies every query


def test_build_index_kind_and_faiss_agree() -> None:
    rng = np.random.default_rng(3)
    gallery, queries = unit_rows(rng, 2000, 32), unit_rows(rng, 40, 32)
    bf16_scores, bf16_ids = search.search(search.build_index(gallery, IndexSpec.named("exact-bf16")), queries, 10)
    faiss_scores, faiss_ids = search.search(search.build_index(gallery, IndexSpec.named("exact")), queries, 10)
    assert np.array_equal(bf16_ids, faiss_ids)
    np.testing.assert_allclose(bf16_scores, faiss_scores, atol=1e-6)


def test_rows_bf16_cannot_separate_are_ranked_exactly() -> None:
    """Near-duplicates of the query that differ below bf16 resolution (and more of them than a
    chunk hands over) defeat the shortlist: the index must notice and still answer exactly."""
    rng = np.random.default_rng(4)
    queries = unit_rows(rng, 3, 64)
    base = np.repeat(queries, 60, axis=0)
    near = base + 1e-5 * rng.standard_normal(base.shape).astype(np.float32)
    gallery = np.concatenate([unit_rows(rng, 500, 64), near, near[:5]])  # exact duplicates tie
    gallery = gallery[rng.permutation(len(gallery))]
    index = search_bf16.Bf16ShortlistIndex(gallery, gallery_chunk=256, query_chunk=2, shortlist=16)
    _, ids = index.search(queries, 20)
    _, expected_ids = brute_force(queries, gallery, 20)
    assert np.array_equal(ids, expected_ids)
    assert index.n_fallback_queries > 0


def test_error_bound_holds_on_unnormalised_data() -> None:
    """|bf16 score - true score| <= E_q + 2^-8 |bf16 score| for the product the index uses,
    on rows of very different norms and a few large coordinates."""
    rng = np.random.default_rng(5)
    gallery = (rng.standard_normal((4000, 96)) * rng.uniform(0.01, 30, (4000, 1))).astype(np.float32)
    gallery[::7, 3] *= 1000
    queries = (rng.standard_normal((64, 96)) * rng.uniform(0.01, 30, (64, 1))).astype(np.float32)
    index = search_bf16.Bf16ShortlistIndex(gallery)
    query_tensor = torch.from_numpy(queries)
    approx = (query_tensor.to(torch.bfloat16) @ index.gallery_bf16.T).double()
    true = torch.from_numpy(queries.astype(np.float64) @ gallery.astype(np.float64).T)
    allowed = index.score_bound(query_tensor)[:, None] + 2.0 ** -8 * approx.abs()
    assert bool(((approx - true).abs() <= allowed).all())
    # and the bound is not vacuous: it is within a few hundred times the largest real error
    assert float(allowed.max()) < 300 * float((approx - true).abs().max())


def test_bad_input_is_rejected() -> None:
    rng = np.random.default_rng(6)
    gallery = unit_rows(rng, 50, 8)
    with pytest.raises(ValueError, match="empty gallery"):
        search_bf16.Bf16ShortlistIndex(np.zeros((0, 8), dtype=np.float32))
    bad = gallery.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        search_bf16.Bf16ShortlistIndex(bad)
    index = search_bf16.Bf16ShortlistIndex(gallery)
    with pytest.raises(ValueError, match="dimension"):
        index.search(unit_rows(rng, 2, 9), 3)
    with pytest.raises(ValueError, match="NaN"):
        index.search(np.full((1, 8), np.inf, dtype=np.float32), 3)


def test_a_product_that_rounds_partial_sums_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound assumes float32 accumulation; a bf16 product that rounds its partial sums
    (blocks of 64 terms here) must be detected before the index trusts it."""
    real_mm = torch.mm

    def blocked_mm(a: torch.Tensor, b: torch.Tensor, **kwargs) -> torch.Tensor:
        total = torch.zeros(a.shape[0], b.shape[1], dtype=torch.bfloat16)
        for start in range(0, a.shape[1], 64):
            total = (total.float() + real_mm(a[:, start:start + 64], b[start:start + 64]).float()).to(torch.bfloat16)
        return total

    search_bf16.check_bf16_products(1536)  # this machine's torch.mm passes
    monkeypatch.setattr(torch, "mm", blocked_mm)
    with pytest.raises(RuntimeError, match="does not accumulate in float32"):
        search_bf16.check_bf16_products(1536)
    with pytest.raises(RuntimeError, match="use --index flat"):
        search_bf16.Bf16ShortlistIndex(unit_rows(np.random.default_rng(7), 10, 1536))
