"""Failure probe (issue 18): many bad inputs through the CLI, in process.

Every case must end with exit code 2, an ``error:`` line naming the file (and line or field)
at fault, no traceback, and nothing already written lost.  Classes: encodings, image formats
and sizes, malformed records, run-directory misuse, non-finite numbers.  docs/failure_behaviour.md
is the table of what happens.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from PIL import Image

from vis_embed.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _training_fixtures import tiny_recipe, write_identity_dataset, write_schedule  # noqa: E402
from eval_fakes import make_identity_benchmark  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def world(tiny_checkpoint, tmp_path_factory) -> dict[str, Path]:
    """The tiny model, a NaN adapter, images of every kind, a training set and its schedule."""
    from vis_embed.model.network.embedding_model import EmbeddingModel

    root = tmp_path_factory.mktemp("probe")
    model = EmbeddingModel.from_pretrained(tiny_checkpoint(), device="cpu", dtype="float32")
    model.add_lora(r=2, alpha=4, dropout=0.0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.fill_(float("inf"))
    adapter = model.save_pretrained(root / "inf-adapter")
    images = root / "images"
    images.mkdir()
    Image.new("RGB", (32, 32), (200, 10, 10)).save(images / "ok.png")
    (images / "empty.png").write_bytes(b"")
    (images / "text.png").write_text("this is not an image")
    (images / "truncated.png").write_bytes((images / "ok.png").read_bytes()[:60])
    (images / "folder.png").mkdir()
    data = write_identity_dataset(root / "train", identities=8)
    schedule = write_schedule(data, root / "schedule.parquet", steps=4, batch=4)
    return {"root": root, "model": tiny_checkpoint(), "adapter": adapter, "images": images,
            "data": data, "schedule": schedule}


def _jsonl(path: Path, lines: list) -> Path:
    path.write_bytes(b"".join(x if isinstance(x, bytes)
                              else (x if isinstance(x, str) else json.dumps(x)).encode() + b"\n"
                              for x in lines))
    return path


# ---------------------------------------------------------------- encode: (lines, expected text in the error)
ENCODE_CASES = {
    "latin-1 byte": ([{"text": "a"}, b'{"text": "caf\xe9"}'], ":2", "not UTF-8"),
    "utf-16 file": (["\ufeff" + json.dumps({"text": "a"})], ":1", None),  # re-encoded below
    "json array line": ([{"text": "a"}, "[1, 2]"], ":2", "expected a JSON object"),
    "truncated json": (['{"text": "a"'], ":1", "malformed JSON"),
    "unknown key": ([{"img": "images/ok.png"}], ":1", "'img'"),
    "text not a string": ([{"text": 5}], ":1", "field 'text'"),
    "empty item": ([{"id": "x"}], ":1", "field 'image'"),
    "nan bbox": ([{"image": "images/ok.png", "bbox": [0, 0, float("nan"), 3]}], ":1", "field 'bbox'"),
    "bbox outside": ([{"image": "images/ok.png", "bbox": [0, 0, 99, 3]}], ":1", "field 'bbox'"),
    "empty image file": ([{"image": "images/empty.png"}], ":1", "empty.png"),
    "text file as png": ([{"image": "images/text.png"}], ":1", "text.png"),
    "truncated png": ([{"image": "images/truncated.png"}], ":1", "truncated.png"),
    "directory as image": ([{"image": "images/folder.png"}], ":1", "folder.png"),
    "missing image": ([{"image": "images/none.png"}], ":1", "none.png"),
    "image not a string": ([{"image": 7}], ":1", "field 'image'"),
}


@pytest.mark.parametrize("case", sorted(ENCODE_CASES))
def test_bad_encode_input_is_exit_2_naming_the_place(world, tmp_path, capsys, case) -> None:
    lines, where, what = ENCODE_CASES[case]
    shutil.copytree(world["images"], tmp_path / "images")
    items = _jsonl(tmp_path / "items.jsonl", lines)
    if case == "utf-16 file":
        items.write_bytes(items.read_text(encoding="utf-8").encode("utf-16"))
    output = tmp_path / "emb.npy"
    output.write_bytes(b"previous run")  # must survive a failed run
    code = main(["encode", "--model", str(world["model"]), "--input", str(items), "--output", str(output),
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert f"{items}{where}" in err and (what is None or what in err), err
    assert output.read_bytes() == b"previous run"
    # --on-error skip: the bad line is counted, the good one kept.
    _jsonl(items, [{"text": "good"}])
    if case != "utf-16 file":
        _jsonl(items, [{"text": "good"}, *lines])
        code = main(["encode", "--model", str(world["model"]), "--input", str(items), "--output", str(output),
                     "--no-progress", "--on-error", "skip"])
        assert code == 0 and "rejected line(s)" in capsys.readouterr().out


def test_non_finite_adapter_in_encode_and_eval(world, tmp_path, capsys) -> None:
    items = _jsonl(tmp_path / "items.jsonl", [{"text": "a"}])
    code = main(["encode", "--model", str(world["model"]), "--adapter", str(world["adapter"]), "--input",
                 str(items), "--output", str(tmp_path / "emb.npy"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and f"{items}:1" in err and str(world["adapter"]) in err and "Traceback" not in err

    make_identity_benchmark(tmp_path)
    manifest = tmp_path / "bench.yaml"
    manifest.write_text(yaml.safe_dump({"name": "probe", "datasets": [
        {"name": "Gal", "benchmark": "MVEB", "meta_task": "Re-ID", "split": "OOD", "layout": "gallery",
         "queries": "queries.jsonl", "gallery": "gallery.jsonl", "image_root": "images"}]}))
    code = main(["eval", "--model", str(world["model"]), "--adapter", str(world["adapter"]), "--benchmark",
                 str(manifest), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert "Gal" in err and str(world["adapter"]) in err, err


@pytest.mark.parametrize("bad", [b"name: caf\xe9\n", "\ufeffname: x\n".encode("utf-16")])
def test_eval_manifest_that_is_not_utf8(world, tmp_path, capsys, bad) -> None:
    manifest = tmp_path / "bench.yaml"
    manifest.write_bytes(bad)
    code = main(["eval", "--model", str(world["model"]), "--benchmark", str(manifest), "--out",
                 str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and str(manifest) in err and "Traceback" not in err, err


# ---------------------------------------------------------------- train
def _recipe(world, tmp_path: Path, **overrides) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(tiny_recipe(world["model"], world["data"], world["schedule"], tmp_path / "run",
                                               max_steps=1, **overrides)))
    return path


TRAIN_CASES: dict[str, tuple[Callable[[dict, Path], list[str]], str]] = {
    "lr inf": (lambda w, t: [str(_recipe(w, t)), "--set", "optimizer.lr=inf"], "optimizer.lr"),
    "lr nan": (lambda w, t: [str(_recipe(w, t)), "--set", "optimizer.lr=.nan"], "optimizer.lr"),
    "temperature -inf": (lambda w, t: [str(_recipe(w, t)), "--set", "temperature.init=-.inf"], "temperature.init"),
    "unknown recipe key": (lambda w, t: [str(_recipe(w, t)), "--set", "optimiser.lr=1"], "optimiser"),
    "recipe not utf-8": (lambda w, t: [str(_bytes(t / "r.yaml", b"model: caf\xe9\n"))], "r.yaml"),
    "recipe a list": (lambda w, t: [str(_bytes(t / "r.yaml", b"- 1\n- 2\n"))], "r.yaml"),
    "missing recipe": (lambda w, t: [str(t / "none.yaml")], "none.yaml"),
    "resume and overwrite": (lambda w, t: [str(_recipe(w, t)), "--resume", "--overwrite"], "exclude each other"),
    "data config not utf-8": (lambda w, t: [str(_recipe(w, t, data=str(_bytes(t / "d.yaml", b"datasets: caf\xe9\n"))))],
                              "d.yaml"),
}


def _bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("case", sorted(TRAIN_CASES))
def test_bad_train_input_is_exit_2_naming_the_key_or_file(world, tmp_path, capsys, case) -> None:
    build, named = TRAIN_CASES[case]
    code = main(["train", *build(world, tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and named in err and "Traceback" not in err, err


def test_training_rows_that_are_not_utf8_name_file_and_line(world, tmp_path, capsys) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(world["data"].parent, data_dir)
    rows = data_dir / "rec.jsonl"
    rows.write_bytes(rows.read_bytes().replace(b'"obj003"', b'"obj\xff03"', 1))
    code = main(["train", str(_recipe(world, tmp_path, data=str(data_dir / "train.yaml"))), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and f"{rows}:" in err and "not UTF-8" in err and "Traceback" not in err, err


def test_run_directory_misuse_keeps_the_finished_run(world, tmp_path, capsys) -> None:
    recipe = _recipe(world, tmp_path)
    assert main(["train", str(recipe), "--no-progress"]) == 0
    final = (tmp_path / "run" / "final" / "adapter_model.safetensors").read_bytes()
    capsys.readouterr()
    assert main(["train", str(recipe), "--no-progress"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["train", str(recipe), "--resume", "--set", "seed=9", "--no-progress"]) == 2
    assert "seed: 0 -> 9" in capsys.readouterr().err
    assert (tmp_path / "run" / "final" / "adapter_model.safetensors").read_bytes() == final
