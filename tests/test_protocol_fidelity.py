"""Peer protocols that cannot be gamed (issue 27): every protocol equals a small independent
implementation on random (unnormalised) embeddings; constant groups are found by their range;
norms cannot buy a score; a duplicated positive is a hit; AP under ties is the expected AP;
IND / OOD per benchmark; NaN is an error on every index kind; empty files name their dataset."""

from __future__ import annotations

import hashlib
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from eval_fakes import COLOURS, FakeEncoder, NaNEncoder, make_identity_benchmark, write_jsonl
from scipy import stats
from sklearn.metrics import average_precision_score

from vis_embed.data import EvalDatasetSpec as DatasetSpec
from vis_embed.data.taxonomy import group_means
from vis_embed.errors import DataError
from vis_embed.evaluation import peer_metrics
from vis_embed.gallery import search
from vis_embed.evaluation.harness import EvalSettings, Harness
from vis_embed.vectors.index_spec import IndexSpec

NAMES = list(COLOURS)
DIM = 12


def _text_vector(text: str) -> np.ndarray:
    """A random direction with a random norm in [0.3, 3.3): unnormalised on purpose."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little"))
    return rng.standard_normal(DIM) * (0.3 + 3 * rng.random())


class RandomEncoder(FakeEncoder):
    """Text items -> :func:`_text_vector` (whatever the instruction)."""

    def embed_one(self, item):
        return _text_vector(item["text"])


def _run(encoder: FakeEncoder, specs: list[DatasetSpec], out: Path, **settings) -> dict:
    return Harness(encoder, out, EvalSettings(show_progress=False, pictures=False, **settings)).run(specs)


def _cos(a: str, b: str) -> float:
    x, y = _text_vector(a), _text_vector(b)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def _t(name: str) -> dict:
    return {"text": name}


# ------------------------------------------------------------- independent implementations

def test_every_protocol_equals_an_independent_implementation_on_random_embeddings(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n = 40
    afc_rows = [{"id": f"t{i}", "reference": _t(f"r{i}"), "a": _t(f"a{i}"), "b": _t(f"b{i}"),
                 "label": float(rng.random())} for i in range(n)]
    nearid_rows = [{"id": f"n{i}", "views": [_t(f"v{i}_{j}") for j in range(3)],
                    "negatives": [_t(f"x{i}_{j}") for j in range(3)]} for i in range(n)]
    pair_rows = [{"id": f"p{i}", "a": _t(f"pa{i}"), "b": _t(f"pb{i}"), "label": int(rng.random() < 0.3),
                  "score": float(rng.random()), "group": "g1" if i % 2 else "g2"} for i in range(n)]
    pair_rows[0]["label"] = 1
    cand_rows = [{"id": f"q{i}", "query": _t(f"q{i}"), "candidates": [_t(f"c{i}_{j}") for j in range(6)]}
                 for i in range(n)]
    files = {name: write_jsonl(tmp_path / f"{name}.jsonl", rows) for name, rows in
             (("afc", afc_rows), ("nearid", nearid_rows), ("pairs", pair_rows), ("cand", cand_rows))}
    common = {"image_root": tmp_path, "benchmark": "other"}
    specs = [DatasetSpec("AFC", "2afc", "2AFC", path=files["afc"], **common),
             DatasetSpec("NearID", "nearid", "NearID", path=files["nearid"], **common),
             DatasetSpec("TLL", "asym_recall", "AsymRecall", path=files["pairs"], options={"ks": [1, 3, 10]}, **common),
             DatasetSpec("AP", "pair_ap", "PairAP", path=files["pairs"], **common),
             DatasetSpec("Corr", "human_corr", "HumanCorr", path=files["pairs"], **common),
             DatasetSpec("Cand", "candidates", "Cls", path=files["cand"], **common)]
    got = {name: entry["metrics"] for name, entry in _run(RandomEncoder(), specs, tmp_path / "out")["datasets"].items()}

    # 2AFC: the model picks the closer of A and B by cosine and scores the humans' share for it
    afc = [r["label"] if _cos(r["reference"]["text"], r["a"]["text"]) > _cos(r["reference"]["text"], r["b"]["text"])
           else 1 - r["label"] for r in afc_rows]
    assert got["AFC"]["2AFC"] == pytest.approx(100 * np.mean(afc), abs=1e-6)

    # NearID: delta_ij = cos(p_i, p_j) - cos(p_i, n_i), i != j; SSR all > 0 per identity, PA micro
    per_identity = [[_cos(v[i]["text"], v[j]["text"]) - _cos(v[i]["text"], neg[i]["text"])
                     for i in range(3) for j in range(3) if i != j]
                    for v, neg in ((r["views"], r["negatives"]) for r in nearid_rows)]
    assert got["NearID"]["SSR"] == pytest.approx(100 * np.mean([all(d > 0 for d in m) for m in per_identity]), abs=1e-6)
    assert got["NearID"]["pairwise_acc"] == pytest.approx(
        100 * np.mean([d > 0 for m in per_identity for d in m]), abs=1e-6)

    # TLL asymmetric recall: partner in the top-k of either direction
    sim = np.array([[_cos(a["a"]["text"], b["b"]["text"]) for b in pair_rows] for a in pair_rows])
    for k in (1, 3, 10):
        a_to_b = [i in np.argsort(-sim[i])[:k] for i in range(n)]
        b_to_a = [i in np.argsort(-sim[:, i])[:k] for i in range(n)]
        assert got["TLL"][f"R@{k}"] == pytest.approx(100 * np.mean(np.logical_or(a_to_b, b_to_a)), abs=1e-6)

    # AP: scikit-learn's (no ties on random embeddings)
    pair_cos = np.diag(sim)
    labels = np.array([r["label"] for r in pair_rows])
    assert got["AP"]["AP"] == pytest.approx(100 * average_precision_score(labels, pair_cos), abs=1e-6)
    assert got["AP"]["AP_pessimistic"] == pytest.approx(got["AP"]["AP"], abs=1e-6)

    # rank correlation: scipy per group, Fisher-z mean
    human = np.array([r["score"] for r in pair_rows])
    groups = np.array([r["group"] for r in pair_rows])
    rhos = [stats.spearmanr(pair_cos[groups == g], human[groups == g])[0] for g in ("g1", "g2")]
    rs = [stats.pearsonr(pair_cos[groups == g], human[groups == g])[0] for g in ("g1", "g2")]
    assert got["Corr"]["spearman"] == pytest.approx(100 * math.tanh(np.mean(np.arctanh(rhos))), abs=1e-6)
    assert got["Corr"]["pearson"] == pytest.approx(100 * math.tanh(np.mean(np.arctanh(rs))), abs=1e-6)

    # P@1 (VisME / MMEB): the positive (listed first) has the highest cosine
    hits = [int(np.argmax([_cos(r["query"]["text"], c["text"]) for c in r["candidates"]]) == 0) for r in cand_rows]
    assert got["Cand"]["P@1"] == pytest.approx(100 * np.mean(hits), abs=1e-6)


# ------------------------------------------------------------- constant groups

def _copies_that_do_not_average_to_themselves(n: int) -> float:
    """A cosine c of ordinary unit vectors whose n copies have a mean != c (the rounding case)."""
    rng = np.random.default_rng(0)
    for _ in range(1000):
        v = rng.standard_normal(16)
        v /= np.linalg.norm(v)
        w = rng.standard_normal(16)
        c = float(v @ (w / np.linalg.norm(w)))
        if np.mean(np.full(n, c)) != c:
            return c
    raise AssertionError("no such cosine found")


def test_constant_group_is_found_by_its_range_and_never_poisons_the_mean() -> None:
    n = 10
    constant = np.full(n, _copies_that_do_not_average_to_themselves(n))
    rng = np.random.default_rng(1)
    human = rng.random(2 * n)
    varied = human[n:] + 0.5 * rng.random(n)
    result = peer_metrics.correlation_with_humans(np.concatenate([constant, varied]), human,
                                                  ["flat"] * n + ["varied"] * n)
    assert result["n_constant_groups"] == 1 and result["constant_groups"] == ["flat"]
    assert result["n_groups"] == 1
    assert result["spearman"] == pytest.approx(stats.spearmanr(varied, human[n:])[0], abs=1e-9)
    assert result["pearson"] == pytest.approx(stats.pearsonr(varied, human[n:])[0], abs=1e-9)
    assert peer_metrics.is_constant(constant) and not peer_metrics.is_constant(varied)


# ------------------------------------------------------------- norms cannot buy a score

class NormGamingEncoder(FakeEncoder):
    """Every vector points one way; true views (``_1``/``_2``) get a larger norm than look-alikes (``_0``)."""

    def embed_one(self, item):
        return np.ones(8) * (1.0 if item["image"].endswith("_0.png") else 2.0)


def test_norm_gaming_encoder_scores_no_better_than_a_collapsed_one(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    nearid = write_jsonl(tmp_path / "nearid.jsonl", [
        {"id": c, "views": [f"{c}_1.png", f"{c}_2.png"], "negatives": [f"{NAMES[i - 1]}_0.png"] * 2}
        for i, c in enumerate(NAMES)])
    afc = write_jsonl(tmp_path / "afc.jsonl", [
        {"id": f"t{i}", "reference": f"{c}_1.png", "a": f"{c}_2.png", "b": f"{NAMES[i - 1]}_0.png", "label": 1}
        for i, c in enumerate(NAMES)])
    common = {"image_root": files["images"], "benchmark": "other"}
    specs = [DatasetSpec("NearID", "nearid", "NearID", path=nearid, **common),
             DatasetSpec("AFC", "2afc", "2AFC", path=afc, **common)]
    got = {k: v["metrics"] for k, v in _run(NormGamingEncoder(), specs, tmp_path / "out")["datasets"].items()}
    assert got["NearID"]["SSR"] == 0.0 and got["NearID"]["pairwise_acc"] == 0.0  # was 100 on raw products
    assert got["AFC"]["2AFC"] == 50.0
    # the protocol functions normalise too
    views, negatives = np.full((2, 4), 2.0), np.full((2, 4), 1.0)
    assert (peer_metrics.nearid_margins(views, negatives, np.ones(2, dtype=bool)) == 0).all()


def test_unit_rows_keeps_zero_rows_zero_and_nan_rows_nan() -> None:
    rows = peer_metrics.unit_rows(np.array([[3.0, 4.0], [0.0, 0.0], [np.nan, 1.0], [np.inf, 0.0]]))
    assert rows[0] == pytest.approx([0.6, 0.8]) and (rows[1] == 0).all()
    assert np.isnan(rows[2]).all() and np.isnan(rows[3]).all()


# ------------------------------------------------------------- duplicates of the positive

def test_a_candidate_equal_to_the_positive_is_a_hit(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    rows = [{"id": f"q{i}", "query": {"image": f"{c}_0.png"},
             "candidates": [{"image": f"{c}_1.png"}, {"image": f"{NAMES[i - 1]}_1.png"}, {"image": f"{c}_1.png"}]}
            for i, c in enumerate(NAMES)]
    path = write_jsonl(tmp_path / "dup.jsonl", rows)
    spec = DatasetSpec("Dup", "candidates", "ID-Rec", path=path, image_root=files["images"])
    result = _run(FakeEncoder(), [spec], tmp_path / "out")["datasets"]["Dup"]
    # the fake puts each colour's views together: every query finds its positive (VLM2Vec: 100)
    assert result["metrics"]["P@1"] == 100.0
    assert result["n_duplicate_positives"] == len(NAMES)


# ------------------------------------------------------------- AP under ties

def test_tied_ap_is_the_mean_over_the_ties_orders() -> None:
    rng = np.random.default_rng(5)
    for _ in range(20):
        scores = rng.integers(0, 3, size=7).astype(float)
        labels = rng.random(7) < 0.4
        labels[0] = True
        values = []
        # every order of the tied items, by enumerating all permutations consistent with the scores
        for permutation in itertools.permutations(range(7)):
            if np.all(np.diff(scores[list(permutation)]) <= 0):
                relevance = labels[list(permutation)]
                hits = np.cumsum(relevance)
                values.append(np.mean([hits[i] / (i + 1) for i in range(7) if relevance[i]]))
        assert peer_metrics.average_precision(scores, labels) == pytest.approx(np.mean(values), abs=1e-12)


def test_collapsed_encoder_ap_equals_the_prevalence() -> None:
    n = 1500
    labels = np.arange(n) % 3 == 0          # prevalence 1/3
    scores = np.full(n, _copies_that_do_not_average_to_themselves(n))
    assert abs(peer_metrics.average_precision(scores, labels) - labels.mean()) <= 0.02
    assert peer_metrics.pessimistic_average_precision(scores, labels) < labels.mean()


# ------------------------------------------------------------- IND / OOD per benchmark

def test_ind_and_ood_are_reported_per_benchmark_and_pooled_only_when_labelled() -> None:
    rows = [{"meta_task": "Cls", "split": "IND", "score": 10.0}, {"meta_task": "Cls", "split": "OOD", "score": 20.0},
            {"meta_task": "Ret", "split": "IND", "score": 30.0}, {"meta_task": "ID-Rec", "split": "IND", "score": 70.0},
            {"meta_task": "Re-ID", "split": "OOD", "score": 90.0}]
    groups = group_means(rows)
    assert groups["MMEB-IND"] == 20.0 and groups["MMEB-OOD"] == 20.0
    assert groups["MVEB-IND"] == 70.0 and groups["MVEB-OOD"] == 90.0
    assert "IND" not in groups and "OOD" not in groups
    assert groups["IND_pooled"] == pytest.approx(110 / 3) and groups["OOD_pooled"] == 55.0
    only_mveb = group_means(rows[3:])
    assert only_mveb["IND"] == only_mveb["MVEB-IND"] == 70.0 and "IND_pooled" not in only_mveb


# ------------------------------------------------------------- NaN and empty files

@pytest.mark.parametrize("kind", ["exact", "exact-bf16", "ivf"])
def test_nan_is_an_error_on_every_index_kind(kind: str) -> None:
    gallery = np.random.default_rng(0).standard_normal((100, 8)).astype(np.float32)
    bad = gallery.copy()
    bad[7, 3] = np.nan
    with pytest.raises(ValueError, match="gallery row 7 is NaN"):
        search.build_index(bad, IndexSpec.named(kind))
    index = search.build_index(gallery, IndexSpec.named(kind))
    queries = gallery[:3].copy()
    queries[1, 0] = np.inf
    with pytest.raises(ValueError, match="queries row 1 is NaN or infinite"):
        search.search(index, queries, 5)


@pytest.mark.parametrize("index", ["exact", "exact-bf16", "ivf"])
def test_nan_gallery_or_query_names_dataset_and_row_on_every_index(tmp_path: Path, index: str) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    spec = DatasetSpec("Gal", "gallery", "Re-ID", queries=files["queries"], gallery=files["gallery"],
                       image_root=files["images"], options={"index": index})
    with pytest.raises(DataError, match=r"gallery.jsonl:5: field 'image': .*NaN.*dataset 'Gal'"):
        _run(NaNEncoder("green_1.png"), [spec], tmp_path / "g")  # gallery row 5 = green_1
    with pytest.raises(DataError, match=r"queries.jsonl:2: field 'image': .*NaN.*dataset 'Gal'"):
        _run(NaNEncoder("green_0.png"), [spec], tmp_path / "q")  # query row 2 = green_0


@pytest.mark.parametrize("layout", ["2afc", "nearid", "asym_recall", "pair_ap", "human_corr"])
def test_an_empty_peer_protocol_file_names_dataset_and_file(tmp_path: Path, layout: str) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    spec = DatasetSpec("Peer", layout, "Peer", path=empty, image_root=tmp_path)
    with pytest.raises(DataError, match=r"empty.jsonl: dataset 'Peer': data file has no rows"):
        _run(FakeEncoder(), [spec], tmp_path / "out")
