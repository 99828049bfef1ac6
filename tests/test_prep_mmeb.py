"""MMEB converters on files written in the published MMEB-train / MMEB-eval column layouts."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image

from vis_embed.prep.mmeb import convert_mmeb_eval, convert_mmeb_train, strip_placeholder
from vis_embed.cli import main as cli_main
from vis_embed.data import load_benchmark, load_train_config
from vis_embed.errors import DataError

TRAIN_SCHEMA = pa.schema([(c, pa.string()) for c in
                          ("qry", "qry_image_path", "pos_text", "pos_image_path", "neg_text", "neg_image_path")])
EVAL_SCHEMA = pa.schema([("qry_text", pa.string()), ("qry_img_path", pa.string()),
                         ("tgt_text", pa.list_(pa.string())), ("tgt_img_path", pa.list_(pa.string()))])


def _images(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (4, 4)).save(root / name)


def _train_rows() -> list[dict]:
    instruction = "<|image_1|>\nRepresent the given image for classification\n"
    return [
        {"qry": instruction, "qry_image_path": "cls/Train/a.jpg", "pos_text": "tench",
         "pos_image_path": "", "neg_text": "goldfish", "neg_image_path": ""},       # linked to row 1
        {"qry": instruction, "qry_image_path": "cls/Train/b.jpg", "pos_text": "goldfish",
         "pos_image_path": "", "neg_text": "", "neg_image_path": ""},
        {"qry": "Find me an everyday image that matches the given caption: a dog.", "qry_image_path": "",
         "pos_text": "<|image_1|>\nRepresent the given image.", "pos_image_path": "t2i/dog.jpg",
         "neg_text": "<|image_1|>\nRepresent the given image.", "neg_image_path": "t2i/cat.jpg"},  # unlinked
    ]


def _write_train(root: Path) -> Path:
    snapshot = root / "MMEB-train"
    for subset in ("ImageNet_1K", "MSCOCO_t2i"):
        folder = snapshot / subset
        folder.mkdir(parents=True)
        rows = _train_rows()[:2] if subset == "ImageNet_1K" else _train_rows()[2:]
        pq.write_table(pa.Table.from_pylist(rows, schema=TRAIN_SCHEMA),
                       folder / "original-00000-of-00001.parquet")
    _images(root / "images", "cls/Train/a.jpg", "cls/Train/b.jpg", "t2i/dog.jpg", "t2i/cat.jpg")
    return snapshot


def test_strip_placeholder() -> None:
    assert strip_placeholder("<|image_1|>\nRepresent the given image.") == "Represent the given image."
    assert strip_placeholder("<|image_1|>") is None
    assert strip_placeholder("a <|image_2|> b") == "a  b"


def test_mmeb_train_round_trip(tmp_path: Path) -> None:
    snapshot = _write_train(tmp_path)
    report = convert_mmeb_train([snapshot], tmp_path / "out", image_root=tmp_path / "images")
    assert report["rows"] == 3 and report["missing_images"] == 0
    cfg = load_train_config(tmp_path / "out" / "train.yaml")
    cls, t2i = cfg.datasets
    assert (cls.name, cls.kind, t2i.name) == ("ImageNet_1K", "pairs", "MSCOCO_t2i")
    first = cls.records[0]
    assert first["query"] == {"image": "cls/Train/a.jpg", "text": "Represent the given image for classification"}
    assert first["positive"] == {"text": "tench"}
    assert first["hard_negatives"] == ["1"]  # "goldfish" is row 1's positive
    assert cls.query_item(first)["image"] == str(tmp_path / "images" / "cls" / "Train" / "a.jpg")
    assert "hard_negatives" not in cls.records[1] and "negatives" not in cls.records[1]
    dog = t2i.records[0]
    assert dog["query"] == {"text": "Find me an everyday image that matches the given caption: a dog."}
    assert dog["positive"] == {"image": "t2i/dog.jpg", "text": "Represent the given image."}
    # kept as the row's explicit negative candidate, loaded and resolved like its positive
    assert dog["negatives"] == [{"image": "t2i/cat.jpg", "text": "Represent the given image."}]
    assert t2i.negative_items(dog) == [{"image": str(tmp_path / "images" / "t2i" / "cat.jpg"),
                                        "text": "Represent the given image."}]
    assert cls.negative_items(first) == []
    by_name = {d["name"]: d for d in report["datasets"]}
    assert by_name["ImageNet_1K"]["negatives_linked_as_hard_negatives"] == 1
    assert by_name["MSCOCO_t2i"]["negatives_kept_unlinked"] == 1
    saved = json.loads((tmp_path / "out" / "mmeb_train_report.json").read_text())
    assert saved["negatives_kept_unlinked"] == 1


def test_mmeb_train_reports_missing_images_and_bad_rows(tmp_path: Path) -> None:
    snapshot = _write_train(tmp_path)
    (tmp_path / "images" / "t2i" / "cat.jpg").unlink()
    report = convert_mmeb_train([snapshot / "MSCOCO_t2i"], tmp_path / "out", image_root=tmp_path / "images")
    assert report["missing_images"] == 1 and report["datasets"][0]["missing_image_examples"] == ["t2i/cat.jpg"]

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"qry": "x", "qry_image_path": "", "pos_text": "y"}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:1: field 'pos_image_path': missing MMEB column"):
        convert_mmeb_train([bad], tmp_path / "out2")
    bad.write_text(json.dumps({"qry": "<|image_1|>", "qry_image_path": "", "pos_text": "y",
                               "pos_image_path": ""}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:1: field 'qry': empty query"):
        convert_mmeb_train([bad], tmp_path / "out2")


def test_mmeb_train_refuses_two_splits_in_one_folder(tmp_path: Path) -> None:
    snapshot = _write_train(tmp_path)
    folder = snapshot / "ImageNet_1K"
    (folder / "diverse_instruction-00000-of-00001.parquet").write_bytes(
        (folder / "original-00000-of-00001.parquet").read_bytes())
    with pytest.raises(DataError, match="several splits"):
        convert_mmeb_train([folder], tmp_path / "out")
    report = convert_mmeb_train([folder], tmp_path / "out", split="diverse_instruction", check_images=False)
    assert report["rows"] == 2


def _write_eval(root: Path) -> Path:
    snapshot = root / "MMEB-eval"
    rows = {
        "ImageNet-1K": [{"qry_text": "<|image_1|>\nRepresent the given image for classification\n",
                         "qry_img_path": "ImageNet-1K/Query/q.jpg", "tgt_text": ["tench", "goldfish", "shark"],
                         "tgt_img_path": ["", "", ""]}],
        "MSCOCO_t2i": [{"qry_text": "Find me an everyday image that matches the given caption: a dog.",
                        "qry_img_path": "", "tgt_text": ["<|image_1|>\nRepresent the given image."] * 2,
                        "tgt_img_path": ["MSCOCO_t2i/dog.jpg", "MSCOCO_t2i/cat.jpg"]}],
        "RefCOCO": [{"qry_text": "<|image_1|>\nSelect the portion of the image that isolates the object: dog",
                     "qry_img_path": "RefCOCO/scene.jpg", "tgt_text": ["<|image_1|>\nRepresent the given "
                                                                       "cropped image of the object"],
                     "tgt_img_path": ["RefCOCO/crop.jpg"]}],
    }
    for name, dataset_rows in rows.items():
        (snapshot / name).mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(dataset_rows, schema=EVAL_SCHEMA),
                       snapshot / name / "test-00000-of-00001.parquet")
    _images(root / "eval_images", "ImageNet-1K/Query/q.jpg", "MSCOCO_t2i/dog.jpg", "MSCOCO_t2i/cat.jpg",
            "RefCOCO/scene.jpg", "RefCOCO/crop.jpg")
    return snapshot


def test_mmeb_eval_round_trip_with_taxonomy(tmp_path: Path) -> None:
    snapshot = _write_eval(tmp_path)
    report = convert_mmeb_eval([snapshot], tmp_path / "out", image_root=tmp_path / "eval_images")
    assert len(report["mmeb_datasets_absent"]) == 33
    bench = load_benchmark(tmp_path / "out" / "benchmark.yaml")
    assert bench.name == "mmeb"
    groups = [(d.name, d.benchmark, d.meta_task, d.split, d.layout) for d in bench.datasets]
    assert groups == [("ImageNet-1K", "MMEB", "Cls", "IND", "candidates"),
                      ("MSCOCO_t2i", "MMEB", "Ret", "IND", "candidates"),
                      ("RefCOCO", "MMEB", "Grd", "OOD", "candidates")]  # taxonomy order
    cls = bench.datasets[0].load_candidates()[0]
    assert cls.query == {"image": str(tmp_path / "eval_images" / "ImageNet-1K" / "Query" / "q.jpg"),
                         "text": "Represent the given image for classification"}
    assert [c["text"] for c in cls.candidates] == ["tench", "goldfish", "shark"]
    t2i = bench.datasets[1].load_candidates()[0]
    assert t2i.candidates[0] == {"image": str(tmp_path / "eval_images" / "MSCOCO_t2i" / "dog.jpg"),
                                 "text": "Represent the given image."}
    assert t2i.query["image"] is None


def test_mmeb_eval_rejects_unknown_names_and_ragged_targets(tmp_path: Path) -> None:
    bad = tmp_path / "MyTask.jsonl"
    bad.write_text(json.dumps({"qry_text": "q", "qry_img_path": "", "tgt_text": ["a"], "tgt_img_path": [""]}) + "\n")
    with pytest.raises(DataError, match="not one of the 36 MMEB datasets"):
        convert_mmeb_eval([bad], tmp_path / "out")
    convert_mmeb_eval([bad], tmp_path / "out", meta_task="Cls", eval_split="OOD")
    assert yaml.safe_load((tmp_path / "out" / "benchmark.yaml").read_text())["datasets"][0]["split"] == "OOD"
    ragged = tmp_path / "ImageNet-A.jsonl"
    ragged.write_text(json.dumps({"qry_text": "q", "qry_img_path": "", "tgt_text": ["a", "b"],
                                  "tgt_img_path": [""]}) + "\n")
    with pytest.raises(DataError, match=r"ImageNet-A.jsonl:1: field 'tgt_img_path': tgt_text has 2"):
        convert_mmeb_eval([ragged], tmp_path / "out")


def test_mmeb_text_with_a_lone_surrogate_names_file_line_and_column(tmp_path: Path) -> None:
    """JSON's "\\ud800" decodes to a str that UTF-8 cannot hold: it reached the writer and was a
    UnicodeEncodeError traceback (the whole conversion lost) instead of an error naming the source."""
    bad = tmp_path / "bad.jsonl"
    row = {"qry": "x", "qry_image_path": "", "pos_text": "y", "pos_image_path": "",
           "neg_text": "", "neg_image_path": ""}
    bad.write_text(json.dumps(row) + "\n" + json.dumps({**row, "pos_text": "a \ud800"}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:2: field 'pos_text': is not valid Unicode"):
        convert_mmeb_train([bad], tmp_path / "out")
    task = tmp_path / "ImageNet-A.jsonl"
    task.write_text(json.dumps({"qry_text": "q", "qry_img_path": "", "tgt_text": ["a", "b\udc00"],
                                "tgt_img_path": ["", ""]}) + "\n")
    with pytest.raises(DataError, match=r"ImageNet-A.jsonl:1: field 'tgt_text': is not valid Unicode"):
        convert_mmeb_eval([task], tmp_path / "out")


def test_prep_cli_mmeb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = _write_train(tmp_path)
    code = cli_main(["prep", "mmeb-train", str(snapshot), "--out", str(tmp_path / "o"),
                     "--image-root", str(tmp_path / "images"), "--format", "parquet"])
    assert code == 0 and "3 rows" in capsys.readouterr().out
    assert (tmp_path / "o" / "ImageNet_1K.parquet").is_file()
    assert load_train_config(tmp_path / "o" / "train.yaml").datasets[0].records[0]["hard_negatives"] == ["1"]
    code = cli_main(["prep", "mmeb-eval", str(tmp_path / "missing"), "--out", str(tmp_path / "e")])
    assert code == 2 and "input not found" in capsys.readouterr().err


# ------------------------------------------------------------------ hub datasets (offline: a local hub-layout repo)

def _hub_readme(snapshot: Path, split: str) -> None:
    """README.md configs as on the hub (one config per dataset), so datasets.load_dataset and
    get_dataset_config_names read the local folder exactly as they read TIGER-Lab/MMEB-*."""
    configs = [{"config_name": folder.name, "data_files": [{"split": split, "path": f"{folder.name}/{split}-*"}]}
               for folder in sorted(snapshot.iterdir()) if folder.is_dir()]
    (snapshot / "README.md").write_text("---\n" + yaml.safe_dump({"configs": configs}) + "---\n")


def test_hub_dataset_eval_matches_the_file_conversion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    snapshot = _write_eval(tmp_path)
    _hub_readme(snapshot, "test")
    images = tmp_path / "eval_images"
    from_files = convert_mmeb_eval([snapshot], tmp_path / "files", image_root=images)
    from_hub = convert_mmeb_eval([snapshot], tmp_path / "hub", image_root=images, hub=True)
    assert [d["rows"] for d in from_hub["datasets"]] == [d["rows"] for d in from_files["datasets"]]
    files_bench, hub_bench = (load_benchmark(tmp_path / out / "benchmark.yaml") for out in ("files", "hub"))
    assert [d.name for d in hub_bench.datasets] == ["ImageNet-1K", "MSCOCO_t2i", "RefCOCO"]
    for ours, theirs in zip(hub_bench.datasets, files_bench.datasets):
        assert ours.load_candidates() == theirs.load_candidates()
    assert (tmp_path / "hub" / "hub" / "RefCOCO" / "test-00000-of-00001.parquet").is_file()


def test_hub_dataset_train_subsets_and_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    snapshot = _write_train(tmp_path)
    _hub_readme(snapshot, "original")
    code = cli_main(["prep", "mmeb-train", str(snapshot), "--hub", "--subset", "ImageNet_1K",
                     "--split", "original", "--out", str(tmp_path / "o"), "--image-root", str(tmp_path / "images")])
    assert code == 0 and "2 rows" in capsys.readouterr().out
    config = load_train_config(tmp_path / "o" / "train.yaml")
    assert [d.name for d in config.datasets] == ["ImageNet_1K"]
    assert config.datasets[0].records[0]["hard_negatives"] == ["1"]
    code = cli_main(["prep", "mmeb-train", str(snapshot), "--hub", "--split", "diverse_instruction",
                     "--out", str(tmp_path / "o2"), "--image-root", str(tmp_path / "images")])
    assert code == 2 and "no split 'diverse_instruction'" in capsys.readouterr().err


def test_hub_ids_are_recognised_and_need_an_image_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vis_embed.io import is_hub_id

    monkeypatch.chdir(tmp_path)
    assert is_hub_id("TIGER-Lab/MMEB-eval") and is_hub_id("TIGER-Lab/MMEB-train")
    assert not is_hub_id("MMEB-eval") and not is_hub_id("/data/MMEB-eval") and not is_hub_id("a/b/c")
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "x").mkdir()
    assert not is_hub_id("local/x")  # an existing relative path stays a path
    with pytest.raises(DataError, match="--image-root"):
        convert_mmeb_eval(["TIGER-Lab/MMEB-eval"], tmp_path / "out")
