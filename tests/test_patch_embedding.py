"""The patch embedding as a matrix product gives the convolution's numbers and keeps its state."""

from __future__ import annotations

import copy

import pytest
import torch
from PIL import Image

from vis_embed.model.network.embedding_model import EmbeddingModel
from vis_embed.model.network.patch_embedding import PatchwiseConv3d, use_matmul_patch_embedding


def _patch_conv(bias: bool) -> torch.nn.Conv3d:
    torch.manual_seed(0)
    return torch.nn.Conv3d(3, 32, kernel_size=(2, 14, 14), stride=(2, 14, 14), bias=bias)


@pytest.mark.parametrize("bias", [False, True])
def test_patchwise_equals_the_convolution_on_single_patches(bias: bool) -> None:
    conv = _patch_conv(bias)
    patchwise = copy.deepcopy(conv)
    assert use_matmul_patch_embedding(patchwise) == 1 and type(patchwise) is PatchwiseConv3d
    patches = torch.randn(37, 3, 2, 14, 14)
    torch.testing.assert_close(patchwise(patches), conv(patches), rtol=1e-5, atol=1e-5)
    assert patchwise.state_dict().keys() == conv.state_dict().keys()


def test_an_input_of_several_patches_takes_the_ordinary_convolution() -> None:
    conv = _patch_conv(True)
    patchwise = copy.deepcopy(conv)
    use_matmul_patch_embedding(patchwise)
    video = torch.randn(2, 3, 4, 28, 42)  # 2 x 2 x 3 patches per sample
    torch.testing.assert_close(patchwise(video), conv(video), rtol=1e-5, atol=1e-5)


def test_other_convolutions_are_left_alone() -> None:
    overlapping = torch.nn.Conv3d(3, 8, kernel_size=3, stride=1)
    padded = torch.nn.Conv3d(3, 8, kernel_size=2, stride=2, padding=1)
    assert use_matmul_patch_embedding(torch.nn.Sequential(overlapping, padded)) == 0
    assert type(overlapping) is torch.nn.Conv3d and type(padded) is torch.nn.Conv3d


@pytest.mark.parametrize("arch", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"])
def test_embedding_model_vectors_are_those_of_the_convolution(tiny_checkpoint, arch: str) -> None:
    model = EmbeddingModel.from_pretrained(tiny_checkpoint(arch), dtype="float32").eval()
    switched = [m for m in model.modules() if type(m) is PatchwiseConv3d]
    assert len(switched) == 1, "the vision patch embedding should be switched"
    image = Image.new("RGB", (90, 60), (200, 40, 10))
    items = [{"image": image, "text": None}, {"image": image, "text": "a red card"}]
    with torch.inference_mode():
        fast = model.embed(items)
        switched[0].__class__ = torch.nn.Conv3d  # back to oneDNN's convolution
        reference = model.embed(items)
    torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-5)
