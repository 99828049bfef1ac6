"""What the preparer hands transformers' processor is a cheaper form of the same input: the
processor's outputs are bit for bit those it gives for the PIL image itself."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from _prepare_fixtures import photo
from vis_embed.model.files.tiny import build_processor
from vis_embed.data.video import Clip
from vis_embed.model.inputs.preparer import channels_first, clip_channels_first

ARCHS = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"]
PROMPT = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Find the same object.<|im_end|>\n"
VIDEO_PROMPT = "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Find the same clip.<|im_end|>\n"
# Odd sides, a portrait, one that the processor enlarges, one it shrinks by ~2x (a fast decode's).
SIZES = [(37, 29), (300, 451), (1008, 756)]


@pytest.mark.parametrize("arch", ARCHS)
def test_the_processor_gives_the_same_outputs_for_the_planes_as_for_the_image(arch: str) -> None:
    processor = build_processor(arch)
    size = {"shortest_edge": 3136, "longest_edge": 200704}
    for number, (width, height) in enumerate(SIZES):
        image = photo(width, height, seed=number)
        planes = channels_first(image)
        assert isinstance(planes, torch.Tensor) and planes.shape == (3, height, width) and planes.is_contiguous()
        expected = processor(text=[PROMPT], images=[image], return_tensors="pt", images_kwargs={"size": size})
        given = processor(text=[PROMPT], images=[planes], return_tensors="pt", images_kwargs={"size": size})
        assert sorted(given) == sorted(expected)
        for name in expected:
            assert torch.equal(given[name], expected[name]), (arch, (width, height), name)


@pytest.mark.parametrize("mode", ["RGBA", "L", "P", "CMYK"])
def test_an_image_of_another_mode_is_left_to_the_processor_to_convert(mode: str) -> None:
    image = Image.new("RGB", (8, 6), (10, 200, 30)).convert(mode)
    assert channels_first(image) is image


@pytest.mark.parametrize("arch", ARCHS)
def test_the_video_processor_gives_the_same_outputs_for_the_stacked_planes_as_for_the_frames(arch: str) -> None:
    processor = build_processor(arch)
    frames = [photo(448, 448, seed=number) for number in range(4)]  # one grid size, as ClipGrid makes them
    clip = Clip(frames=frames, indices=list(range(4)))

    def process(video):
        return processor(text=[VIDEO_PROMPT], videos=[video], return_tensors="pt", videos_kwargs={
            "do_resize": False, "do_sample_frames": False, "cap_pixels_per_frame": False,
            "video_metadata": [clip.video_metadata()]})
    stacked = clip_channels_first(frames)
    assert isinstance(stacked, torch.Tensor) and stacked.shape == (4, 3, 448, 448)
    expected, given = process(frames), process(stacked)
    assert sorted(given) == sorted(expected)
    for name in expected:
        assert torch.equal(given[name], expected[name]), (arch, name)


def test_frames_of_another_mode_or_of_mixed_sizes_are_left_as_they_are() -> None:
    grey = [photo(32, 32).convert("L"), photo(32, 32).convert("L")]
    assert clip_channels_first(grey) is grey
    mixed = [photo(32, 32), photo(64, 32)]
    assert clip_channels_first(mixed) is mixed
