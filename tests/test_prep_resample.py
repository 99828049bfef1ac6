"""Identity-aware re-sampling and splitting: disjointness, caps, fallback, determinism."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from vis_embed.prep.resample import ResampleOptions, resample_file, resample_rows
from vis_embed.cli import main as cli_main
from vis_embed.data import write_table
from vis_embed.errors import DataError


def load_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _rows(n_identities: int, sizes=(1, 2, 3, 5, 8)) -> list[dict]:
    rows = []
    for k in range(n_identities):
        for j in range(sizes[k % len(sizes)]):
            rows.append({"id": f"i{k}-{j}", "image": f"i{k}/{j}.jpg", "identity": f"id{k}"})
    rows[1]["hard_negatives"] = [rows[-1]["id"], rows[-2]["id"]]
    return rows


def test_identity_split_is_disjoint_and_capped() -> None:
    rows = _rows(200)
    options = ResampleOptions(eval_fraction=0.2, max_identities=50, max_images_per_identity=4, seed=3)
    train, evaluation, report = resample_rows(rows, options)
    train_ids = {r["identity"] for r in train}
    eval_ids = {r["identity"] for r in evaluation}
    assert not train_ids & eval_ids and report["split_mode"] == "identity"
    assert report["dropped_single_instance_identities"] == 40  # sizes cycle: one in five has 1 image
    assert len(train_ids) == 50 and max(Counter(r["identity"] for r in train).values()) == 4
    assert min(Counter(r["identity"] for r in train).values()) >= 2
    assert min(Counter(r["identity"] for r in evaluation).values()) >= 2
    assert len(eval_ids) == round(0.2 * 160) and report["identities_in_both_splits"] == 0
    # input order is kept; hard negatives only point inside their own output
    order = {r["id"]: k for k, r in enumerate(rows)}
    assert [order[r["id"]] for r in train] == sorted(order[r["id"]] for r in train)
    for side in (train, evaluation):
        ids = {r["id"] for r in side}
        assert all(n in ids for r in side for n in r.get("hard_negatives", []))


def test_hard_negatives_crossing_the_split_are_pruned() -> None:
    rows = [{"id": f"{k}-{j}", "image": f"{k}/{j}.jpg", "identity": str(k), "hard_negatives": [f"{(k + 1) % 20}-0"]}
            for k in range(20) for j in range(3)]
    train, evaluation, report = resample_rows(rows, ResampleOptions(eval_fraction=0.3))
    side_of = {r["id"]: name for name, side in (("train", train), ("eval", evaluation)) for r in side}
    crossing = sum(side_of[r["id"]] != side_of[r["hard_negatives"][0]] for r in rows)
    assert crossing > 0 and report["hard_negative_refs_removed"] == crossing
    kept = sum(len(r.get("hard_negatives", [])) for r in train + evaluation)
    assert kept == len(rows) - crossing


def test_same_seed_same_output_and_seed_matters() -> None:
    rows = _rows(100)
    first = resample_rows(rows, ResampleOptions(seed=1, max_images_per_identity=2))
    assert resample_rows(rows, ResampleOptions(seed=1, max_images_per_identity=2)) == first
    other = resample_rows(rows, ResampleOptions(seed=2, max_images_per_identity=2))
    assert other[1] != first[1]


def test_fallback_to_sample_split_is_reported(tmp_path: Path) -> None:
    rows = [{"id": f"{k}-{j}", "image": f"{k}/{j}.jpg", "identity": str(k)} for k in range(3) for j in range(10)]
    write_table(tmp_path / "few.jsonl", rows)
    report = resample_file(tmp_path / "few.jsonl", tmp_path / "out",
                           ResampleOptions(eval_fraction=0.3, min_identities=10))
    assert report["split_mode"] == "sample" and "SHARE identities" in report["fallback_reason"]
    saved = json.loads((tmp_path / "out" / "resample_report.json").read_text())
    assert saved["fallback_reason"] == report["fallback_reason"]
    train = [json.loads(line) for line in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]
    evaluation = [json.loads(line) for line in (tmp_path / "out" / "eval.jsonl").read_text().splitlines()]
    assert {r["id"] for r in train}.isdisjoint(r["id"] for r in evaluation)  # no image in both
    assert Counter(r["identity"] for r in evaluation) == {"0": 3, "1": 3, "2": 3}
    assert len(train) == 21


def test_outputs_load_as_train_config_and_gallery(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from PIL import Image

    from vis_embed.data import load_benchmark, load_train_config

    rows = _rows(30, sizes=(3,))
    for row in rows:
        (tmp_path / "src" / row["image"]).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (2, 2)).save(tmp_path / "src" / row["image"])
    write_table(tmp_path / "src" / "objects.jsonl", rows)
    report = resample_file(tmp_path / "src" / "objects.jsonl", tmp_path / "split", ResampleOptions(eval_fraction=0.2))
    train = load_train_config(tmp_path / "split" / "train.yaml").dataset("objects")
    spec = load_benchmark(tmp_path / "split" / "benchmark.yaml").dataset("objects")
    gallery = spec.load_gallery()
    assert (spec.layout, spec.benchmark, spec.meta_task) == ("gallery", "other", "ID-Rec")
    assert len(gallery.queries) == report["eval"]["rows"] == 18 and len(train) == 72
    assert {r["identity"] for r in train.records}.isdisjoint(q.identity for q in gallery.queries)
    assert train.positive_item(train.records[0])["image"].startswith(str(tmp_path / "src"))
    # `prep check` validates both files and summarises them
    assert cli_main(["prep", "check", str(tmp_path / "split" / "train.yaml"),
                     str(tmp_path / "split" / "benchmark.yaml")]) == 0
    out = capsys.readouterr().out
    assert "objects: identity, 72 rows, 24 identities" in out and "18 queries, 18 gallery rows" in out
    (tmp_path / "src" / rows[0]["image"]).unlink()
    assert cli_main(["prep", "check", str(tmp_path / "split" / "train.yaml"),
                     str(tmp_path / "split" / "benchmark.yaml")]) == 2
    assert "image file not found" in capsys.readouterr().err


def test_pairs_rows_keep_rows_without_identity() -> None:
    rows = [{"id": str(k), "query": {"text": f"q{k}"}, "positive": {"text": f"p{k}"}} for k in range(40)]
    rows += [{"id": f"x{k}", "query": {"text": "q"}, "positive": {"text": "p"}, "identity": "shared"}
             for k in range(3)]
    train, evaluation, report = resample_rows(rows, ResampleOptions(eval_fraction=0.25))
    assert report["kind"] == "pairs" and report["dropped_single_instance_rows"] == 0
    assert len(train) + len(evaluation) == 43
    shared_sides = {("train" if r in train else "eval") for r in rows if r.get("identity") == "shared"}
    assert len(shared_sides) == 1


def test_pairs_rows_without_identity_are_split_by_their_loss_label() -> None:
    # classification rows: the positive is the class name, the loss label (docs/data.md)
    names = ["tench", "goldfish", "shark"]
    rows = [{"id": str(k), "query": {"image": f"{k}.jpg"}, "positive": {"text": names[k % 3]}} for k in range(30)]
    train, evaluation, report = resample_rows(rows, ResampleOptions(eval_fraction=0.3, min_identities=1))
    assert report["split_mode"] == "identity" and evaluation and train
    assert {r["positive"]["text"] for r in train}.isdisjoint(r["positive"]["text"] for r in evaluation)
    assert report["input"]["identities"] == 3


def test_bad_options_and_rows() -> None:
    with pytest.raises(DataError, match="eval_fraction"):
        ResampleOptions(eval_fraction=1.5)
    with pytest.raises(DataError, match="max_images_per_identity"):
        ResampleOptions(max_images_per_identity=1)
    with pytest.raises(DataError, match="field 'identity': missing required field"):
        resample_rows([{"id": "a", "image": "a.jpg"}])


@pytest.mark.parametrize(("lines", "expected"), [
    (['{"id": "a", "image": "x.png", "identity": "p1"}', "", '{"id": "b", "image": "x.png"}'],
     "rows.jsonl:3: field 'identity': missing required field"),  # the blank line counts
    (['{"id": "a", "image": "x.png", "identity": "p1"}', '{"id": "b", "image": "x.png", "identity": 12}'],
     "rows.jsonl:2: field 'identity': expected a string, got int"),
    (['{"id": "a", "image": "x.png", "identity": ["p1"]}'], "rows.jsonl:1: field 'identity': expected a string"),
    (['{"id": "a", "query": {"text": "q"}, "positive": {"text": "t"}}',
      '{"id": 5, "query": {"text": "q"}, "positive": {"text": "t"}}'], "rows.jsonl:2: field 'id': expected a string"),
    (['{"id": "a", "query": {"text": "q"}, "positive": {"text": "t"}}', '{"id": "b", "query": {"text": "q"}}'],
     "rows.jsonl:2: field 'positive': missing required field"),
    (['{"id": "a", "image": "x.png", "identity": "p1"}', '{"id": "a", "image": "y.png", "identity": "p1"}'],
     "rows.jsonl:2: field 'id': duplicate id 'a' \\(first on line 1\\)"),
    # JSON's "\\ud800": a str no file can hold (it was a UnicodeEncodeError when the split was written)
    ([json.dumps({"id": f"r{i}" + ("\ud800" if i == 5 else ""), "image": "x.png", "identity": f"p{i % 4}"})
      for i in range(16)], "rows.jsonl:6: field 'id': is not valid Unicode"),
    (['{"id": "a", "image": "x.png", "identity": "p\\udc00"}'], "rows.jsonl:1: field 'identity': is not valid Unicode"),
])
def test_bad_rows_name_file_line_and_field(tmp_path: Path, lines: list[str], expected: str) -> None:
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=expected):
        resample_file(tmp_path / "rows.jsonl", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_prep_split_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_table(tmp_path / "rows.parquet", _rows(60))
    code = cli_main(["prep", "split", str(tmp_path / "rows.parquet"), str(tmp_path / "out"),
                     "--max-identities", "10", "--max-images-per-identity", "3", "--seed", "5"])
    assert code == 0
    out = json.loads(capsys.readouterr().out.splitlines()[0])
    assert out["split_mode"] == "identity" and out["train"]["identities"] == 10
    assert (tmp_path / "out" / "train.parquet").is_file() and (tmp_path / "out" / "eval.parquet").is_file()


def _scene_rows(n_identities: int, *, same_file_every: int = 0, bbox: bool = False) -> list[dict]:
    """3 instances per identity, each with the identity's caption; every ``same_file_every``-th
    identity shows all its instances in one image file (crops or repeats of one photo)."""
    rows = []
    for k in range(n_identities):
        one_file = same_file_every and k % same_file_every == 0
        for j in range(3):
            row = {"id": f"o{k}-{j}", "image": f"s{k}.png" if one_file else f"s{k}-{j}.png",
                   "identity": f"o{k}", "text": f"object {k}"}
            if bbox:
                row["bbox"] = [j, j, 10 + j, 10 + j]
            rows.append(row)
    return rows


def test_benchmark_tests_the_trained_task_without_the_identity_text(tmp_path: Path) -> None:
    from vis_embed.data import load_benchmark

    write_table(tmp_path / "objects.jsonl", _scene_rows(40, same_file_every=4))
    report = resample_file(tmp_path / "objects.jsonl", tmp_path / "out", ResampleOptions(eval_fraction=0.5))
    data = load_benchmark(tmp_path / "out" / "benchmark.yaml").datasets[0].load_gallery(check_images=False)
    # the query is the row as training's query item (image + text); the candidate has no text,
    # as training's positive: a gallery of captions would be solved by reading them
    assert all(q.text is not None for q in data.queries) and all(g.text is None for g in data.gallery)
    one_file = {f"o{k}" for k in range(0, 40, 4)}
    eval_ids = {r["identity"] for r in load_rows(tmp_path / "out" / "eval.jsonl")}
    left_out = eval_ids & one_file
    assert left_out and not {q.identity for q in data.queries} & left_out
    assert report["benchmark"]["identities_left_out_one_image"] == len(left_out)
    assert report["benchmark"]["queries"] == len(data.queries) == 3 * len(eval_ids - one_file)


def test_rows_with_a_bbox_get_no_gallery_benchmark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_table(tmp_path / "ground.jsonl", _scene_rows(20, bbox=True))
    assert cli_main(["prep", "resample", str(tmp_path / "ground.jsonl"), str(tmp_path / "out"),
                     "--eval-fraction", "0.25"]) == 0
    assert "no benchmark.yaml: " in capsys.readouterr().out
    assert (tmp_path / "out" / "eval.jsonl").is_file() and not (tmp_path / "out" / "benchmark.yaml").exists()
    saved = json.loads((tmp_path / "out" / "resample_report.json").read_text())
    assert saved["benchmark"]["written"] is False and "bbox" in saved["benchmark"]["reason"]


def test_outputs_are_one_set_a_rerun_leaves_no_stale_eval_files(tmp_path: Path) -> None:
    from vis_embed.errors import ConfigError

    write_table(tmp_path / "objects.jsonl", _scene_rows(20))
    resample_file(tmp_path / "objects.jsonl", tmp_path / "out", ResampleOptions(eval_fraction=0.25))
    assert (tmp_path / "out" / "benchmark.yaml").is_file()
    report = resample_file(tmp_path / "objects.jsonl", tmp_path / "out", ResampleOptions(eval_fraction=0))
    assert report["eval"]["rows"] == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["resample_report.json", "train.jsonl",
                                                                      "train.yaml"]
    # a folder of someone else's files is never replaced
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(ConfigError, match="OUT_DIR"):
        resample_file(tmp_path / "objects.jsonl", tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
