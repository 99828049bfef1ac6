"""Reliability of encoding (issue 18): non-finite vectors, slivers and empty images, non-UTF-8
lines, over-long texts, and the output files as one set."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vis_embed import Embedder
from vis_embed.cli import main
from vis_embed.data.image_geometry import MAX_ASPECT_RATIO, fit_aspect_ratio
from vis_embed.data.images import load_image
from vis_embed.errors import DataError
from vis_embed.model.runtime import encode_file
from vis_embed.model.runtime.embedder import NonFiniteEmbeddingError
from vis_embed.model.network.embedding_model import EmbeddingModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _write(path: Path, rows: list) -> Path:
    path.write_bytes(b"".join(r if isinstance(r, bytes) else (json.dumps(r) + "\n").encode() for r in rows))
    return path


def _encode(model: Path, items: Path, output: Path, *extra: str) -> int:
    return main(["encode", "--model", str(model), "--input", str(items), "--output", str(output),
                 "--no-progress", *extra])


@pytest.fixture(scope="module")
def nan_adapter(tiny_checkpoint, tmp_path_factory) -> Path:
    """A LoRA adapter whose B matrices are NaN: every vector it gives is NaN (a diverged run)."""
    model = EmbeddingModel.from_pretrained(tiny_checkpoint(), device="cpu", dtype="float32")
    model.add_lora(r=2, alpha=4, dropout=0.0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.fill_(float("nan"))
    return model.save_pretrained(tmp_path_factory.mktemp("nan-adapter") / "adapter")


# ---------------------------------------------------------------- non-finite vectors
def test_non_finite_vectors_are_an_error_naming_adapter_and_line(tiny_checkpoint, nan_adapter, tmp_path,
                                                                 capsys) -> None:
    items = _write(tmp_path / "items.jsonl", [{"text": "a"}, {"text": "b"}])
    code = _encode(tiny_checkpoint(), items, tmp_path / "emb.npy", "--adapter", str(nan_adapter))
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"{items}:1" in err and f"adapter {nan_adapter}" in err and "NaN" in err
    assert not list(tmp_path.glob("emb*"))  # nothing written

    code = _encode(tiny_checkpoint(), items, tmp_path / "emb.npy", "--adapter", str(nan_adapter),
                   "--on-error", "skip")
    out = capsys.readouterr().out
    assert code == 0 and "2 rejected line(s)" in out
    rejects = [json.loads(line) for line in (tmp_path / "emb.rejects.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rejects] == [1, 2] and "NaN" in rejects[0]["reason"]
    assert np.load(tmp_path / "emb.npy").shape[0] == 0


def test_embedder_encode_names_model_adapter_and_item(tiny_checkpoint, nan_adapter) -> None:
    embedder = Embedder.from_pretrained(tiny_checkpoint(), adapter=nan_adapter, device="cpu")
    with pytest.raises(NonFiniteEmbeddingError, match=rf"items\[0\].*model .*adapter {nan_adapter}"):
        embedder.encode([{"text": "a"}, {"text": "b"}])


# ---------------------------------------------------------------- images
@pytest.mark.parametrize("size", [(4000, 2), (2, 4000), (401, 2)])
def test_fit_aspect_ratio_pads_slivers_to_the_processor_limit(size) -> None:
    image = Image.new("RGB", size, (255, 0, 0))
    fitted = fit_aspect_ratio(image)
    long, short = max(fitted.size), min(fitted.size)
    assert long == max(size) and long <= MAX_ASPECT_RATIO * short < long + MAX_ASPECT_RATIO
    assert np.asarray(fitted).reshape(-1, 3).max(axis=0).tolist() == [255, 0, 0]  # content kept
    assert fit_aspect_ratio(Image.new("RGB", (400, 2))).size == (400, 2)  # at the limit: unchanged


def test_slivers_encode_beside_the_other_items(tiny_checkpoint, tmp_path) -> None:
    Image.new("RGB", (4000, 2), (0, 0, 255)).save(tmp_path / "wide.png")
    Image.new("RGB", (2, 4000), (0, 0, 255)).save(tmp_path / "tall.png")
    Image.new("RGB", (300, 300), (0, 255, 0)).save(tmp_path / "square.png")
    rows = [{"id": "w", "image": "wide.png"}, {"id": "s", "text": "a square"}, {"id": "t", "image": "tall.png"},
            {"id": "c", "image": "square.png", "bbox": [0, 0, 300, 1]}]  # a box can make a sliver too
    items = _write(tmp_path / "items.jsonl", rows)
    for mode in ("raise", "skip"):
        assert _encode(tiny_checkpoint(), items, tmp_path / f"{mode}.npy", "--on-error", mode) == 0
        matrix = np.load(tmp_path / f"{mode}.npy")
        assert matrix.shape[0] == 4 and np.isfinite(matrix).all()


def test_an_image_without_pixels_is_a_data_error(tiny_checkpoint) -> None:
    for size in ((0, 0), (5, 0)):
        with pytest.raises(DataError, match=r"field 'image'.*no pixels"):
            load_image(Image.new("RGB", size))
    embedder = Embedder.from_pretrained(tiny_checkpoint(), device="cpu")
    with pytest.raises(DataError, match="no pixels"):
        embedder.encode([{"text": "fine"}, {"image": Image.new("RGB", (0, 0))}])


# ---------------------------------------------------------------- input bytes
def test_lines_that_are_not_utf8_are_skipped_and_counted(tiny_checkpoint, tmp_path, capsys) -> None:
    items = _write(tmp_path / "items.jsonl", [{"text": "a"}, b'{"text": "caf\xe9"}\n', {"text": "b"}])
    assert _encode(tiny_checkpoint(), items, tmp_path / "emb.npy") == 2
    assert f"{items}:2" in capsys.readouterr().err
    assert _encode(tiny_checkpoint(), items, tmp_path / "emb.npy", "--on-error", "skip") == 0
    assert "1 rejected line(s)" in capsys.readouterr().out
    assert json.loads((tmp_path / "emb.ids.json").read_text())["lines"] == [1, 3]
    reject = json.loads((tmp_path / "emb.rejects.jsonl").read_text())
    assert reject["line"] == 2 and "not UTF-8" in reject["reason"]


# ---------------------------------------------------------------- texts over the token limit
def test_texts_over_the_token_limit_are_cut_and_counted_without_a_transformers_warning(
        tiny_checkpoint, tmp_path, monkeypatch, capsys, caplog) -> None:
    embedder = Embedder.from_pretrained(tiny_checkpoint(), device="cpu")
    tokenizer = embedder.model.processor.tokenizer
    assert embedder.model.token_limit == min(tokenizer.model_max_length, 32768)  # the model's own maximum
    monkeypatch.setattr(tokenizer, "model_max_length", 40)
    long_text = " ".join(["word"] * 200)
    with caplog.at_level(logging.WARNING):
        vectors = embedder.encode([{"text": long_text}, {"text": "short"}])
    assert np.isfinite(vectors).all() and embedder.model.truncated_items == 1
    assert "longer than the specified maximum" not in caplog.text + capsys.readouterr().err
    assert embedder.model.prepare_one({"text": long_text}).length <= 40

    monkeypatch.setattr(EmbeddingModel, "token_limit", property(lambda self: 40))
    items = _write(tmp_path / "items.jsonl", [{"text": long_text}, {"text": "short"}])
    assert _encode(tiny_checkpoint(), items, tmp_path / "emb.npy") == 0
    assert "1 item(s) had their text cut" in capsys.readouterr().out

    Image.new("RGB", (640, 640)).save(tmp_path / "big.png")  # more visual tokens than the limit
    with pytest.raises(DataError, match=r"field 'image'.*without its text.*limit of 40"):
        embedder.encode([{"image": tmp_path / "big.png", "text": "x"}])


# ---------------------------------------------------------------- the output set
def test_stale_rejects_are_removed_and_a_half_written_set_is_refused(tiny_checkpoint, tmp_path,
                                                                     monkeypatch) -> None:
    items = _write(tmp_path / "items.jsonl", [{"text": "a"}, {"img": "x.png"}, {"text": "b"}])
    output = tmp_path / "emb.npy"
    assert _encode(tiny_checkpoint(), items, output, "--on-error", "skip") == 0
    assert (tmp_path / "emb.rejects.jsonl").is_file()
    good = _write(tmp_path / "good.jsonl", [{"text": "a"}, {"text": "b"}, {"text": "c"}])
    assert _encode(tiny_checkpoint(), good, output) == 0
    assert not (tmp_path / "emb.rejects.jsonl").exists()  # it described the previous output
    embeddings, alignment = encode_file.read_encoded(output)
    assert embeddings.shape[0] == 3 and alignment.lines == [1, 2, 3]

    def killed(*_args, **_kwargs):  # the process dies while writing the new set
        raise KeyboardInterrupt

    monkeypatch.setattr(encode_file.np, "save", killed)
    assert _encode(tiny_checkpoint(), _write(tmp_path / "two.jsonl", [{"text": "x"}, {"text": "y"}]), output) == 130
    monkeypatch.undo()
    assert encode_file.read_encoded(output)[0].shape[0] == 3  # the previous set, untouched
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".")) == []  # no temporaries
    (tmp_path / "emb.ids.json").unlink()  # as a run killed mid-swap leaves it
    with pytest.raises(DataError, match="did not finish"):
        encode_file.read_encoded(output)
    (tmp_path / "emb.ids.json").write_text(json.dumps({"lines": [1], "ids": [None]}))
    with pytest.raises(DataError, match="different runs"):
        encode_file.read_encoded(output)


def test_a_full_disk_keeps_the_previous_set_loadable_and_exits_2(tiny_checkpoint, tmp_path, monkeypatch,
                                                                 capsys) -> None:
    import errno

    output = tmp_path / "emb.npy"
    assert _encode(tiny_checkpoint(), _write(tmp_path / "a.jsonl", [{"text": "a"}, {"text": "b"}]), output) == 0
    before, alignment = encode_file.read_encoded(output)
    real_save = np.save

    def disk_full(file, array, *args, **kwargs):  # writes part of the matrix, then the disk is full
        real_save(file, array[:1], *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(encode_file.np, "save", disk_full)
    capsys.readouterr()
    code = _encode(tiny_checkpoint(), _write(tmp_path / "b.jsonl", [{"text": "c"}] * 3), output)
    err = capsys.readouterr().err
    assert code == 2
    assert "\nerror: " in "\n" + err.replace("\r", "\n") and "No space left on device" in err
    assert "Traceback" not in err
    after, alignment_after = encode_file.read_encoded(output)
    np.testing.assert_array_equal(after, before)
    assert alignment_after == alignment


def test_the_ids_sidecar_is_written_and_read_through_one_model_with_its_keys_unchanged(tmp_path) -> None:
    """``emb.ids.json`` (EncodedAlignment): written with the keys it always had, in their order
    (``model`` only when given, ``ranges`` only for int8/uint8); an older file without the later
    keys loads, a newer writer's unknown key is kept, a wrong type names the file."""
    output, source = tmp_path / "emb.npy", tmp_path / "items.jsonl"
    embeddings = np.eye(3, 4, dtype=np.float32)
    items, ids, lines = [{"text": t} for t in "abc"], ["a", None, 7], [1, 3, 4]
    model = {"name": "m", "adapter": None, "fingerprint": "fp"}
    encode_file._write_outputs((embeddings, [0, 1, 2], {}), items, ids, lines, [], source, output, "raise",
                               embedding_config={"prompt_format": "chat"}, model=model)
    written = json.loads((tmp_path / "emb.ids.json").read_text())
    assert list(written) == ["input", "lines", "ids", "embedding_config", "dim", "precision", "model"]
    assert written == {"input": str(source), "lines": lines, "ids": ids, "embedding_config": {"prompt_format": "chat"},
                       "dim": 4, "precision": "float32", "model": model}
    _, alignment = encode_file.read_encoded(output)
    assert isinstance(alignment, encode_file.EncodedAlignment)
    assert (alignment.lines, alignment.ids, alignment.model.as_json(), alignment.dim) == (lines, ids, model, 4)
    assert alignment.as_json() == written  # read back: the same record

    (tmp_path / "emb.ids.json").write_text(json.dumps({"lines": lines, "ids": ids, "added_later": 1}))
    _, older = encode_file.read_encoded(output)  # an older file (no model, no stored form) and a newer key
    assert older.model is None and older.embedding_config is None and older.model_extra == {"added_later": 1}
    (tmp_path / "emb.ids.json").write_text(json.dumps({"lines": lines, "ids": "abc"}))
    with pytest.raises(DataError, match=r"emb\.ids\.json.*ids"):
        encode_file.read_encoded(output)
