"""vectors/transforms.py: Matryoshka truncation and
sentence-transformers' quantization semantics; `vis-embed encode --dim/--precision/--ranges`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vis_embed.cli import main
from vis_embed.errors import DataError
from vis_embed.vectors.index_spec import bytes_per_vector
from vis_embed.vectors.transforms import calibration_ranges, check_dim, quantize, truncate


def _unit(rows: int, dim: int, seed: int = 0) -> np.ndarray:
    matrix = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_truncate_keeps_the_prefix_at_unit_length() -> None:
    vectors = _unit(5, 12)
    cut = truncate(vectors, 4)
    assert cut.shape == (5, 4)
    np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(cut * np.linalg.norm(vectors[:, :4], axis=1, keepdims=True), vectors[:, :4], atol=1e-6)
    assert truncate(vectors, None) is vectors or np.array_equal(truncate(vectors, None), vectors)


@pytest.mark.parametrize("dim", [0, 13, -1, 2.5, True])
def test_a_dim_outside_the_width_names_the_field(dim) -> None:
    with pytest.raises(DataError, match="field 'dim'"):
        check_dim(dim, 12)


def test_binary_is_packbits_of_the_signs() -> None:
    vectors = _unit(3, 20)
    ubinary = quantize(vectors, "ubinary")
    assert ubinary.dtype == np.uint8 and ubinary.shape == (3, 3)
    np.testing.assert_array_equal(ubinary, np.packbits(vectors > 0, axis=1))
    binary = quantize(vectors, "binary")
    assert binary.dtype == np.int8
    np.testing.assert_array_equal(binary.astype(np.int16) + 128, ubinary)
    signs = np.unpackbits((binary.astype(np.int16) + 128).astype(np.uint8), axis=1, count=20)
    np.testing.assert_array_equal(signs * 2.0 - 1, np.where(vectors > 0, 1.0, -1.0))


def test_uint8_and_int8_cut_each_dimensions_range_into_256_steps() -> None:
    vectors = _unit(50, 8)
    ranges = calibration_ranges(vectors)
    uint8 = quantize(vectors, "uint8", ranges)
    assert uint8.dtype == np.uint8
    assert (uint8.min(axis=0) == 0).all() and (uint8.max(axis=0) == 255).all()
    np.testing.assert_array_equal(quantize(vectors, "int8", ranges).astype(np.int16), uint8.astype(np.int16) - 128)
    steps = (ranges[1] - ranges[0]) / 255
    np.testing.assert_allclose(ranges[0] + uint8 * steps, vectors, atol=float(steps.max()) / 2 + 1e-6)


def test_values_outside_the_ranges_are_clipped_not_wrapped() -> None:
    ranges = np.array([[0.0, 0.0], [1.0, 1.0]], dtype=np.float32)
    assert quantize(np.array([[2.0, -1.0]]), "uint8", ranges).tolist() == [[255, 0]]


def test_bytes_per_vector() -> None:
    assert [bytes_per_vector(p, 1536) for p in ("float32", "float16", "int8", "uint8", "binary", "ubinary")] == \
        [6144, 3072, 1536, 1536, 192, 192]
    assert bytes_per_vector("binary", 12) == 2


def _items(tmp_path: Path) -> Path:
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "text": f"item number {i}"}) + "\n" for i in range(6)))
    return path


def test_encode_dim_and_int8_with_the_gallerys_ranges(tmp_path: Path, tiny_checkpoint) -> None:
    model, items = str(tiny_checkpoint()), _items(tmp_path)
    base = ["encode", "--model", model, "--input", str(items), "--no-progress"]
    assert main(base + ["--output", str(tmp_path / "full.npy")]) == 0
    assert main(base + ["--output", str(tmp_path / "g.npy"), "--dim", "8", "--precision", "int8"]) == 0
    full, stored = np.load(tmp_path / "full.npy"), np.load(tmp_path / "g.npy")
    ranges = np.load(tmp_path / "g.ranges.npy")
    np.testing.assert_array_equal(stored, quantize(truncate(full, 8), "int8", ranges))
    record = json.loads((tmp_path / "g.ids.json").read_text())
    assert record["dim"] == 8 and record["precision"] == "int8"
    # queries quantized with the gallery's ranges, which are saved beside them too
    assert main(base + ["--output", str(tmp_path / "q.npy"), "--dim", "8", "--precision", "int8",
                        "--ranges", str(tmp_path / "g.ranges.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "q.npy"), stored)
    np.testing.assert_array_equal(np.load(tmp_path / "q.ranges.npy"), ranges)
    assert main(base + ["--output", str(tmp_path / "b.npy"), "--precision", "ubinary"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), np.packbits(full > 0, axis=1))


@pytest.mark.parametrize("flags, message", [
    (["--dim", "100000"], "--dim"),
    (["--dim", "8", "--precision", "int8", "--ranges", "RANGES"], "field 'ranges'"),
    (["--precision", "binary", "--ranges", "RANGES"], "--ranges applies to"),
])
def test_bad_storage_flags_exit_2_naming_the_flag(tmp_path: Path, tiny_checkpoint, capsys, flags, message) -> None:
    wrong_width = tmp_path / "wrong.ranges.npy"
    np.save(wrong_width, np.zeros((2, 5), dtype=np.float32))
    flags = [str(wrong_width) if flag == "RANGES" else flag for flag in flags]
    code = main(["encode", "--model", str(tiny_checkpoint()), "--input", str(_items(tmp_path)), "--no-progress",
                 "--output", str(tmp_path / "e.npy"), *flags])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "e.npy").exists()


@pytest.mark.parametrize("flags", [["--dim", "0"], ["--precision", "int4"]])
def test_argparse_refuses_bad_values(tmp_path: Path, flags) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["encode", "--model", "m", "--input", "i.jsonl", "--output", "o.npy", *flags])
    assert exit_info.value.code == 2


def test_a_failed_int8_write_keeps_the_previous_matrix_and_its_ranges(tmp_path: Path, tiny_checkpoint,
                                                                      monkeypatch) -> None:
    import errno

    from vis_embed.model.runtime import encode_file

    model, items = str(tiny_checkpoint()), _items(tmp_path)
    args = ["encode", "--model", model, "--input", str(items), "--no-progress", "--output", str(tmp_path / "g.npy"),
            "--precision", "int8"]
    assert main(args) == 0
    matrix, ranges = np.load(tmp_path / "g.npy"), np.load(tmp_path / "g.ranges.npy")
    real_save, saved = np.save, []

    def disk_full_at_the_ranges(file, array, *rest, **kwargs):
        saved.append(array.shape)
        if len(saved) == 2:   # the matrix is written; the disk fills on the ranges
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(file, array, *rest, **kwargs)

    monkeypatch.setattr(encode_file.np, "save", disk_full_at_the_ranges)
    assert main(args + ["--dim", "8"]) == 2
    monkeypatch.undo()
    np.testing.assert_array_equal(np.load(tmp_path / "g.npy"), matrix)
    np.testing.assert_array_equal(np.load(tmp_path / "g.ranges.npy"), ranges)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
