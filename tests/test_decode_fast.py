"""``decode="fast"`` (data/images.load_image, --decode): images above the pixel budget are decoded
at a reduced scale, never below twice the size the processor resizes to; exact stays the default."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vis_embed import Embedder
from vis_embed.data import images as images_module
from vis_embed.data.images import fast_decode_floor, load_image
from vis_embed.errors import ConfigError
from vis_embed.model.embedding_config import EmbeddingConfig
from vis_embed.model.network.embedding_model import EmbeddingModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _prepare_fixtures import photo  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BUDGET = 50176  # 64 visual tokens: a 1600x1200 photo is 38x the budget


def _target(size: tuple[int, int]) -> tuple[int, int]:
    """(width, height) the Qwen2-VL processor resizes ``size`` to (its own smart_resize, 28-px grid)."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    height, width = smart_resize(size[1], size[0], 28, 3136, BUDGET)
    return width, height


@pytest.mark.parametrize("suffix", ["jpg", "png"])  # JPEG: draft mode; others: PIL reduce
def test_fast_decode_stays_at_least_twice_the_processors_size(tmp_path, suffix) -> None:
    path = tmp_path / f"photo.{suffix}"
    photo(1600, 1200).save(path)
    exact = load_image(path)
    fast = load_image(path, max_pixels=BUDGET, decode="fast")
    assert exact.size == (1600, 1200) and fast.mode == "RGB"
    target = _target(exact.size)
    assert fast.width < exact.width
    assert fast.width >= 2 * target[0] and fast.height >= 2 * target[1]
    # The same picture: the exact image box-reduced to the fast size differs by little.
    reference = np.asarray(exact.resize(fast.size, Image.BOX), dtype=np.float32)
    assert np.abs(reference - np.asarray(fast, dtype=np.float32)).mean() < 6


def test_small_images_and_exact_mode_are_decoded_whole(tmp_path) -> None:
    path = tmp_path / "small.jpg"
    photo(300, 200).save(path)
    small = load_image(path, max_pixels=BUDGET, decode="fast")  # under 2x the target: untouched
    assert np.array_equal(np.asarray(small), np.asarray(load_image(path)))
    big = tmp_path / "big.jpg"
    photo(1600, 1200).save(big)
    assert load_image(big, max_pixels=BUDGET).size == (1600, 1200)  # "exact" is the default
    assert fast_decode_floor(300, 200, BUDGET) is None and fast_decode_floor(1600, 1200, None) is None
    with pytest.raises(ConfigError, match="decode"):  # the mode names: EmbeddingConfig's one check
        EmbeddingConfig().with_values(decode="approximate")


def test_a_huge_one_bit_png_never_becomes_full_size_rgb(tmp_path, monkeypatch) -> None:
    path = tmp_path / "scan.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 2, (3000, 4000), dtype=np.uint8) * 255).convert("1").save(path)
    converted: list[tuple[str, tuple[int, int]]] = []
    original = images_module.to_rgb

    def to_rgb(image):
        converted.append((image.mode, image.size))
        return original(image)

    monkeypatch.setattr(images_module, "to_rgb", to_rgb)
    fast = load_image(path, max_pixels=BUDGET, decode="fast")
    assert fast.mode == "RGB" and fast.width >= 2 * _target((4000, 3000))[0]
    assert converted and all(size[0] < 4000 for _mode, size in converted)


def test_fast_decode_keeps_the_exif_orientation(tmp_path) -> None:
    path = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees on display
    photo(1600, 1200).save(path, exif=exif)
    exact, fast = load_image(path), load_image(path, max_pixels=BUDGET, decode="fast")
    assert exact.size == (1200, 1600) and fast.height > fast.width
    reference = np.asarray(exact.resize(fast.size, Image.BOX), dtype=np.float32)
    assert np.abs(reference - np.asarray(fast, dtype=np.float32)).mean() < 6


def test_fast_vectors_are_close_to_exact_and_fingerprinted(tiny_checkpoint, tmp_path) -> None:
    items = []
    for number, size in enumerate([(1600, 1200), (1200, 1600), (1024, 768), (900, 600)]):
        for suffix in ("jpg", "png"):
            path = tmp_path / f"p{number}.{suffix}"
            photo(*size, seed=number).save(path)
            items.append({"image": str(path)})
    items.append({"image": str(tmp_path / "p0.jpg"), "bbox": [100, 100, 1500, 1100]})  # decoded whole
    checkpoint = tiny_checkpoint("qwen2-vl")
    exact = Embedder.from_pretrained(checkpoint, device="cpu", max_pixels=BUDGET)
    fast = Embedder.from_pretrained(checkpoint, device="cpu", max_pixels=BUDGET, decode="fast")
    cosine = np.sum(exact.encode(items) * fast.encode(items), axis=1)
    # Measured with the tiny random model on this mix: min 0.99993 (JPEG draft at 1/2 scale).
    assert cosine.min() > 0.9995
    assert cosine[-1] == pytest.approx(1.0, abs=1e-6)  # a bbox item is decoded exactly
    assert exact.fingerprint() != fast.fingerprint()


def test_an_unknown_decode_mode_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="decode"):
        EmbeddingModel.__new__(EmbeddingModel).__init__(None, None, decode="approximate")


def test_the_server_decodes_with_the_models_budget(tmp_path) -> None:
    import base64
    import io

    import asyncio
    import time

    from vis_embed.serving.budget import WorkBudget
    from vis_embed.serving.errors import RequestError
    from vis_embed.serving.images import ImagePolicy, decode_request_images

    buffer = io.BytesIO()
    photo(1600, 1200).save(buffer, format="JPEG")
    uri = "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()

    async def decoded(policy: ImagePolicy) -> list[dict]:
        budget = WorkBudget(10**9, lambda amount, total: RequestError(413, "too large"))
        async with budget.reservation() as reservation:
            return await decode_request_images([{"image": uri}], policy, reservation, time.monotonic() + 60)

    fast, = asyncio.run(decoded(ImagePolicy(max_pixels=BUDGET, decode="fast")))
    exact, = asyncio.run(decoded(ImagePolicy(max_pixels=BUDGET)))
    assert fast["image"].width < 1600 and exact["image"].size == (1600, 1200)


def test_the_processors_own_size_rule_allows_the_deeper_jpeg_scale(tiny_checkpoint, tmp_path) -> None:
    # 2016x1512 at 64 tokens: the processor makes it 252x168 (sides rounded DOWN to the 28-px
    # grid), so JPEG 1/4 (504x378) is still 2x that; the sqrt(max_pixels / area) bound alone
    # (518x388 x 2) allows only 1/2.  The 4032x3024 photo at 256 tokens is the same case.
    path = tmp_path / "big.jpg"
    photo(2016, 1512).save(path)
    preparer = EmbeddingModel.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu", max_pixels=BUDGET,
                                              decode="fast").preparer()
    assert preparer.target_size(2016, 1512) == _target((2016, 1512)) == (252, 168)
    assert fast_decode_floor(2016, 1512, BUDGET, preparer.target_size) == (504, 336)
    assert load_image(path, max_pixels=BUDGET, decode="fast").size == (1008, 756)  # bound only
    loaded = preparer.load_image({"image": str(path)})
    assert loaded.size == (504, 378)
    assert loaded.width >= 2 * 252 and loaded.height >= 2 * 168


def test_a_shape_the_processor_refuses_is_decoded_whole_and_reported_by_it() -> None:
    def refusing(width: int, height: int) -> tuple[int, int]:
        raise ValueError("absolute aspect ratio must be smaller than 200")

    assert fast_decode_floor(4000, 3000, BUDGET, refusing) is None
    assert fast_decode_floor(4000, 3000, BUDGET) is not None
