"""load_image: every PIL mode -> RGB, bombs refused, bad files named."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vis_embed.errors import DataError
from vis_embed.data import images
from vis_embed.data.image_guards import count_markers
from vis_embed.data.images import load_image


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "LA", "P", "L", "1", "CMYK", "YCbCr", "I;16", "I", "F"])
def test_any_mode_becomes_rgb(tmp_path: Path, mode: str) -> None:
    image = Image.new("RGB", (9, 7), (200, 100, 50)).convert(mode) if mode not in ("I;16", "I", "F") \
        else Image.new(mode, (9, 7), 1000)
    loaded = load_image(image)
    assert loaded.mode == "RGB" and loaded.size == (9, 7)
    path = tmp_path / "img.tiff"
    image.save(path)
    assert load_image(path).mode == "RGB"


def test_transparency_is_composited_on_white() -> None:
    clear = Image.new("RGBA", (4, 4), (0, 0, 0, 0))
    assert np.asarray(load_image(clear)).min() == 255
    palette = Image.new("P", (4, 4), 0)
    palette.putpalette([0, 0, 0] * 256)
    palette.info["transparency"] = 0
    assert np.asarray(load_image(palette)).min() == 255


def test_sixteen_bit_greyscale_is_scaled_not_clipped() -> None:
    values = np.array([[0, 32768, 65535]], dtype=np.uint16)
    image = Image.fromarray(values)
    assert image.mode == "I;16"
    grey = np.asarray(load_image(image))[0, :, 0].tolist()
    assert grey[0] == 0 and grey[2] == 255 and 120 <= grey[1] <= 135


def test_relative_paths_resolve_against_base_dir(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    Image.new("L", (5, 5), 7).save(tmp_path / "sub" / "a.png")
    assert load_image("sub/a.png", base_dir=tmp_path).size == (5, 5)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found") as info:
        load_image("nope.png", base_dir=tmp_path)
    assert info.value.path == str(tmp_path / "nope.png")


def test_corrupt_and_truncated_files_are_data_errors(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.jpg"
    garbage.write_bytes(b"this is not an image")
    with pytest.raises(DataError, match="cannot decode") as info:
        load_image(garbage)
    assert info.value.path == str(garbage)
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buffer, "PNG")
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    with pytest.raises(DataError, match="cannot decode"):
        load_image(truncated)


def test_decompression_bomb_is_refused_before_decoding(tmp_path: Path) -> None:
    # A 1-bit PNG above PIL's default pixel limit: small on disk, huge once decoded.
    bomb = tmp_path / "bomb.png"
    side = int((images.DEFAULT_MAX_IMAGE_PIXELS + 1) ** 0.5) + 1
    Image.new("1", (side, side), 0).save(bomb)
    with pytest.raises(DataError, match="decompression") as info:
        load_image(bomb)
    assert info.value.path == str(bomb)
    small = tmp_path / "small.png"
    Image.new("RGB", (20, 20)).save(small)
    with pytest.raises(DataError, match="decompression"):
        load_image(small, max_image_pixels=100)


def test_urls_are_fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (6, 3), (1, 2, 3)).save(buffer, "PNG")
    fetched: list[str] = []

    def fake_fetch(url: str, policy: object) -> bytes:
        fetched.append(url)
        return buffer.getvalue()

    monkeypatch.setattr(images, "fetch_url", fake_fetch)
    assert load_image("https://example.org/x.png", base_dir="/ignored").size == (6, 3)
    assert fetched == ["https://example.org/x.png"]


def test_encoded_bytes_load_like_the_file() -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (6, 3), (1, 2, 3)).save(buffer, "PNG")
    image = load_image(buffer.getvalue())
    assert image.size == (6, 3) and image.getpixel((0, 0)) == (1, 2, 3)
    with pytest.raises(DataError, match="cannot decode"):
        load_image(b"not an image")


def test_unreachable_url_is_a_data_error() -> None:
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/y.jpg"
    with pytest.raises(DataError, match="cannot fetch") as info:
        load_image(url)
    assert info.value.path == url


@pytest.mark.parametrize("seed", range(6))
def test_the_scan_count_agrees_with_a_plain_search_for_the_marker(seed: int) -> None:
    # count_markers must count exactly what bytes.count counts: 0xFF runs, markers at either
    # end, a 0xFF as the last byte, empty and one-byte inputs.
    rng = np.random.default_rng(seed)
    alphabet = np.array([0xFF, 0xDA, 0x00, 0x12], dtype=np.uint8)
    for length in (0, 1, 2, 3, 17, 4096):
        data = alphabet[rng.integers(0, 4, length)].tobytes()
        for candidate in (data, b"\xff\xda" + data, data + b"\xff\xda", data + b"\xff"):
            assert count_markers(candidate, b"\xff\xda") == candidate.count(b"\xff\xda")
