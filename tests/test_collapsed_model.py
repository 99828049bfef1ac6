"""A collapsed model must never score well, through the real evaluation path (issue 21), and
the tie-policy / truncated-ranking rules of issue 15 on the harness and the synthetic benchmark."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from eval_fakes import COLOURS, FakeEncoder, NaNEncoder, make_identity_benchmark, write_jsonl

from vis_embed.cli import main as cli_main
from vis_embed.data import EvalDatasetSpec as DatasetSpec
from vis_embed.data import load_benchmark
from vis_embed.errors import DataError
from vis_embed.evaluation import cli as eval_cli
from vis_embed.evaluation.harness import EvalSettings, Harness

NAMES = list(COLOURS)  # 6 identities


# An ordinary unit vector: n copies of its self-similarity do not average to exactly itself
# (np.full(16, 0.25), whose products are exact, hid the constant-group bug of issue 27).
COLLAPSED_VECTOR = np.random.default_rng(7).normal(size=16)
COLLAPSED_VECTOR /= np.linalg.norm(COLLAPSED_VECTOR)


class CollapsedEncoder(FakeEncoder):
    """Maps every item to the same unit vector (a collapsed model)."""

    def embed_one(self, item):
        return COLLAPSED_VECTOR.copy()


def _random_order_ap(labels: list[int]) -> float:
    """Expected AP of a uniformly random ranking, by enumerating every order (chance)."""
    values = []
    for order in itertools.permutations(labels):
        hits = np.cumsum(order)
        values.append(np.mean([hits[i] / (i + 1) for i in range(len(order)) if order[i]]))
    return float(np.mean(values))


def _run(encoder: FakeEncoder, specs: list[DatasetSpec], out: Path, **settings) -> dict:
    return Harness(encoder, out, EvalSettings(show_progress=False, pictures=False, **settings)).run(specs)


def _peer_specs(tmp_path: Path) -> list[DatasetSpec]:
    files = make_identity_benchmark(tmp_path / "data")
    afc = write_jsonl(tmp_path / "afc.jsonl", [
        {"id": f"t{i}", "reference": f"{c}_0.png", "a": f"{c}_1.png", "b": f"{NAMES[i - 1]}_1.png", "label": 1}
        for i, c in enumerate(NAMES)])
    nearid = write_jsonl(tmp_path / "nearid.jsonl", [
        {"id": c, "views": [f"{c}_0.png", f"{c}_1.png", f"{c}_2.png"], "negatives": [f"{NAMES[i - 1]}_0.png"] * 3}
        for i, c in enumerate(NAMES)])
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [
        {"id": f"p{i}", "a": f"{c}_0.png", "b": f"{c if i % 2 else NAMES[i - 1]}_1.png", "label": i % 2,
         "score": float(i), "group": "g"} for i, c in enumerate(NAMES)])
    common = {"image_root": files["images"], "split": None, "benchmark": "other"}
    return [DatasetSpec("Cand", "candidates", "ID-Rec", "IND", "MVEB", path=files["candidates"],
                        image_root=files["images"]),
            DatasetSpec("Gal", "gallery", "Re-ID", "IND", "MVEB", queries=files["queries"], gallery=files["gallery"],
                        image_root=files["images"]),
            DatasetSpec("AFC", "2afc", "2AFC", path=afc, **common),
            DatasetSpec("NearID", "nearid", "NearID", path=nearid, **common),
            DatasetSpec("TLL", "asym_recall", "AsymRecall", path=pairs, **common),
            DatasetSpec("AP", "pair_ap", "PairAP", path=pairs, **common),
            DatasetSpec("Corr", "human_corr", "HumanCorr", path=pairs, **common)]


def test_collapsed_encoder_scores_at_most_chance_on_every_protocol(tmp_path: Path) -> None:
    results = _run(CollapsedEncoder(), _peer_specs(tmp_path), tmp_path / "out")
    got = {name: entry["metrics"] for name, entry in results["datasets"].items()}
    assert got["Cand"]["P@1"] == 0.0 and got["Gal"]["P@1"] == 0.0
    assert got["NearID"]["SSR"] == 0.0 and got["NearID"]["pairwise_acc"] == 0.0  # every margin exactly 0
    assert got["AFC"]["2AFC"] == 50.0                                             # a coin flip
    n_pairs = len(NAMES)
    assert {key for key in got["TLL"] if " " not in key} == {"R@1", "R@3", "R@5", "R@20"}  # the default k
    for k in (1, 5, 20):
        chance = 1 - (1 - min(k, n_pairs) / n_pairs) ** 2  # random ranks, either direction
        assert got["TLL"][f"R@{k}"] <= 100 * chance
        for direction in ("a->b", "b->a"):  # one direction: at most k of the n partners
            assert got["TLL"][f"R@{k} {direction}"] <= 100 * min(k, n_pairs) / n_pairs
    assert got["TLL"]["R@1"] == 0.0 and got["TLL"]["R@5"] == 0.0
    prevalence = 100 * 3 / n_pairs
    assert got["AP"]["prevalence"] == prevalence
    assert got["AP"]["AP_pessimistic"] <= prevalence
    # one big tie: AP at its expectation over the tie's orders = a random ranking's AP (chance)
    labels = [i % 2 for i in range(n_pairs)]
    assert got["AP"]["AP"] == pytest.approx(100 * _random_order_ap(labels), abs=1e-9)
    # a constant model has no correlation: undefined, counted, and the run goes on
    assert got["Corr"]["spearman"] is None and got["Corr"]["n_constant_groups"] == 1
    assert "Corr" in json.loads((tmp_path / "out" / "results.json").read_text())["datasets"]


def test_tie_policy_first_reproduces_argmax_and_is_recorded(tmp_path: Path) -> None:
    specs = _peer_specs(tmp_path)[:2]
    first = _run(CollapsedEncoder(), specs, tmp_path / "first", tie_policy="first")
    # MMEB rows list the positive first: argmax credits a collapsed model on every query
    assert first["datasets"]["Cand"]["metrics"]["P@1"] == 100.0
    assert first["tie_policy"] == first["datasets"]["Cand"]["tie_policy"] == "first"
    assert "Tied scores: first" in (tmp_path / "first" / "results.md").read_text()
    pessimistic = _run(CollapsedEncoder(), specs, tmp_path / "pessimistic")
    assert pessimistic["datasets"]["Cand"]["metrics"]["P@1"] == 0.0
    assert "Tied scores: pessimistic" in (tmp_path / "pessimistic" / "results.md").read_text()


def test_constant_group_does_not_stop_the_correlation_protocol(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    pairs = [(c, d) for shift in (1, 2) for c, d in zip(NAMES, NAMES[shift:] + NAMES[:shift])]  # 12 pairs
    rows = [{"id": f"p{i}", "a": f"{c}_0.png", "b": f"{d}_1.png", "score": 0.5 if i < 4 else float(i),
             "group": "flat" if i < 4 else "varied"}  # a group needs 4 pairs (peer_metrics.MIN_GROUP_PAIRS)
            for i, (c, d) in enumerate(pairs)]
    path = write_jsonl(tmp_path / "corr.jsonl", rows)
    spec = DatasetSpec("Corr", "human_corr", "HumanCorr", path=path, image_root=files["images"])
    result = _run(FakeEncoder(), [spec], tmp_path / "out")["datasets"]["Corr"]
    assert result["metrics"]["n_groups"] == 1 and result["metrics"]["n_constant_groups"] == 1
    assert result["constant_groups"] == ["flat"]
    assert math.isfinite(result["metrics"]["spearman"])


def test_a_correlation_file_without_a_group_of_four_pairs_is_refused_before_encoding(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    rows = [{"id": f"p{i}", "a": f"{c}_0.png", "b": f"{c}_1.png", "score": float(i), "group": f"g{i % 2}"}
            for i, c in enumerate(NAMES)]  # two groups of 3 pairs
    spec = DatasetSpec("Corr", "human_corr", "HumanCorr", path=write_jsonl(tmp_path / "corr.jsonl", rows),
                       image_root=files["images"])
    with pytest.raises(DataError, match=r"corr.jsonl: field 'group': no group has 4 or more pairs"):
        _run(NaNEncoder("red_0.png"), [spec], tmp_path / "out")  # an encode would fail otherwise


def test_nan_human_score_and_nan_embedding_are_errors_naming_the_row(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    path = tmp_path / "corr.jsonl"
    path.write_text('{"id": "p0", "a": "red_0.png", "b": "red_1.png", "score": 1.0}\n'
                    '{"id": "p1", "a": "red_0.png", "b": "blue_1.png", "score": NaN}\n')
    spec = DatasetSpec("Corr", "human_corr", "HumanCorr", path=path, image_root=files["images"])
    with pytest.raises(DataError, match=r"corr.jsonl:2: field 'score': expected a finite number"):
        _run(FakeEncoder(), [spec], tmp_path / "out")
    afc = write_jsonl(tmp_path / "afc.jsonl", [
        {"id": "t0", "reference": "red_0.png", "a": "red_1.png", "b": "blue_1.png", "label": 1},
        {"id": "t1", "reference": "red_0.png", "a": "green_1.png", "b": "blue_1.png", "label": 0}])
    spec = DatasetSpec("AFC", "2afc", "2AFC", path=afc, image_root=files["images"])
    with pytest.raises(DataError, match=r"afc.jsonl:2: field 'a': the model embedded this item as NaN"):
        _run(NaNEncoder("green_1.png"), [spec], tmp_path / "out2")
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"id": f"p{i}", "a": f"{c}_0.png", "b": f"{c}_1.png"}
                                                   for i, c in enumerate(NAMES)])
    spec = DatasetSpec("TLL", "asym_recall", "AsymRecall", path=pairs, image_root=files["images"])
    with pytest.raises(DataError, match=r"pairs.jsonl:3: field 'b'"):
        _run(NaNEncoder(f"{NAMES[2]}_1.png"), [spec], tmp_path / "out3")


@pytest.fixture(scope="module")
def synth_manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vis_embed.prep.synth import generate

    return generate(tmp_path_factory.mktemp("synth") / "out", seed=0, size="tiny", workers=1) / "benchmark.yaml"


def test_depth_one_p_at_1_equals_full_ranking_on_the_synthetic_benchmark(
        synth_manifest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    benchmark = load_benchmark(synth_manifest)
    galleries = [spec.name for spec in benchmark.datasets if spec.layout == "gallery"]
    assert galleries
    monkeypatch.setattr(eval_cli, "_load_encoder", lambda args: FakeEncoder())
    p_at_1 = {}
    for label, extra in (("full", []), ("depth1", ["--depth", "1"])):
        out = tmp_path / label
        assert cli_main(["eval", "--model", "fake", "--benchmark", str(synth_manifest), "--out", str(out),
                         "--datasets", ",".join(galleries), "--quiet", "--no-pictures", *extra]) == 0
        datasets = json.loads((out / "results.json").read_text())["datasets"]
        p_at_1[label] = {name: datasets[name]["metrics"]["P@1"] for name in galleries}
        if extra:
            assert all(datasets[name]["depth"] == 1 for name in galleries)
    assert p_at_1["depth1"] == p_at_1["full"]
    assert any(value > 0 for value in p_at_1["full"].values())  # the comparison is not 0 == 0
