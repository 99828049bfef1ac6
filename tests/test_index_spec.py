"""The one index vocabulary (vectors/index_spec.py): eval's earlier --index names are aliases that
search exactly as before, the store's kinds work in eval, and one factory serves both."""

from __future__ import annotations

import json
import math
from pathlib import Path

import faiss
import numpy as np
import pytest

from vis_embed.data.eval_options import DatasetOptions
from vis_embed.errors import ConfigError, DataError
from vis_embed.gallery import search
from vis_embed.evaluation.settings import EvalSettings
from vis_embed.vectors.index_spec import ALIASES, INDEX_NAMES, IndexSpec, bytes_per_vector, check_rescore
from vis_embed.gallery.store import GalleryIndex, write_index
from vis_embed.vectors.transforms import l2_normalise, quantize

ROWS, DIM, K = 400, 32, 10


def _gallery(seed: int = 0, rows: int = ROWS) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((rows // 4, DIM))
    gallery = l2_normalise(centres[rng.integers(0, len(centres), rows)] + 0.3 * rng.standard_normal((rows, DIM)))
    queries = l2_normalise(gallery[:40] + 0.05 * rng.standard_normal((40, DIM)))
    return gallery, queries


def _searched(index, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return search.search(index, queries, K)


def _earlier_ivf(gallery: np.ndarray) -> faiss.Index:
    """eval's `--index ivf` as it was built before the one factory (written out here on purpose)."""
    rows = len(gallery)
    nlist = max(1, min(int(4 * math.sqrt(rows)), rows // 39))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(DIM), DIM, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = 0
    index.train(gallery)
    index.nprobe = max(1, nlist // 8)
    index.add(gallery)
    return index


def _earlier_binary(gallery: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """eval's `--index binary` without rescore: Hamming over the sign bits, score 1 - 2 h / d."""
    index = faiss.IndexBinaryFlat(DIM)
    index.add(quantize(gallery, "ubinary"))
    distances, ids = index.search(quantize(queries, "ubinary"), K)
    return (1.0 - 2.0 * distances / DIM).astype(np.float32), ids


def test_every_earlier_name_is_an_alias_of_one_spec() -> None:
    assert set(ALIASES) | {"auto", "binary", "int8"} <= set(INDEX_NAMES)  # every earlier name still accepted
    assert IndexSpec.named("exact") == IndexSpec(kind="flat")
    assert IndexSpec.named("exact-bf16") == IndexSpec(kind="flat", precision="bfloat16")
    assert IndexSpec.named("exact-gpu") == IndexSpec(kind="flat", device="gpu")
    assert IndexSpec.named("ivf") == IndexSpec(kind="ivf-flat")
    assert IndexSpec.named("binary", rescore=3) == IndexSpec(kind="binary", rescore=3)


def test_earlier_names_search_exactly_as_before() -> None:
    gallery, queries = _gallery()
    flat = faiss.IndexFlatIP(DIM)
    flat.add(gallery)
    before = {"exact": _searched(flat, queries), "ivf": _searched(_earlier_ivf(gallery), queries),
              "binary": _earlier_binary(gallery, queries)}
    for name, (scores, ids) in before.items():
        now_scores, now_ids = _searched(search.build_index(gallery, IndexSpec.named(name)), queries)
        np.testing.assert_array_equal(now_ids, ids, err_msg=name)
        np.testing.assert_allclose(now_scores, scores, rtol=1e-6, atol=1e-6, err_msg=name)
    # exact-bf16 finds the exact top-k (its scores are the exact float32 re-rank's)
    bf16_ids = _searched(search.build_index(gallery, IndexSpec.named("exact-bf16")), queries)[1]
    np.testing.assert_array_equal(bf16_ids, before["exact"][1])


def test_exact_gpu_is_the_torch_exact_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: the torch index runs on the CPU, the same products and top-k."""
    class OnCpu(search.TorchExactIndex):
        def __init__(self, gallery: np.ndarray) -> None:
            super().__init__(gallery, device="cpu")

    monkeypatch.setattr(search, "TorchExactIndex", OnCpu)
    gallery, queries = _gallery()
    index = search.build_index(gallery, IndexSpec.named("exact-gpu"))
    assert isinstance(index, OnCpu)
    np.testing.assert_array_equal(_searched(index, queries)[1], search.numpy_topk(queries, gallery, K)[1])


@pytest.mark.parametrize("alias, kind", [("exact", "flat"), ("ivf", "ivf-flat")])
def test_an_alias_and_its_kind_search_alike(alias: str, kind: str) -> None:
    gallery, queries = _gallery()
    for got, want in zip(_searched(search.build_index(gallery, IndexSpec.named(alias)), queries),
                         _searched(search.build_index(gallery, IndexSpec.named(kind)), queries)):
        np.testing.assert_array_equal(got, want)


def test_eval_and_the_store_build_the_same_ivf_pq(tmp_path: Path) -> None:
    """One factory: the stored ivf-pq index and eval's in-memory one answer alike."""
    gallery, queries = _gallery(rows=2000)
    np.save(tmp_path / "g.npy", gallery)
    (tmp_path / "g.ids.json").write_text(json.dumps({"lines": list(range(1, 2001)), "model": None}))
    settings = write_index(tmp_path / "g.npy", tmp_path / "idx", kind="ivf-pq", memory_gb=1.0)
    stored = GalleryIndex.load(tmp_path / "idx").search(queries, K)
    in_memory = _searched(search.build_index(gallery, IndexSpec.named("ivf-pq", rescore=settings.rescore)), queries)
    np.testing.assert_array_equal(stored[1], in_memory[1])
    assert settings.bytes_per_vector == settings.pq_bytes + 8
    loaded = GalleryIndex.load(tmp_path / "idx").spec  # what the stored index is, in the same vocabulary
    assert (loaded.kind, loaded.dims, loaded.rescore, loaded.pq_bytes) == ("ivf-pq", DIM, 4, settings.pq_bytes)
    assert loaded.bytes_per_vector == settings.bytes_per_vector


def test_the_store_kinds_are_eval_kinds() -> None:
    assert EvalSettings(index="flat").index == "flat"
    assert EvalSettings(index="ivf-pq", rescore=4).rescore == 4
    assert DatasetOptions.from_values({"index": "ivf-flat"}, "D").index == "ivf-flat"
    with pytest.raises(DataError, match="unknown index kind 'hnsw'"):
        DatasetOptions.from_values({"index": "hnsw"}, "D")


def test_bytes_per_vector_is_one_rule() -> None:
    assert [IndexSpec.named(name, dims=1536).bytes_per_vector
            for name in ("exact", "exact-bf16", "flat", "int8", "binary", "ivf")] == [6144, 6144, 6144, 1536, 192, 6152]
    assert IndexSpec(kind="ivf-pq", dims=1536, pq_bytes=64).bytes_per_vector == 72
    assert bytes_per_vector("binary", 12) == 2 and bytes_per_vector("float16", 3) == 6
    with pytest.raises(ValueError, match="not known yet"):
        _ = IndexSpec(kind="auto", dims=8).bytes_per_vector


def test_the_rescore_rule_and_the_spec_bounds() -> None:
    for kind in ("binary", "int8", "ivf-pq"):
        assert check_rescore(4, kind) == 4
    for name in ("flat", "exact", "exact-bf16", "ivf", "ivf-flat", "auto"):
        with pytest.raises(ConfigError, match="re-ranks a binary or int8"):
            check_rescore(4, name)
    with pytest.raises(ConfigError, match="must be an integer >= 0"):
        check_rescore(-1, "binary")
    with pytest.raises(DataError, match="only a flat index"):
        IndexSpec(kind="int8", precision="bfloat16")
    with pytest.raises(DataError, match="field 'nlist'"):
        IndexSpec(kind="ivf-flat", nlist=0)
    with pytest.raises(ConfigError, match="unknown index kind 'hnsw'"):
        IndexSpec.named("hnsw")


def test_the_settings_parse_index_and_rescore_into_one_spec() -> None:
    """--index / --rescore are checked once (index_spec's vocabulary and rescore rule) and handed
    on as one IndexSpec; an alias parses to its canonical spec."""
    assert EvalSettings(index="exact-bf16").index_spec == IndexSpec(kind="flat", precision="bfloat16")
    assert EvalSettings(index="binary", rescore=4).index_spec == IndexSpec(kind="binary", rescore=4)
    assert EvalSettings().index_spec == IndexSpec()  # auto
    with pytest.raises(DataError, match="field 'index': unknown index kind 'hnsw'"):
        EvalSettings(index="hnsw")


@pytest.mark.parametrize("dataset, expected", [
    (None, IndexSpec(kind="binary", rescore=4)),          # the run's spec, whole
    ("int8", IndexSpec(kind="int8", rescore=4)),          # a code kind re-ranks at the run's rescore
    ("flat", IndexSpec(kind="flat")),                     # a float kind has nothing to re-rank
    ("exact-gpu", IndexSpec(kind="flat", device="gpu")),
])
def test_a_datasets_index_option_is_its_own_spec(dataset: str | None, expected: IndexSpec) -> None:
    options = DatasetOptions.from_values({} if dataset is None else {"index": dataset}, "D")
    assert options.index_spec(IndexSpec(kind="binary", rescore=4)) == expected
    assert options.as_dict() == ({} if dataset is None else {"index": dataset})  # as the manifest gave it


def test_an_earlier_results_json_index_value_still_names_its_spec() -> None:
    """results.json's ``index`` was the alias that ran (exact, exact-bf16, exact-gpu, ivf); it now
    records the canonical kind (and ``index_spec``).  An earlier file's value still parses."""
    assert {name: IndexSpec.named(name).kind for name in ALIASES} == {
        "exact": "flat", "exact-bf16": "flat", "exact-gpu": "flat", "ivf": "ivf-flat"}


def test_the_flat_variants_have_names_of_their_own_and_the_old_ones_mean_the_same() -> None:
    """flat at bf16 and on the GPU are named as such (flat-bf16, flat-gpu); exact-bf16 / exact-gpu,
    eval's earlier names, still give the very same specs."""
    assert IndexSpec.named("flat-bf16") == IndexSpec(kind="flat", precision="bfloat16")
    assert IndexSpec.named("flat-gpu") == IndexSpec(kind="flat", device="gpu")
    assert IndexSpec.named("exact-bf16") == IndexSpec.named("flat-bf16")
    assert IndexSpec.named("exact-gpu") == IndexSpec.named("flat-gpu")
    assert {"flat-bf16", "flat-gpu"} <= set(INDEX_NAMES)
