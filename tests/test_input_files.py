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


def test_a_parquet_row_group_whose_rows_average_over_the_line_limit_is_refused_before_reading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A JSONL line over MAX_LINE_BYTES is refused; a Parquet row group whose metadata says its rows
    are larger on average is refused too, naming the rows, before any page is decompressed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from vis_embed.data import tables

    monkeypatch.setattr(tables, "MAX_LINE_BYTES", 4000, raising=False)
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "text": ["x" * 100, "y" * 100, "z" * 100]}), path,
                   row_group_size=2)
    assert [line for line, _row in tables.read_table(path)] == [1, 2, 3]
    pq.write_table(pa.table({"id": [str(k) for k in range(6)], "text": ["x" * 100] * 3 + ["y" * 9000] * 3}), path,
                   row_group_size=3, compression="zstd", use_dictionary=False)
    with pytest.raises(DataError, match=r"rows\.parquet: rows 4-6 \(row group 1\) hold [\d,]+ bytes each on "
                                        r"average, over the limit of one row \(4,000 bytes"):
        list(tables.read_table(path))


def _arrow_bytes_holding_the_first_row(path: Path) -> tuple[int, int]:
    """(bytes pyarrow holds, peak bytes Python allocated) while read_table has yielded its first row."""
    import tracemalloc

    import pyarrow as pa

    from vis_embed.data.tables import read_table

    before = pa.total_allocated_bytes()
    tracemalloc.start()
    try:
        rows = read_table(path)
        next(rows)
        held, peak = pa.total_allocated_bytes() - before, tracemalloc.get_traced_memory()[1]
        rows.close()
    finally:
        tracemalloc.stop()
    return held, peak


def test_a_parquet_file_is_read_in_bounded_pieces_not_whole_row_groups(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Hostile input gets bounded work: pyarrow's ParquetFile pre-buffers each row group's column
    chunks whole (an 8 MB one held to read row 1; 300 MB: 306 MiB), and 8,192 rows were decoded at
    once however large (a 15 kB zstd file of 300 rows of 1 MiB: 1 GB peak for its first row).  Pages are
    read through a bounded buffer, and a batch holds about PARQUET_BATCH_BYTES by the metadata's row size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from vis_embed.data import tables

    monkeypatch.setattr(tables, "PARQUET_BATCH_BYTES", 1 << 20, raising=False)
    letters = np.random.default_rng(0).integers(97, 123, size=8000 * 1000, dtype=np.uint8)
    offsets = np.arange(0, 8001 * 1000, 1000, dtype=np.int32)
    texts = pa.StringArray.from_buffers(8000, pa.py_buffer(offsets), pa.py_buffer(letters))
    wide = tmp_path / "wide.parquet"  # 8 MB in one row group, nothing to compress
    pq.write_table(pa.table({"text": texts}), wide, compression="NONE", use_dictionary=False)
    held, _peak = _arrow_bytes_holding_the_first_row(wide)
    assert held < 4 << 20, held
    bomb = tmp_path / "bomb.parquet"  # 200 rows of 100 kB in a few kB of zstd, one row a page
    pq.write_table(pa.table({"text": ["a" * 100_000] * 200}), bomb, compression="zstd", use_dictionary=False,
                   write_batch_size=1)
    assert bomb.stat().st_size < 100_000
    _held, peak = _arrow_bytes_holding_the_first_row(bomb)
    assert peak < 5 << 20, peak  # 200 rows decoded to Python at once were 20 MB
    assert [line for line, _row in tables.read_table(bomb)] == list(range(1, 201))
