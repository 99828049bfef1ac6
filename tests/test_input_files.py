"""Input files from the wild (issue 26): a UTF-8 byte-order mark at the start of a JSONL, CSV
or YAML file is accepted, and a FIFO or device given as an image is a DataError naming the
file and line instead of a hang."""

from __future__ import annotations

import codecs
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vis_embed.data.images import image_size, load_image
from vis_embed.data.yaml_lines import load_yaml_with_lines
from vis_embed.errors import DataError
from vis_embed.evaluation.report import read_reference
from vis_embed.io import read_jsonl, read_text, read_text_lines_or_errors
from vis_embed.model.runtime import encode_file

BOM = codecs.BOM_UTF8


def test_a_bom_is_not_part_of_the_first_line_of_any_text_reader(tmp_path: Path) -> None:
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_bytes(BOM + b'{"text": "a"}\n{"text": "b"}\n')
    assert [row for _line, row in read_jsonl(jsonl)] == [{"text": "a"}, {"text": "b"}]
    assert next(read_text_lines_or_errors(jsonl)) == (1, '{"text": "a"}\n')
    assert read_text(jsonl).startswith('{"text"')
    # Only a leading BOM is an encoding mark; one inside the text is the text's.
    inner = tmp_path / "inner.txt"
    inner.write_bytes(b"a\n" + BOM + b"b\n")
    assert [line for _n, line in read_text_lines_or_errors(inner)][1] == "\ufeffb\n"


def test_a_yaml_file_with_a_bom_loads_with_its_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(BOM + b"name: x\ndatasets:\n  - a: 1\n")
    loaded = load_yaml_with_lines(path)
    assert loaded == {"name": "x", "datasets": [{"a": 1}]}
    assert loaded.key_lines["datasets"] == 2


@pytest.mark.parametrize("content, pattern", [
    (b"datasets:\n  - name: a\x00b\n", r"config.yaml:2: invalid YAML: character 0x00 is not allowed"),
    (b"name: x\npath: \"a\x1bb\"\n", r"config.yaml:2: invalid YAML: character 0x1b is not allowed"),
    (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", r"config.yaml: invalid YAML: nested too deeply"),
    (b"name: x\n? [a, b]\n: 1\n", r"config.yaml:2: a key must be a single value, not a list"),
])
def test_a_yaml_file_the_parser_rejects_is_a_data_error_naming_the_line(tmp_path: Path, content: bytes,
                                                                       pattern: str) -> None:
    """A control character (PyYAML's ReaderError carries no mark), nesting past the recursion
    limit and a list as a mapping key were tracebacks, not DataErrors."""
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    with pytest.raises(DataError, match=pattern):
        load_yaml_with_lines(path)


def test_an_image_path_with_a_nul_character_is_a_data_error(tmp_path: Path) -> None:
    """JSON's "\\u0000" in an image path passed the item check; os.stat's ValueError ("embedded
    null byte") then escaped load_image as a traceback, not a DataError naming the image."""
    from vis_embed.data.images import displayed_size

    for load in (load_image, displayed_size):
        with pytest.raises(DataError, match=r"a\\0b.png: image file name holds a NUL character"):
            load(str(tmp_path / "a\x00b.png"))
    from vis_embed.data.video import load_video

    with pytest.raises(DataError, match=r"a\\0b: video path holds a NUL character"):
        load_video(str(tmp_path / "a\x00b"))


def test_a_csv_table_with_a_bom_keeps_its_first_column_name(tmp_path: Path) -> None:
    path = tmp_path / "table.csv"
    path.write_bytes(BOM + b"model,score\nvisme,71.5\n")
    assert read_reference(path) == [{"model": "visme", "score": "71.5"}]


def test_an_items_file_starting_with_a_bom_encodes(tiny_checkpoint, tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_bytes(BOM + b'{"text": "first"}\n{"text": "second"}\n')
    written = encode_file.encode_jsonl(tiny_checkpoint(), items, tmp_path / "emb.npy", show_progress=False,
                                      device="cpu", dtype="float32")
    assert written.rows == 2 and written.rejects == 0
    embeddings, alignment = encode_file.read_encoded(tmp_path / "emb.npy")
    assert alignment.lines == [1, 2] and np.isfinite(embeddings).all()


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    path = tmp_path / "pipe.png"
    os.mkfifo(path)
    return path


def test_a_fifo_or_device_is_refused_before_it_is_opened(fifo: Path) -> None:
    with pytest.raises(DataError, match="FIFO") as info:
        load_image(fifo)  # an open() would block here forever: no writer ever comes
    assert info.value.path == str(fifo)
    assert image_size(fifo) is None  # the length estimate's header read does not block either
    if os.path.exists("/dev/zero"):
        with pytest.raises(DataError, match="device"):
            load_image("/dev/zero")


@pytest.mark.timeout(120)
def test_encode_with_a_fifo_image_exits_2_naming_file_and_line(tiny_checkpoint, fifo: Path, tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"image": fifo.name}) + "\n")
    command = [sys.executable, "-m", "vis_embed", "encode", "--model", str(tiny_checkpoint()), "--input", str(items),
               "--output", str(tmp_path / "emb.npy"), "--no-progress", "--device", "cpu", "--dtype", "float32"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2, done.stderr
    assert f"{items}:2" in done.stderr and "FIFO" in done.stderr
    assert not (tmp_path / "emb.npy").exists()
