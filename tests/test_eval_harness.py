"""The evaluation harness with a fake encoder: outputs, de-duplication, self-exclusion in
galleries, cache invalidation, resume after interruption, pictures and peer-protocol layouts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from eval_fakes import FakeEncoder, make_identity_benchmark, write_image, write_jsonl
from PIL import Image

from vis_embed.errors import DataError
from vis_embed.evaluation import peer_metrics, plots
from vis_embed.evaluation.harness import EvalSettings, Harness
from vis_embed.data import EvalDatasetSpec as DatasetSpec


def _specs(files: dict[str, Path]) -> list[DatasetSpec]:
    return [
        DatasetSpec("Cand", "candidates", "ID-Rec", "IND", "MVEB", path=files["candidates"],
                    image_root=files["images"], query_instruction="Find the same object.",
                    candidate_instruction="Represent the image."),
        DatasetSpec("Gal", "gallery", "Re-ID", "OOD", "MVEB", queries=files["queries"], gallery=files["gallery"],
                    image_root=files["images"], query_instruction="Find the same object.",
                    candidate_instruction="Represent the image."),
    ]


def _run(encoder: FakeEncoder, specs: list[DatasetSpec], out: Path, **settings) -> dict:
    return Harness(encoder, out, EvalSettings(show_progress=False, **settings)).run(specs)


def test_results_json_layout_groups_and_single_encoding(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    encoder = FakeEncoder()
    results = _run(encoder, _specs(files), tmp_path / "out", pictures=False)
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved == json.loads(json.dumps(results))
    assert set(saved) == {"model", "tie_policy", "dim", "datasets", "groups", "counts"}
    assert saved["counts"] == {"ID-Rec": 1, "Re-ID": 1, "MVEB-IND": 1, "MVEB-OOD": 1, "IND": 1, "OOD": 1,
                               "MVEB": 2, "overall": 2}
    assert saved["tie_policy"] == "pessimistic"
    assert {"name", "adapter", "prompt_format", "pixels", "fingerprints"} <= set(saved["model"])
    assert saved["model"]["fingerprints"]["model"] == encoder.fingerprint()
    for entry in saved["datasets"].values():
        assert {"meta_task", "split", "n_queries", "metrics"} <= set(entry)
        assert {"P@1", "hit@5", "recall@5", "MRR", "mAP", "NDCG@5"} <= set(entry["metrics"])
    cand, gal = saved["datasets"]["Cand"], saved["datasets"]["Gal"]
    assert list(saved["groups"]) == ["ID-Rec", "Re-ID", "MVEB-IND", "MVEB-OOD", "IND", "OOD", "MVEB", "overall"]
    assert saved["groups"]["overall"] == pytest.approx((cand["metrics"]["P@1"] + gal["metrics"]["P@1"]) / 2)
    assert saved["groups"]["IND"] == cand["metrics"]["P@1"]
    # 6 queries x 4 candidates = 24 candidate slots, but only 6 distinct candidate images;
    # the gallery side has 18 distinct images: each distinct (instruction, item) encoded once.
    encoded = {}
    for instruction, n in encoder.calls:
        encoded[instruction] = encoded.get(instruction, 0) + n
    assert encoded == {"Find the same object.": 6, "Represent the image.": 6 + 18}
    assert (tmp_path / "out" / "results.md").read_text().count("| Cand | ID-Rec | IND | 6 | P@1 |") == 1


def test_gallery_excludes_the_query_itself_and_ranks_pessimistically(tmp_path: Path) -> None:
    images = tmp_path / "images"
    write_image(images / "red_0.png", (220, 30, 30))
    write_image(images / "red_far.png", (150, 60, 60))      # same identity, further away
    write_image(images / "decoy.png", (220, 40, 35))        # other identity, very close
    write_image(images / "blue.png", (30, 40, 220))
    queries = write_jsonl(tmp_path / "q.jsonl", [{"id": "q", "image": "red_0.png", "identity": "red"}])
    gallery = write_jsonl(tmp_path / "g.jsonl", [
        {"id": "copy", "image": "red_0.png", "identity": "red"},   # same image file -> excluded
        {"id": "q", "image": "blue.png", "identity": "red"},       # same id -> excluded
        {"id": "g1", "image": "red_far.png", "identity": "red"},
        {"id": "g2", "image": "decoy.png", "identity": "orange"},
        {"id": "g3", "image": "blue.png", "identity": "blue"},
    ])
    spec = DatasetSpec("G", "gallery", "Re-ID", "IND", "MVEB", queries=queries, gallery=gallery, image_root=images)
    metrics = _run(FakeEncoder(), [spec], tmp_path / "out", pictures=False)["datasets"]["G"]["metrics"]
    # Remaining ranking: decoy (neg), red_far (pos), blue (neg): the positive is rank 2.
    assert metrics["P@1"] == 0.0
    assert metrics["MRR"] == pytest.approx(50.0)
    assert metrics["recall@5"] == 100.0

    empty = write_jsonl(tmp_path / "empty.jsonl", [])
    bad = DatasetSpec("E", "gallery", "Re-ID", "IND", "MVEB", queries=queries, gallery=empty, image_root=images)
    with pytest.raises(DataError, match="empty.jsonl: data file has no rows"):
        _run(FakeEncoder(), [bad], tmp_path / "out2", pictures=False)


def _n_encoded(encoder: FakeEncoder) -> int:
    return encoder.n_items_encoded


def test_specs_built_in_code_that_would_share_output_files_are_refused(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    cand, gal = _specs(files)
    encoder = FakeEncoder()
    with pytest.raises(DataError, match=r"datasets 'Re ID' and 'Re_ID' would share the file name 'Re_ID'"):
        _run(encoder, [dataclasses.replace(cand, name="Re ID"), dataclasses.replace(gal, name="Re_ID")],
             tmp_path / "out", pictures=False, save_runs=True)
    assert encoder.calls == []  # refused before anything is encoded


def test_cache_reused_only_when_nothing_changed(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    specs, out = _specs(files), tmp_path / "out"
    first = FakeEncoder()
    baseline = _run(first, specs, out, pictures=False)
    assert _n_encoded(first) == 30

    same = FakeEncoder()
    assert _run(same, specs, out, pictures=False) == baseline
    assert _n_encoded(same) == 0  # nothing changed: everything comes from the cache

    for changed in (FakeEncoder(adapter="runs/other-adapter"), FakeEncoder(prompt_format="vlm2vec")):
        _run(changed, specs, out, pictures=False)
        assert _n_encoded(changed) == 30, "a new adapter / prompt format must re-encode everything"

    # One image changes: every pool holding it is re-encoded and the metrics see the new pixels.
    write_image(files["images"] / "red_1.png", (30, 40, 220))  # the red candidate now looks blue
    after_edit = FakeEncoder()
    edited = _run(after_edit, specs, out, pictures=False)
    assert _n_encoded(after_edit) > 0
    assert edited["datasets"]["Cand"]["metrics"]["P@1"] < baseline["datasets"]["Cand"]["metrics"]["P@1"]


def test_resume_after_interruption_reencodes_nothing_done(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    specs, out = _specs(files), tmp_path / "out"
    reference = _run(FakeEncoder(), specs, tmp_path / "reference", pictures=False, shard_size=4)

    # Cand needs 2 + 2 shard calls (6 queries, 6 candidates); Gal reuses the query pool (same
    # items, same instruction) and needs 5 gallery shards.  Stop after 2 of them.
    interrupted = FakeEncoder(fail_after_calls=6)
    with pytest.raises(KeyboardInterrupt):
        _run(interrupted, specs, out, pictures=False, shard_size=4)
    assert (out / "datasets" / "Cand.json").exists() and not (out / "datasets" / "Gal.json").exists()
    done_before = _n_encoded(interrupted)

    resumed = FakeEncoder()
    results = _run(resumed, specs, out, pictures=False, shard_size=4)
    assert done_before == 6 + 6 + 2 * 4
    assert _n_encoded(resumed) == 18 - 2 * 4  # only the unfinished gallery shards
    assert resumed.calls == [("Represent the image.", 4)] * 2 + [("Represent the image.", 2)]
    assert results["datasets"] == reference["datasets"]


def test_pictures_written_with_expected_sizes(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    out = tmp_path / "out"
    _run(FakeEncoder(), _specs(files), out, n_examples=2)
    for name in ("Cand", "Gal"):
        with Image.open(out / "grids" / f"{name}.png") as grid:
            assert grid.size == plots.grid_size(2)
            # query tile border is blue, first result of a perfect model is green
            pixels = np.asarray(grid.convert("RGB"))
            cell = plots.TILE + 2 * plots.GAP
            assert tuple(pixels[plots.HEADER + 1, 1]) == plots.QUERY_COLOUR
            assert tuple(pixels[plots.HEADER + 1, cell + 1]) == plots.POSITIVE_COLOUR
    expected = (int(plots.BAR_FIGSIZE[0] * plots.BAR_DPI), int(plots.BAR_FIGSIZE[1] * plots.BAR_DPI))
    for task in ("ID-Rec", "Re-ID"):
        with Image.open(out / "plots" / f"{task}.png") as chart:
            assert chart.size == expected


@pytest.mark.parametrize("index", ["ivf", "exact-bf16"])
def test_index_options_match_exact_on_a_small_gallery(tmp_path: Path, index: str) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    exact = _run(FakeEncoder(), _specs(files)[1:], tmp_path / "exact", pictures=False)
    other = _run(FakeEncoder(), _specs(files)[1:], tmp_path / index, pictures=False, index=index)
    # results.json records the canonical kind, the name asked for beside it, and the whole spec
    recorded = other["datasets"]["Gal"]
    assert (recorded["index"], recorded["index_requested"]) == ({"ivf": "ivf-flat", "exact-bf16": "flat"}[index], index)
    assert recorded["index_spec"]["kind"] == recorded["index"]
    # ivf: 18 items -> a single IVF list, searched exhaustively; exact-bf16 is exact by
    # construction: identical metrics either way.
    assert other["datasets"]["Gal"]["metrics"] == exact["datasets"]["Gal"]["metrics"]


@pytest.mark.parametrize(("options", "field", "reason"), [
    ({"index": "hnsw"}, "Gal.options.index",
     "unknown index kind 'hnsw' (known: auto, flat, binary, int8, ivf-flat, ivf-pq, flat-bf16, flat-gpu, "
         "exact, exact-bf16, exact-gpu, ivf)"),
    ({"tie_policy": "last"}, "Gal.options.tie_policy", "unknown tie policy 'last' (known: pessimistic, first)"),
    ({"depth": 0}, "Gal.options.depth", "greater than 0"),
    ({"ks": [1, -5]}, "Gal.options.ks[1]", "greater than 0"),
])
def test_dataset_options_are_validated_when_the_spec_is_built(tmp_path: Path, options: dict, field: str,
                                                              reason: str) -> None:
    """Before any encoding: a spec with a bad option cannot exist (one check, one error type)."""
    files = make_identity_benchmark(tmp_path / "data")
    spec = _specs(files)[1]
    with pytest.raises(DataError) as info:
        dataclasses.replace(spec, options=options)
    assert info.value.field == field and reason in info.value.reason


@pytest.mark.parametrize(("setting", "value"), [("index", "hnsw"), ("tie_policy", "last")])
def test_run_settings_use_the_same_vocabulary_check(setting: str, value: str) -> None:
    with pytest.raises(DataError, match=f"field '{setting}': unknown"):
        EvalSettings(**{setting: value})


def test_dataset_filter_and_max_queries(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    results = _run(FakeEncoder(), _specs(files), tmp_path / "out", pictures=False, datasets=["Gal"], max_queries=2)
    assert list(results["datasets"]) == ["Gal"]
    assert results["datasets"]["Gal"]["n_queries"] == 2
    with pytest.raises(ValueError, match="unknown dataset"):
        _run(FakeEncoder(), _specs(files), tmp_path / "out", pictures=False, datasets=["Nope"])


def test_peer_protocol_layouts_match_the_protocol_functions(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    images, encoder = files["images"], FakeEncoder()

    def emb(name: str) -> np.ndarray:
        return encoder.embed_one({"image": str(images / name)})

    afc = write_jsonl(tmp_path / "afc.jsonl", [
        {"id": "t0", "reference": "red_0.png", "a": "red_1.png", "b": "blue_1.png", "label": 0.9},
        {"id": "t1", "reference": "blue_0.png", "a": "red_1.png", "b": "blue_1.png", "label": 1},
    ])
    nearid = write_jsonl(tmp_path / "nearid.jsonl", [
        {"id": "red", "views": ["red_0.png", "red_1.png", "red_2.png"],
         "negatives": ["yellow_0.png", None, "blue_0.png"]},
    ])
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [
        {"id": f"p{i}", "a": f"{c}_0.png", "b": f"{d}_1.png", "label": int(c == d), "score": float(c == d) + 0.1 * i}
        for i, (c, d) in enumerate([("red", "red"), ("red", "yellow"), ("blue", "blue"), ("cyan", "blue")])
    ])
    common = {"image_root": images, "split": None, "benchmark": "other"}
    specs = [DatasetSpec("AFC", "2afc", "2AFC", path=afc, **common),
             DatasetSpec("NearID", "nearid", "NearID", path=nearid, **common),
             DatasetSpec("TLL", "asym_recall", "AsymRecall", path=pairs, **common),
             DatasetSpec("AP", "pair_ap", "PairAP", path=pairs, **common),
             DatasetSpec("Corr", "human_corr", "HumanCorr", path=pairs, **common)]
    results = _run(encoder, specs, tmp_path / "out", pictures=False)
    got = {name: entry["metrics"] for name, entry in results["datasets"].items()}

    cos = lambda x, y: float(emb(x) @ emb(y))  # noqa: E731
    expected_afc = peer_metrics.two_afc_accuracy(
        np.array([cos("red_0.png", "red_1.png"), cos("blue_0.png", "red_1.png")]),
        np.array([cos("red_0.png", "blue_1.png"), cos("blue_0.png", "blue_1.png")]), np.array([0.9, 1.0]))
    assert got["AFC"]["2AFC"] == pytest.approx(100 * expected_afc.mean())
    assert got["AFC"]["2AFC_CI95_low"] <= got["AFC"]["2AFC"] <= got["AFC"]["2AFC_CI95_high"]
    views = np.stack([emb(f"red_{v}.png") for v in range(3)])
    negatives = np.stack([emb("yellow_0.png"), np.zeros_like(views[0]), emb("blue_0.png")])
    margins = peer_metrics.nearid_margins(views, negatives, np.array([1, 0, 1], bool))
    expected_nearid = peer_metrics.nearid_scores([margins])
    assert got["NearID"]["SSR"] == pytest.approx(100 * expected_nearid["SSR"])
    assert got["NearID"]["pairwise_acc"] == pytest.approx(100 * expected_nearid["pairwise_acc"])
    assert got["NearID"]["n_margins"] == 4
    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    a = np.stack([emb(r["a"]) for r in rows])
    b = np.stack([emb(r["b"]) for r in rows])
    sims = np.einsum("nd,nd->n", a, b)
    assert got["TLL"]["R@1"] == pytest.approx(100 * peer_metrics.asymmetric_recall_at_k(a, b, ks=(1,))["R@1"])
    labels = np.array([r["label"] for r in rows])
    assert got["AP"]["AP"] == pytest.approx(100 * peer_metrics.average_precision(sims, labels))
    assert got["Corr"]["spearman"] == pytest.approx(
        100 * peer_metrics.spearman(sims, np.array([r["score"] for r in rows])))
    assert results["groups"] == {}  # protocol scores are not mixed into P@1 groups


def test_peer_protocol_rows_are_validated(tmp_path: Path) -> None:
    files = make_identity_benchmark(tmp_path / "data")
    rows = write_jsonl(tmp_path / "afc.jsonl", [
        {"id": "t0", "reference": "red_0.png", "a": "red_1.png", "b": "blue_1.png", "label": 1},
        {"id": "t1", "reference": "red_0.png", "a": "missing.png", "b": "blue_1.png", "label": 1},
    ])
    spec = DatasetSpec("AFC", "2afc", "2AFC", path=rows, image_root=files["images"])
    with pytest.raises(DataError, match=r"afc.jsonl:2: field 'a.image': image file not found"):
        _run(FakeEncoder(), [spec], tmp_path / "out", pictures=False)
    write_jsonl(rows, [{"id": "t0", "reference": "red_0.png", "a": "red_1.png", "b": "blue_1.png", "label": 2}])
    with pytest.raises(DataError, match=r"afc.jsonl:1: field 'label'"):
        _run(FakeEncoder(), [spec], tmp_path / "out", pictures=False)


def test_a_benchmark_version_is_in_each_result_and_a_new_version_recomputes(tmp_path: Path) -> None:
    # results of two versions of one benchmark are never mixed: the version is part of every
    # dataset's result key, so a finished dataset of the older version is scored again
    files = make_identity_benchmark(tmp_path / "data")
    out = tmp_path / "out"
    unversioned = _run(FakeEncoder(), _specs(files), out, pictures=False)
    assert all("benchmark_version" not in entry for entry in unversioned["datasets"].values())
    key = json.loads((out / "datasets" / "Cand.json").read_text())["key"]
    versioned = [dataclasses.replace(spec, benchmark_version=2) for spec in _specs(files)]
    results = _run(FakeEncoder(), versioned, out, pictures=False)
    assert {entry["benchmark_version"] for entry in results["datasets"].values()} == {2}
    assert json.loads((out / "datasets" / "Cand.json").read_text())["key"] != key
    again = FakeEncoder()
    assert _run(again, versioned, out, pictures=False) == results  # the same version: reused
    assert json.loads((out / "datasets" / "Cand.json").read_text())["result"]["benchmark_version"] == 2


def test_candidates_with_several_positives_count_a_hit_on_any(tmp_path: Path) -> None:
    # MomentSeeker rows name several correct clips ("positives": N, the first N candidates):
    # a query closest to the second positive is a hit at rank 1, as VLM2Vec scores it.
    images = tmp_path / "images"
    for name, colour in {"red_q": (220, 30, 30), "red_far": (120, 70, 70), "red_near": (215, 35, 30),
                         "blue": (30, 40, 220), "green": (40, 220, 40)}.items():
        write_image(images / f"{name}.png", colour)
    rows = [{"id": "q", "query": {"image": "red_q.png"}, "positives": 2,
             "candidates": [{"image": "red_far.png"}, {"image": "red_near.png"}, {"image": "blue.png"},
                            {"image": "green.png"}]}]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    spec = DatasetSpec("C", "candidates", "V-MRET", None, "MMEB-V2", path=path, image_root=images)
    one = _run(FakeEncoder(), [spec], tmp_path / "out2", pictures=False, save_runs=True)
    assert one["datasets"]["C"]["metrics"]["P@1"] == 100.0  # percent, as every result
    qrels = (tmp_path / "out2" / "runs" / "C.qrels").read_text().split("\n")
    assert sorted(line.split()[2] for line in qrels if line) == ["c0", "c1"]
    # the same row read with one positive: the nearest candidate is a negative
    path.write_text(json.dumps({**rows[0], "positives": 1}) + "\n")
    assert _run(FakeEncoder(), [spec], tmp_path / "out1", pictures=False)["datasets"]["C"]["metrics"]["P@1"] == 0.0
    for bad in (0, 5, "2", True):
        path.write_text(json.dumps({**rows[0], "positives": bad}) + "\n")
        with pytest.raises(DataError, match="positives"):
            _run(FakeEncoder(), [spec], tmp_path / f"bad{bad}", pictures=False)
