"""The Qwen-VL RMSNorms as torch's fused F.rms_norm (model/network/rms_norm.py): switched in every
EmbeddingModel, the same numbers, the same classes (subclasses) and state dict."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from PIL import Image

from vis_embed.model.network.embedding_model import EmbeddingModel
from vis_embed.model.network.rms_norm import RMS_NORM_CLASSES, use_fused_rms_norm

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("arch", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"])
def test_fused_norms_give_the_same_vectors(arch: str, tiny_checkpoint: Callable[..., Path]) -> None:
    model = EmbeddingModel.from_pretrained(tiny_checkpoint(arch), device="cpu", dtype="float32").eval()
    fused = [module for module in model.modules() if type(module).__name__.startswith("Fused")]
    assert fused and all(type(module).__bases__[0].__name__ in RMS_NORM_CLASSES for module in fused)
    items = [{"image": Image.new("RGB", (224, 112), (3, 50, 200)), "text": "x"}, {"text": "hello there"}]
    batch = model.collate(model.prepare(items))
    state = model.backbone.state_dict()
    with torch.no_grad():
        got = model(**batch)
        for module in fused:  # back to transformers' own class: the element-wise chain
            module.__class__ = type(module).__bases__[0]
        expected = model(**batch)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert model.backbone.state_dict().keys() == state.keys()
    assert use_fused_rms_norm(model.backbone) == len(fused)


def test_bf16_norm_matches_transformers() -> None:
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLRMSNorm

    norm = Qwen2_5_VLRMSNorm(96).bfloat16()
    torch.nn.init.normal_(norm.weight)
    x = torch.randn(33, 96).bfloat16() * 5
    expected = norm(x)
    assert use_fused_rms_norm(norm) == 1 and isinstance(norm, Qwen2_5_VLRMSNorm)
    assert torch.equal(norm(x), expected)
