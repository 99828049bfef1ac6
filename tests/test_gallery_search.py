"""Quantized search (binary / int8 codes, float re-ranking) and eval's --index binary|int8,
--rescore and --dim."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from eval_fakes import DIM, FakeEncoder, make_identity_benchmark

from vis_embed.data import EvalDatasetSpec as DatasetSpec
from vis_embed.errors import ConfigError, DataError
from vis_embed.evaluation.harness import EvalSettings, Harness
from vis_embed.gallery.search import build_index, numpy_topk, search
from vis_embed.gallery.quantized_index import QuantizedIndex
from vis_embed.vectors.transforms import l2_normalise, truncate
from vis_embed.vectors.index_spec import IndexSpec


def _clustered(rows: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(1, rows // 4), dim))
    return l2_normalise(centres[rng.integers(0, len(centres), rows)] + 0.3 * rng.standard_normal((rows, dim)))


def test_binary_scores_are_the_cosine_of_the_sign_vectors() -> None:
    gallery, queries = _clustered(40, 20), _clustered(5, 20, seed=1)
    scores, ids = QuantizedIndex.build(gallery, "binary").search(queries, 40)
    signs_q, signs_g = np.where(queries > 0, 1.0, -1.0), np.where(gallery > 0, 1.0, -1.0)
    expected = signs_q @ signs_g.T / 20
    np.testing.assert_allclose(scores, np.take_along_axis(expected, ids, axis=1), atol=1e-6)
    assert (np.diff(scores, axis=1) <= 0).all()


@pytest.mark.parametrize("kind", ["binary", "int8"])
def test_a_rescore_covering_the_gallery_is_exact(kind: str) -> None:
    gallery, queries = _clustered(60, 24), _clustered(7, 24, seed=2)
    scores, ids = search(build_index(gallery, IndexSpec.named(kind, rescore=60)), queries, 5)
    exact_scores, exact_ids = numpy_topk(queries, gallery, 5)
    np.testing.assert_array_equal(ids, exact_ids)
    np.testing.assert_allclose(scores, exact_scores, rtol=1e-5)


def test_int8_codes_rank_almost_like_floats() -> None:
    gallery, queries = _clustered(400, 32), _clustered(50, 32, seed=3)
    _scores, ids = QuantizedIndex.build(gallery, "int8").search(queries, 1)
    _exact, exact_ids = numpy_topk(queries, gallery, 1)
    assert (ids[:, 0] == exact_ids[:, 0]).mean() >= 0.9


def test_rescore_reads_only_the_shortlist_from_a_memory_map(tmp_path: Path) -> None:
    gallery, queries = _clustered(80, 16), _clustered(4, 16, seed=4)
    np.save(tmp_path / "v.npy", gallery)
    index = QuantizedIndex.build(gallery, "binary")
    index.vectors, index.rescore = np.load(tmp_path / "v.npy", mmap_mode="r"), 80
    _scores, ids = index.search(queries, 3)
    np.testing.assert_array_equal(ids, numpy_topk(queries, gallery, 3)[1])


def _gallery_spec(files: dict[str, Path]) -> list[DatasetSpec]:
    return [DatasetSpec("Gal", "gallery", "Re-ID", "OOD", "MVEB", queries=files["queries"], gallery=files["gallery"],
                        image_root=files["images"], query_instruction="Find the same object.",
                        candidate_instruction="Represent the image.")]


def _run(out: Path, files: dict[str, Path], **settings) -> dict:
    return Harness(FakeEncoder(), out, EvalSettings(show_progress=False, pictures=False, **settings)).run(
        _gallery_spec(files))


def test_eval_binary_with_full_rescore_equals_exact_and_records_bytes(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    exact = _run(tmp_path / "exact", files, index="exact")["datasets"]["Gal"]
    binary = _run(tmp_path / "binary", files, index="binary", rescore=100)["datasets"]["Gal"]
    assert binary["metrics"] == exact["metrics"]
    assert (binary["index"], binary["rescore"], binary["bytes_per_vector"], binary["dim"]) == ("binary", 100, 2, DIM)
    assert exact["bytes_per_vector"] == 4 * DIM and "rescore" not in exact


class _TruncatingEncoder(FakeEncoder):
    def encode(self, *args, **kwargs) -> np.ndarray:
        return truncate(super().encode(*args, **kwargs), 4)


def test_eval_dim_scores_the_renormalised_prefix(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    cut = _run(tmp_path / "cut", files, index="exact", dim=4)
    by_hand = Harness(_TruncatingEncoder(), tmp_path / "hand", EvalSettings(
        show_progress=False, pictures=False, index="exact")).run(_gallery_spec(files))
    assert cut["dim"] == 4 and cut["datasets"]["Gal"]["dim"] == 4
    assert cut["datasets"]["Gal"]["metrics"] == by_hand["datasets"]["Gal"]["metrics"]


def test_rescore_needs_a_quantized_index() -> None:
    with pytest.raises(DataError, match="field 'rescore'.*--rescore re-ranks a binary or int8"):
        EvalSettings(index="exact", rescore=4)


def test_a_dim_wider_than_the_model_is_refused_before_encoding(tmp_path: Path) -> None:
    encoder = FakeEncoder()
    encoder.embedding_dim = DIM
    with pytest.raises(ConfigError, match=f"field '--dim': must be an integer from 1 to the model's width {DIM}"):
        Harness(encoder, tmp_path, EvalSettings(show_progress=False, dim=DIM + 1)).run(
            _gallery_spec(make_identity_benchmark(tmp_path / "data")))
    assert encoder.calls == []


def test_eval_searches_with_the_stores_kind_names(tmp_path: Path) -> None:
    """One vocabulary: `flat` is `exact` under its store name, and eval builds `ivf-pq` as
    `vis-embed index` does (a covering rescore makes it exact); each records its own name."""
    files = make_identity_benchmark(tmp_path / "data")
    exact = _run(tmp_path / "exact", files, index="exact")["datasets"]["Gal"]
    flat = _run(tmp_path / "flat", files, index="flat")["datasets"]["Gal"]
    ivf_pq = _run(tmp_path / "ivf-pq", files, index="ivf-pq", rescore=100)["datasets"]["Gal"]
    assert flat["metrics"] == exact["metrics"] == ivf_pq["metrics"]
    assert (flat["index"], flat["bytes_per_vector"]) == ("flat", 4 * DIM)
    assert (ivf_pq["index"], ivf_pq["rescore"]) == ("ivf-pq", 100)
    assert ivf_pq["bytes_per_vector"] == 8 + max(m for m in range(1, min(64, DIM) + 1) if DIM % m == 0)


def _repeated(copies: int, dim: int = 16) -> np.ndarray:
    """4 unit vectors, ``copies`` of each, interleaved: row r is vector r % 4 (ties everywhere)."""
    base = l2_normalise(np.random.default_rng(1).standard_normal((4, dim))).astype(np.float32)
    return np.concatenate([base] * copies)


def _by_policy(queries: np.ndarray, gallery: np.ndarray, k: int) -> np.ndarray:
    """The tie policy spelled out: every row sorted by (higher score, smaller id), the first k."""
    scores = queries @ gallery.T
    return np.stack([np.lexsort((np.arange(len(gallery)), -row))[:k] for row in scores])


@pytest.mark.parametrize("k", [3, 5, 160])  # inside one group of ties, across it, past faiss' heap (k >= 100)
@pytest.mark.parametrize("n_queries", [1, 30])
def test_every_exact_kind_breaks_ties_alike_by_the_smaller_row_id(k: int, n_queries: int) -> None:
    """A gallery of repeated vectors: numpy_topk (whatever its chunks), faiss flat and torch return
    the same rows in the same order: higher score first, then the smaller row id."""
    from vis_embed.gallery.search import TorchExactIndex

    gallery = _repeated(150)
    queries = np.repeat(gallery[:2], n_queries // 2 or 1, axis=0)[:n_queries]
    expected = _by_policy(queries, gallery, k)
    for chunks in ({}, {"query_chunk": 4, "gallery_chunk": 7}):
        np.testing.assert_array_equal(numpy_topk(queries, gallery, k, **chunks)[1], expected)
    np.testing.assert_array_equal(search(build_index(gallery, IndexSpec.named("flat")), queries, k)[1], expected)
    torch_exact = TorchExactIndex(gallery, "cpu")
    np.testing.assert_array_equal(torch_exact.search(queries, k)[1], expected)
    np.testing.assert_array_equal(search(torch_exact, queries, k)[1], expected)



@pytest.mark.parametrize("seed", range(4))
def test_the_torch_and_numpy_cuts_choose_the_tied_rows_by_one_rule(seed: int) -> None:
    """The rows tied at the k-th score are chosen by search.hit_order's rule in numpy (numpy_topk:
    _best_columns) and for a faiss flat index (_whole_tie), and by its restatement on the torch
    device (TorchExactIndex: _smallest_tied, kept there for speed).  A battery of galleries of small
    integers (exact float32 scores: ties of every size, above, at and across the k-th place, some
    rows of score 0) and every k: all kinds give the rule's rows and scores.  NaN is left out: the
    search refuses it (build_index, search)."""
    from vis_embed.gallery.search import TorchExactIndex

    rng = np.random.default_rng(seed)
    rows, dim = int(rng.integers(5, 40)), int(rng.integers(1, 5))
    gallery = rng.integers(-1, 3, (rows, dim)).astype(np.float32)
    gallery[rng.integers(0, rows, 2)] = 0.0
    queries = rng.integers(-1, 3, (6, dim)).astype(np.float32)
    torch_exact, flat = TorchExactIndex(gallery, "cpu"), build_index(gallery, IndexSpec.named("flat"))
    for k in range(1, rows + 1):
        expected = _by_policy(queries, gallery, k)
        expected_scores = np.take_along_axis(queries @ gallery.T, expected, axis=1)
        for found in (torch_exact.search(queries, k), search(flat, queries, k),
                      numpy_topk(queries, gallery, k), numpy_topk(queries, gallery, k, query_chunk=4, gallery_chunk=7)):
            np.testing.assert_array_equal(found[1], expected, err_msg=f"k={k}")
            np.testing.assert_array_equal(found[0], expected_scores, err_msg=f"k={k}")

@pytest.mark.parametrize("kind", ["binary", "int8"])
def test_quantized_hits_with_equal_scores_come_by_row_id(kind: str) -> None:
    """Codes without re-ranking tie a lot (binary: Hamming distances); search() orders them by id."""
    gallery = _repeated(10)
    scores, ids = search(build_index(gallery, IndexSpec.named(kind, rescore=0)), gallery[:3], 12)
    for row_scores, row_ids in zip(scores, ids):
        order = np.lexsort((row_ids, -row_scores))
        np.testing.assert_array_equal(row_ids, row_ids[order])
