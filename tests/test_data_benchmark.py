"""Benchmark manifests and the candidates / gallery layouts: round trips and malformed inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from PIL import Image

from vis_embed.data import load_benchmark, write_table
from vis_embed.errors import DataError


@pytest.fixture()
def bench_dir(tmp_path: Path) -> Path:
    images = tmp_path / "eval" / "images"
    images.mkdir(parents=True)
    for name in ("q1", "g1", "g2", "g3"):
        Image.new("RGB", (4, 4)).save(images / f"{name}.png")
    write_table(tmp_path / "eval" / "cand.jsonl", [
        {"id": "c1", "query": {"image": "q1.png", "text": "Represent the given image for classification"},
         "candidates": [{"text": "cat"}, {"text": "dog"}, {"text": "bird"}]},
        {"id": "c2", "query": {"text": "a cat"}, "candidates": [{"image": "g1.png"}, {"image": "g2.png"}]},
    ])
    gallery = [{"id": "g1", "image": "g1.png", "identity": "cat"},
               {"id": "g2", "image": "g2.png", "identity": "cat", "text": "side view"},
               {"id": "g3", "image": "g3.png", "identity": "dog"}]
    write_table(tmp_path / "eval" / "gallery.parquet", gallery)
    write_table(tmp_path / "eval" / "queries.jsonl", [
        {"id": "g1", "image": "g1.png", "identity": "cat"},           # same id as a gallery row
        {"id": "q1", "image": "g2.png", "identity": "cat"},           # same image as a gallery row
    ])
    (tmp_path / "eval" / "pairs2afc.jsonl").write_text("{}\n")
    return tmp_path


def _manifest(bench_dir: Path, datasets: list[dict], **top) -> Path:
    path = bench_dir / "benchmark.yaml"
    path.write_text(yaml.safe_dump({"name": "t", **top, "datasets": datasets}, sort_keys=False))
    return path


CAND = {"name": "ImageNet-1K", "benchmark": "MMEB", "meta_task": "Cls", "split": "IND",
        "layout": "candidates", "path": "eval/cand.jsonl", "image_root": "eval/images"}
GAL = {"name": "SynthReID", "meta_task": "Re-ID", "split": "OOD", "layout": "gallery",
       "queries": "eval/queries.jsonl", "gallery": "eval/gallery.parquet", "image_root": "eval/images",
       "query_instruction": "Find the same object.", "candidate_instruction": "Represent the image."}
PEER = {"name": "NearID", "benchmark": "other", "meta_task": "near-identity", "split": "OOD",
        "layout": "2afc", "path": "eval/pairs2afc.jsonl", "margin": 0.1}


def test_manifest_round_trip(bench_dir: Path) -> None:
    bench = load_benchmark(_manifest(bench_dir, [CAND, GAL, PEER], description="demo"))
    assert bench.name == "t" and bench.description == "demo"
    cand, gal, peer = bench.datasets
    assert (cand.benchmark, cand.meta_task, cand.split, cand.layout) == ("MMEB", "Cls", "IND", "candidates")
    assert cand.path == bench_dir / "eval" / "cand.jsonl" and cand.image_root == bench_dir / "eval" / "images"
    assert gal.benchmark == "MVEB"  # inferred from the meta-task
    assert gal.query_instruction == "Find the same object."
    assert peer.options.as_dict() == {"margin": 0.1} and peer.path == bench_dir / "eval" / "pairs2afc.jsonl"
    assert peer.image_root == bench_dir / "eval"  # default: the data file's folder
    assert bench.dataset("NearID") is peer
    first = bench.fingerprint()
    assert load_benchmark(bench.path).fingerprint() == first
    write_table(bench_dir / "eval" / "cand.jsonl",
                [{"id": "c9", "query": {"text": "x"}, "candidates": [{"text": "y"}]}])
    assert load_benchmark(bench.path).fingerprint() != first


def test_candidates_layout(bench_dir: Path) -> None:
    queries = load_benchmark(_manifest(bench_dir, [CAND])).datasets[0].load_candidates()
    images = bench_dir / "eval" / "images"
    assert [q.id for q in queries] == ["c1", "c2"]
    assert queries[0].query == {"image": str(images / "q1.png"),
                                "text": "Represent the given image for classification"}
    assert queries[0].candidates[0] == {"image": None, "text": "cat"}  # positive first
    assert [c["image"] for c in queries[1].candidates] == [str(images / "g1.png"), str(images / "g2.png")]


def test_gallery_layout_and_self_exclusion(bench_dir: Path) -> None:
    data = load_benchmark(_manifest(bench_dir, [GAL])).datasets[0].load_gallery()
    assert [r.identity for r in data.gallery] == ["cat", "cat", "dog"]
    assert data.gallery[1].text == "side view" and data.gallery[1].item()["text"] == "side view"
    assert data.excluded() == [[0], [1]]  # by id, by resolved image file


def test_a_shared_id_naming_another_identity_is_an_error(bench_dir: Path) -> None:
    """Files numbered apart: the gallery row with the query's id would be dropped from its ranking
    as the query itself, though it is another identity's row (here the query's only positive
    would be lost too, had it been that row); refused at load, naming both lines."""
    write_table(bench_dir / "eval" / "queries.jsonl", [{"id": "g3", "image": "g1.png", "identity": "cat"}])
    with pytest.raises(DataError, match=r"queries.jsonl:1: field 'id': id 'g3' is a query of identity 'cat' and, "
                                        r"in gallery.parquet line 3, a gallery row of identity 'dog'"):
        load_benchmark(_manifest(bench_dir, [GAL])).datasets[0].load_gallery()


def test_gallery_query_without_answer_is_an_error(bench_dir: Path) -> None:
    write_table(bench_dir / "eval" / "queries.jsonl", [{"id": "g3", "image": "g3.png", "identity": "dog"}])
    with pytest.raises(DataError, match=r"queries.jsonl:1: field 'identity': identity 'dog' has no other"):
        load_benchmark(_manifest(bench_dir, [GAL])).datasets[0].load_gallery()


@pytest.mark.parametrize("change, pattern", [
    ({"layout": "ranking"}, r"benchmark.yaml:\d+: field 'datasets\[0\].layout': unknown layout 'ranking'"),
    ({"split": "val"}, r"field 'datasets\[0\].split': unknown split 'val'"),
    ({"meta_task": "ID-Rec"}, r"field 'datasets\[0\].meta_task': meta-task 'ID-Rec' is not one of MMEB's"),
    ({"split": "OOD"}, r"MMEB dataset 'ImageNet-1K' is Cls/IND"),
    ({"benchmark": "MTEB"}, r"unknown benchmark 'MTEB'"),
    ({"path": "eval/none.jsonl"}, r"field 'datasets\[0\].path': file not found"),
    ({"margin": 0.1}, r"field 'datasets\[0\].margin': unknown key for layout 'candidates'"),
    ({"queries": "eval/queries.jsonl"}, r"layout 'candidates' takes path, not 'queries'"),
    ({"layout": "gallery"}, r"layout 'gallery' takes queries and gallery, not 'path'"),
    # the wording of every configuration (recipe, data config, manifest): vis_embed.config
    ({"split": None}, r"benchmark.yaml:3: field 'datasets\[0\].split': required key missing"),
    ({"name": 3}, r"field 'datasets\[0\].name': expected a non-empty string"),
    # dataset options: typed, checked here once (not where evaluation uses them)
    ({"options": {"index": "hnsw"}}, r"benchmark.yaml:\d+: field 'datasets\[0\].options.index': unknown index kind"),
    ({"options": {"tie_policy": "last"}}, r"field 'datasets\[0\].options.tie_policy': unknown tie policy 'last'"),
    ({"options": {"depth": "deep"}}, r"field 'datasets\[0\].options.depth': .*valid integer"),
])
def test_malformed_manifest_entries(bench_dir: Path, change: dict, pattern: str) -> None:
    entry = {**CAND, **change}
    entry = {k: v for k, v in entry.items() if v is not None}
    with pytest.raises(DataError, match=pattern):
        load_benchmark(_manifest(bench_dir, [entry]))


def test_a_peer_layouts_extra_keys_are_options_and_checked_like_them(bench_dir: Path) -> None:
    spec = load_benchmark(_manifest(bench_dir, [{**PEER, "seed": 3, "options": {"ks": [1, 2]}}])).datasets[0]
    assert (spec.options.seed, spec.options.ks, spec.options.get("margin")) == (3, (1, 2), 0.1)
    with pytest.raises(DataError, match=r"benchmark.yaml:\d+: field 'datasets\[0\].index': unknown index kind 'hnsw'"):
        load_benchmark(_manifest(bench_dir, [{**PEER, "index": "hnsw"}]))
    # a negative bootstrap seed was a numpy traceback after the whole dataset was encoded
    with pytest.raises(DataError, match=r"benchmark.yaml:\d+: field 'datasets\[0\].seed': .*greater than or equal"):
        load_benchmark(_manifest(bench_dir, [{**PEER, "seed": -1}]))


def test_names_that_would_share_an_output_file_are_refused(bench_dir: Path) -> None:
    """'Re ID' and 'Re_ID' are both datasets/Re_ID.json and runs/Re_ID.trec: the second dataset's run
    replaced the first's (results.json named the same file for both) and each resume recomputed one."""
    with pytest.raises(DataError, match=r"benchmark.yaml:\d+: field 'name': datasets 'Re ID' and 'Re_ID' would share "
                                        r"the file name 'Re_ID'"):
        load_benchmark(_manifest(bench_dir, [{**GAL, "name": "Re ID"}, {**GAL, "name": "Re_ID"}]))
    with pytest.raises(DataError, match=r"datasets 'reid' and 'ReID' would share"):  # one file where case is folded
        load_benchmark(_manifest(bench_dir, [{**GAL, "name": "reid"}, {**GAL, "name": "ReID"}]))


def test_malformed_manifest_top_level(bench_dir: Path) -> None:
    with pytest.raises(DataError, match=r"benchmark.yaml:\d+: field 'seed': unknown key"):
        load_benchmark(_manifest(bench_dir, [CAND], seed=1))
    with pytest.raises(DataError, match=r"benchmark.yaml:\d+: field 'datasets\[1\].name': "
                                        r"duplicate dataset name 'ImageNet-1K'"):
        load_benchmark(_manifest(bench_dir, [CAND, CAND]))
    (bench_dir / "dup.yaml").write_text("name: a\nname: b\ndatasets: []\n")
    with pytest.raises(DataError, match=r"dup.yaml:2: field 'name': duplicate key"):
        load_benchmark(bench_dir / "dup.yaml")


@pytest.mark.parametrize("row, pattern", [
    ({"id": "x", "query": {"text": "q"}}, r"cand.jsonl:1: field 'candidates': missing required field"),
    ({"id": "x", "query": {"text": "q"}, "candidates": []}, r"field 'candidates': expected a non-empty list"),
    ({"id": "x", "query": {"text": "q"}, "candidates": [{"text": 5}]},
     r"field 'candidates\[0\].text': must be a string"),
    ({"id": "x", "query": {"image": "missing.png"}, "candidates": [{"text": "a"}]},
     r"field 'query.image': image file not found"),
    ({"query": {"text": "q"}, "candidates": [{"text": "a"}]}, r"field 'id': missing required field"),
])
def test_malformed_candidate_rows(bench_dir: Path, row: dict, pattern: str) -> None:
    write_table(bench_dir / "eval" / "cand.jsonl", [row])
    spec = load_benchmark(_manifest(bench_dir, [CAND])).datasets[0]
    with pytest.raises(DataError, match=pattern):
        spec.load_candidates()


def test_duplicate_id_in_gallery(bench_dir: Path) -> None:
    write_table(bench_dir / "eval" / "gallery.parquet", [
        {"id": "g1", "image": "g1.png", "identity": "cat"}, {"id": "g1", "image": "g2.png", "identity": "cat"}])
    with pytest.raises(DataError, match=r"gallery.parquet:2: field 'id': duplicate id 'g1'"):
        load_benchmark(_manifest(bench_dir, [GAL])).datasets[0].load_gallery()


def test_equal_candidates_share_one_item(bench_dir: Path) -> None:
    """MMEB classification repeats ~1000 labels per query; sharing keeps 1M candidates small."""
    labels = [{"text": f"label {k}"} for k in range(5)]
    write_table(bench_dir / "eval" / "cand.jsonl",
                [{"id": str(q), "query": {"text": "q"}, "candidates": labels[q:] + labels[:q]} for q in range(3)])
    queries = load_benchmark(_manifest(bench_dir, [CAND])).datasets[0].load_candidates()
    assert queries[1].candidates[0]["text"] == "label 1"  # order (positive first) is kept
    assert queries[1].candidates[0] is queries[0].candidates[1]
