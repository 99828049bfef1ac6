"""Index directories read safely (gallery/index_files.py, faiss_headers.py): one whole build
while a writer replaces it, regular files only, sizes checked from headers before faiss or
numpy allocate, index.json a validated model, NaN and duplicates refused at load."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from vis_embed.errors import DataError
from vis_embed.gallery import store
from vis_embed.gallery.store import GalleryIndex, write_index
from vis_embed.vectors.transforms import l2_normalise

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[1]


def _encoded(tmp_path: Path, rows: int = 40, dim: int = 16, name: str = "emb", fingerprint: str | None = "fp-m",
             vectors: np.ndarray | None = None, prefix: str = "g") -> Path:
    vectors = l2_normalise(np.random.default_rng(0).standard_normal((rows, dim))) if vectors is None else vectors
    path = tmp_path / f"{name}.npy"
    np.save(path, vectors.astype(np.float32))
    model = {"name": "m", "adapter": None, "fingerprint": fingerprint}
    path.with_suffix(".ids.json").write_text(json.dumps({
        "lines": list(range(1, len(vectors) + 1)), "ids": [f"{prefix}{i}" for i in range(len(vectors))],
        "model": model}))
    return path


def _index(tmp_path: Path, kind: str = "binary", **encoded) -> Path:
    write_index(_encoded(tmp_path, **encoded), tmp_path / "idx", kind=kind)
    return tmp_path / "idx"


def _settings(directory: Path, **changes) -> None:
    settings = json.loads((directory / "index.json").read_text())
    (directory / "index.json").write_text(json.dumps({**settings, **changes}))


@pytest.mark.parametrize("kind", ["flat", "binary", "int8"])
def test_a_faiss_file_claiming_more_than_it_holds_is_refused_before_faiss_reads_it(tmp_path, kind,
                                                                                   monkeypatch) -> None:
    directory = _index(tmp_path, kind)
    path = directory / "index.faiss"
    data = bytearray(path.read_bytes())
    offset = {"flat": 37, "binary": 25, "int8": 65}[kind]  # the stored length of its data vector
    data[offset:offset + 8] = struct.pack("<Q", 2 ** 29)   # 2 GiB of floats / 512 MiB of codes
    path.write_bytes(bytes(data))
    called = []
    monkeypatch.setattr(store.faiss, "read_index", lambda *a: called.append(a))
    monkeypatch.setattr(store.faiss, "read_index_binary", lambda *a: called.append(a))
    with pytest.raises(DataError, match=r"index\.faiss: its [a-z ]+ claims \d+ bytes"):
        GalleryIndex.load(directory)
    assert called == []


@pytest.mark.parametrize("change, match", [
    (lambda d: (d / "index.faiss").write_bytes((d / "index.faiss").read_bytes()[:-7]), r"index\.faiss: its codes"),
    (lambda d: (d / "index.faiss").write_bytes(b"IxFI" + b"\0" * 3), r"index\.faiss: a b'IxFI' index"),
    (lambda d: _settings(d, dim=24), r"index\.faiss: the index is 40 x 16 bits, index\.json records 40 x 24"),
    (lambda d: _settings(d, rows=39), r"index\.faiss: the index is 40 x 16 bits"),
    (lambda d: _settings(d, dim="abc"), r"index\.json: field 'dim'"),
    (lambda d: _settings(d, rescore="4"), r"index\.json: field 'rescore'"),
    (lambda d: _settings(d, kind="hnsw"), r"index\.json: field 'kind'"),
    (lambda d: (d / "index.json").write_bytes(b"\xff\xfe{}"), r"index\.json: not UTF-8"),
    (lambda d: (d / "index.json").write_text("[" * 100_000 + "]" * 100_000), r"index\.json: JSON nested too deeply"),
    (lambda d: (d / "ids.json").write_text("[" * 100_000 + "]" * 100_000), r"ids\.json: field 'ids': unreadable"),
    (lambda d: (d / "ids.json").write_bytes(b'["\xff"]'), r"ids\.json: field 'ids': unreadable ids \(not UTF-8"),
    (lambda d: (d / "ids.json").write_text(json.dumps(["a"] * 39 + ["b"]).replace('"b"', "NaN")),
     r"ids\.json: field 'ids': unreadable ids \(.*holds NaN"),
    (lambda d: (d / "ids.json").write_text(json.dumps([f"g{i}" for i in range(39)] + ["g3"])),
     r"ids\.json: field 'ids': rows 3 and 39 share the id 'g3'"),
    (lambda d: (d / "ids.json").write_text(json.dumps(["x"] * 39)), r"ids\.json: field 'ids': 39 ids for"),
    (lambda d: np.save(d / "vectors.npy", np.zeros((39, 16), np.float32)), r"vectors\.npy: field 'vectors': holds"),
    (lambda d: np.save(d / "vectors.npy", np.zeros((40, 16), np.float64)), r"vectors\.npy: field 'vectors': holds"),
    (lambda d: (d / "vectors.npy").write_bytes((d / "vectors.npy").read_bytes()[:-4]), r"vectors\.npy: field"),
    (lambda d: np.save(d / "vectors.npy", np.full((40, 16), np.nan, np.float32)),
     r"vectors\.npy: field 'vectors': NaN"),
    (lambda d: (d / "vectors.npy").unlink(), r"vectors\.npy: field 'index': a damaged index \(no vectors\.npy\)"),
    (lambda d: (d / "index.json").unlink(), r"index\.json: field 'index': not an index directory"),
])
def test_a_damaged_index_is_one_data_error_naming_the_file(tmp_path, change, match) -> None:
    directory = _index(tmp_path)
    change(directory)
    with pytest.raises(DataError, match=match):
        GalleryIndex.load(directory)


def test_nan_vectors_in_a_flat_index_are_refused_at_load(tmp_path) -> None:
    directory = _index(tmp_path, "flat")
    data = bytearray((directory / "index.faiss").read_bytes())
    data[45:49] = struct.pack("<f", float("nan"))  # the first float of the first vector
    (directory / "index.faiss").write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"index\.faiss: field 'index': NaN"):
        GalleryIndex.load(directory)


@pytest.mark.parametrize("kind, offset, value, match", [
    ("flat", 33, 1, "its metric is faiss metric 1, 0 expected"),    # L2: distances read as scores
    ("int8", 33, 1, "its metric is faiss metric 1, 0 expected"),
    ("ivf-pq", 33, 1, "its metric is faiss metric 1, 0 expected"),
    ("binary", 21, 0, "its metric is faiss metric 0, 1 expected"),  # not what IndexBinaryFlat writes
    ("int8", 37, 1, "its quantizer is type 1"),                      # 4-bit codes in 16-byte slots
])
def test_a_foreign_metric_or_quantizer_type_is_refused(tmp_path, kind, offset, value, match) -> None:
    """Fields faiss trusts without a length: a file that is not an inner-product index of the
    kind's own quantizer is refused, not searched (an L2 flat file loaded and ranked by distance)."""
    directory = _index(tmp_path, kind, rows=300)
    data = bytearray((directory / "index.faiss").read_bytes())
    data[offset:offset + 4] = struct.pack("<i", value)
    (directory / "index.faiss").write_bytes(bytes(data))
    with pytest.raises(DataError, match=rf"index\.faiss: {match}"):
        GalleryIndex.load(directory)


@pytest.mark.parametrize("m", [2, 8])
def test_an_ivf_pq_file_whose_codes_do_not_fit_its_quantizer_is_refused(tmp_path, m) -> None:
    """The lists' code size must be ceil(M x nbits / 8): a file claiming another M loaded, and
    faiss read every code past its list's end (a heap over-read: garbage hits, or a crash)."""
    directory = _index(tmp_path, "ivf-pq", rows=300)
    settings = json.loads((directory / "index.json").read_text())
    data = bytearray((directory / "index.faiss").read_bytes())
    pq = data.find(struct.pack("<QQQ", 16, settings["pq_bytes"], settings["pq_bits"]))  # d, M, nbits
    assert pq > 0 and m != settings["pq_bytes"]
    data[pq + 8:pq + 16] = struct.pack("<Q", m)
    (directory / "index.faiss").write_bytes(bytes(data))
    with pytest.raises(DataError, match=rf"index\.faiss: its {m} x {settings['pq_bits']}-bit product-quantizer "
                                        rf"codes are \d+ bytes, \d+ expected"):
        GalleryIndex.load(directory)


def test_a_bom_in_index_json_is_read_like_every_other_json_file(tmp_path) -> None:
    directory = _index(tmp_path)
    (directory / "index.json").write_bytes(b"\xef\xbb\xbf" + (directory / "index.json").read_bytes())
    assert GalleryIndex.load(directory).ntotal == 40


@pytest.mark.parametrize("name", ["ids.json", "vectors.npy", "index.faiss"])
def test_a_fifo_a_device_or_a_link_is_not_a_regular_file(tmp_path, name) -> None:
    directory = _index(tmp_path)
    (directory / name).unlink()
    os.mkfifo(directory / name)
    started = time.monotonic()
    with pytest.raises(DataError, match=rf"{name}: is a FIFO \(named pipe\), not a regular file"):
        GalleryIndex.load(directory)
    assert time.monotonic() - started < 5  # refused, not waited on
    (directory / name).unlink()
    (directory / name).symlink_to("/dev/zero")
    with pytest.raises(DataError, match=rf"{name}: is a symbolic link, not a regular file"):
        GalleryIndex.load(directory)


def test_an_index_without_a_fingerprint_needs_allow_any_model(tmp_path) -> None:
    index = GalleryIndex.load(_index(tmp_path, fingerprint=None))
    with pytest.raises(DataError, match=r"index\.json: field 'model': the index records no model fingerprint"):
        index.check_queries("fp-m", 16)
    index.check_queries("fp-m", 16, allow_any_model=True)


WRITER = """
import sys, time
from pathlib import Path
from vis_embed.gallery.store import write_index
a, b, out, stop = map(Path, sys.argv[1:5])
while not stop.exists():
    write_index(a, out, kind="binary")
    write_index(b, out, kind="binary")
    Path(str(stop) + ".started").write_text("")  # after the first (slow: imports) builds
"""


def _race(tmp_path: Path, loads: int) -> tuple[int, int]:
    """(mixed builds, loads) of ``loads`` loads while a writer process rewrites the index in a loop
    with two builds told apart by their ids, vectors and recorded embeddings."""
    builds = {}
    for letter, column in (("A", 0), ("B", 1)):
        vectors = np.zeros((4, 8), np.float32)
        vectors[:, column] = 1
        builds[letter] = _encoded(tmp_path, vectors=vectors, name=letter, prefix=letter)
    out, stop = tmp_path / "idx", tmp_path / "stop"
    write_index(builds["A"], out, kind="binary")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(builds["A"]), str(builds["B"]), str(out), str(stop)],
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    mixed, seen = 0, set()
    try:
        while not Path(f"{stop}.started").exists():
            assert writer.poll() is None
            time.sleep(0.05)
        for _ in range(loads):
            index = GalleryIndex.load(out)
            by_ids = index.ids[0][0]
            by_record = Path(index.settings.embeddings).stem
            by_vectors = "AB"[int(np.argmax(index.searcher.vectors[0]))]
            by_codes = {128: "A", 64: "B"}.get(int(index.searcher.codes.reconstruct(0)[0]))  # the sign bits
            mixed += len({by_ids, by_record, by_vectors, by_codes}) != 1
            seen.add(by_ids)
    finally:
        stop.write_text("")
        writer.wait(60)
    assert seen == {"A", "B"}, "the loads saw one build only: no race was run"
    return mixed, loads


def test_ten_thousand_loads_racing_a_writer_never_mix_two_builds(tmp_path) -> None:
    """~14 s on a shared 2-core machine (a loader reading files by path mixed 7 in 1,000)."""
    assert _race(tmp_path, 10_000) == (0, 10_000)
