"""`vis-embed encode`: JSONL in, .npy + row alignment out; bad rows raise or are rejected."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vis_embed import Embedder
from vis_embed.cli import main


@pytest.fixture()
def items_dir(tmp_path: Path) -> Path:
    (tmp_path / "images").mkdir()
    Image.new("RGBA", (80, 60), (10, 200, 30, 128)).save(tmp_path / "images" / "a.png")
    Image.new("RGB", (64, 64), (200, 0, 0)).save(tmp_path / "images" / "b.jpg")
    (tmp_path / "images" / "corrupt.jpg").write_bytes(b"not a jpeg at all")
    return tmp_path


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


GOOD = [{"id": "a", "image": "images/a.png", "text": "a green square"},
        {"id": "b", "text": "a red square"},
        {"id": "c", "image": "images/b.jpg"}]


def test_encode_writes_matrix_in_input_order(items_dir: Path, tiny_checkpoint: Callable[..., Path]) -> None:
    items = _write(items_dir / "items.jsonl", GOOD)
    output = items_dir / "out" / "emb.npy"
    code = main(["encode", "--model", str(tiny_checkpoint()), "--input", str(items),
                 "--output", str(output), "--instruction", "Represent it.", "--batch-size", "2",
                 "--no-progress"])
    assert code == 0
    matrix = np.load(output)
    expected = Embedder.from_pretrained(tiny_checkpoint(), device="cpu").encode(
        [{"image": items_dir / "images" / "a.png", "text": "a green square"},
         {"text": "a red square"}, {"image": items_dir / "images" / "b.jpg"}],
        instruction="Represent it.")
    assert matrix.dtype == np.float32
    np.testing.assert_allclose(matrix, expected, atol=1e-6)
    alignment = json.loads((items_dir / "out" / "emb.ids.json").read_text())
    assert alignment["lines"] == [1, 2, 3] and alignment["ids"] == ["a", "b", "c"]
    assert not (items_dir / "out" / "emb.rejects.jsonl").exists()


@pytest.mark.parametrize(("bad_row", "field", "message"), [
    ({"id": "x", "image": "images/missing.png"}, "image", "not found"),
    ({"id": "x", "image": "images/corrupt.jpg"}, "image", "cannot decode"),
    ({"id": "x"}, "image", "neither an image nor a text"),
    ({"id": "x", "text": 5}, "text", "must be a string"),
    ("{not json", None, "malformed JSON"),
])
def test_bad_row_error_names_line_and_field(items_dir: Path, tiny_checkpoint: Callable[..., Path],
                                            capsys: pytest.CaptureFixture[str],
                                            bad_row: object, field: str | None, message: str) -> None:
    items = _write(items_dir / "items.jsonl", [GOOD[0], bad_row, GOOD[1]])
    output = items_dir / "emb.npy"
    code = main(["encode", "--model", str(tiny_checkpoint()), "--input", str(items),
                 "--output", str(output), "--no-progress"])
    error = capsys.readouterr().err
    assert code == 2 and not output.exists()
    assert f"{items}:2" in error and message in error
    if field:
        assert f"field '{field}'" in error


def test_on_error_skip_writes_rejects_and_keeps_alignment(items_dir: Path,
                                                          tiny_checkpoint: Callable[..., Path]) -> None:
    rows = [GOOD[0], {"id": "m", "image": "images/missing.png"}, "{broken", "",
            GOOD[1], {"id": "n"}, {"id": "k", "image": "images/corrupt.jpg"}, GOOD[2]]
    items = _write(items_dir / "items.jsonl", rows)
    output = items_dir / "emb.npy"
    code = main(["encode", "--model", str(tiny_checkpoint()), "--input", str(items),
                 "--output", str(output), "--on-error", "skip", "--no-progress"])
    assert code == 0
    matrix = np.load(output)
    alignment = json.loads((items_dir / "emb.ids.json").read_text())
    assert alignment["lines"] == [1, 5, 8] and alignment["ids"] == ["a", "b", "c"]
    rejects = [json.loads(line) for line in (items_dir / "emb.rejects.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rejects] == [2, 3, 6, 7]
    assert [r["field"] for r in rejects] == ["image", None, "image", "image"]
    # Kept rows are exactly what encoding the good rows alone gives.
    clean = _write(items_dir / "clean.jsonl", GOOD)
    assert main(["encode", "--model", str(tiny_checkpoint()), "--input", str(clean),
                 "--output", str(items_dir / "clean.npy"), "--no-progress"]) == 0
    np.testing.assert_allclose(matrix, np.load(items_dir / "clean.npy"), atol=1e-6)


def test_unknown_model_path_is_a_clear_error(items_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = _write(items_dir / "items.jsonl", GOOD)
    code = main(["encode", "--model", str(items_dir / "no-model"), "--input", str(items),
                 "--output", str(items_dir / "e.npy"), "--no-progress"])
    assert code == 2 and "model path not found" in capsys.readouterr().err


def test_unknown_dtype_is_a_clear_error(items_dir: Path, tiny_checkpoint: Callable[..., Path], capsys) -> None:
    items = _write(items_dir / "items.jsonl", GOOD)
    # --dtype's choices come from EmbeddingConfig: argparse refuses the name before any loading.
    with pytest.raises(SystemExit) as exited:
        main(["encode", "--model", str(tiny_checkpoint()), "--input", str(items),
              "--output", str(items_dir / "emb.npy"), "--dtype", "float33", "--no-progress"])
    assert exited.value.code == 2
    assert "invalid choice: 'float33'" in capsys.readouterr().err
    assert not (items_dir / "emb.npy").exists()
