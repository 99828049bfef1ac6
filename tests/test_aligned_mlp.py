"""Aligned vision MLPs (model/network/aligned_mlp.py): the intermediate size padded with zeros to a
multiple of 128 and gate/up stacked in one matrix, for inference -- the same outputs, the same
saved weights and state dict, LoRA on the original linears."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vis_embed import Embedder
from vis_embed.model.network.aligned_mlp import AlignedMLP, align_mlps, alignment_for, padded_size, restore_mlps
from vis_embed.model.network.embedding_model import EmbeddingModel

ARCHS = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=-1).min())


def test_a_qwen25_sized_mlp_is_padded_and_stacked_exactly() -> None:
    """3420 (Qwen2.5-VL's size, not 16-byte aligned in bf16) -> 3456; gate and up in one matrix."""
    from transformers import Qwen2_5_VLVisionConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLMLP

    torch.manual_seed(0)
    config = Qwen2_5_VLVisionConfig(hidden_size=64, intermediate_size=3420)
    original = Qwen2_5_VLMLP(config, bias=True)
    x = torch.randn(37, 64)
    aligned = AlignedMLP(original, ("gate_proj", "up_proj"), "down_proj")
    assert aligned.padded == padded_size(3420) == 3456
    assert aligned.in_weight.shape == (2 * 3456, 64) and aligned.out_weight.shape == (64, 3456)
    assert not aligned.in_weight[3420:3456].any() and not aligned.out_weight[:, 3420:].any()  # zero padding
    with torch.no_grad():
        assert _cosine(aligned(x), original(x)) >= 0.99999
        torch.testing.assert_close(aligned(x), original(x), rtol=1e-5, atol=1e-6)
    restored = aligned.restored()
    assert type(restored) is Qwen2_5_VLMLP
    for name, tensor in original.state_dict().items():
        assert torch.equal(restored.state_dict()[name], tensor), name


@pytest.mark.parametrize("arch", ARCHS)
def test_aligned_model_has_same_vectors_state_dict_and_saved_weights(arch: str, tmp_path: Path,
                                                                    tiny_checkpoint: Callable[..., Path]) -> None:
    plain = EmbeddingModel.from_pretrained(tiny_checkpoint(arch), device="cpu", dtype="float32").eval()
    model = EmbeddingModel.from_pretrained(tiny_checkpoint(arch), device="cpu", dtype="float32").eval()
    base = model.base_model()
    align_mlps(base)  # padded as on CUDA (192 -> 256) and gate/up stacked
    mlps = [block.mlp for block in [*base.visual.blocks, *base.language_model.layers]]
    assert all(isinstance(mlp, AlignedMLP) and mlp.padded % 128 == 0 for mlp in mlps)
    assert any(mlp.padded > mlp.size for mlp in mlps)  # the tiny vision MLPs: 192 -> 256
    items = [{"text": "a red car"}, {"image": _photo(112, 168)}, {"image": _photo(56, 84), "text": "dog"}]
    with torch.no_grad():
        assert _cosine(model.embed(items), plain.embed(items)) >= 0.99999
    expected = plain.backbone.state_dict()
    state = model.backbone.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[key], expected[key]) for key in expected)  # original shapes and values
    model.backbone.load_state_dict(expected)  # the original layout loads into the aligned one
    saved = load_file(model.save_pretrained(tmp_path / "out") / "model.safetensors")
    original = load_file(tiny_checkpoint(arch) / "model.safetensors")
    assert saved.keys() == original.keys()
    assert all(torch.equal(saved[key], original[key]) for key in original)


def test_the_embedder_stacks_everywhere_and_pads_on_cuda_only(tiny_checkpoint: Callable[..., Path]) -> None:
    """On a CPU the padding is only extra work (measured): the Embedder stacks gate and up there
    and pads nothing; on CUDA it pads to 128 (alignment_for)."""
    assert alignment_for(torch.device("cuda")) == 128 and alignment_for(torch.device("cpu")) == 1
    base = Embedder.from_pretrained(tiny_checkpoint("qwen2.5-vl"), device="cpu", dtype="float32").model.base_model()
    mlps = [block.mlp for block in [*base.visual.blocks, *base.language_model.layers]]
    assert all(isinstance(mlp, AlignedMLP) and mlp.padded == mlp.size for mlp in mlps)


def test_lora_targets_the_original_linears(tiny_checkpoint: Callable[..., Path]) -> None:
    model = Embedder.from_pretrained(tiny_checkpoint("qwen2.5-vl"), device="cpu", dtype="float32").model
    model.add_lora(r=2, alpha=4, dropout=0.0, vision=True)
    names = {name for name, _ in model.backbone.named_modules()}
    assert any(name.endswith("visual.blocks.0.mlp.gate_proj.lora_A") for name in names)
    assert any(name.endswith("language_model.layers.0.mlp.up_proj.lora_A") for name in names)
    assert not any(isinstance(module, AlignedMLP) for module in model.backbone.modules())


def test_aligned_only_where_it_changes_something(tiny_checkpoint: Callable[..., Path]) -> None:
    """An ungated MLP already a multiple of the alignment is left alone (a gated one is stacked);
    restore is exact."""
    model = EmbeddingModel.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu", dtype="float32")
    base = model.base_model()
    blocks, layers = len(base.visual.blocks), len(base.language_model.layers)
    before = {key: value.clone() for key, value in base.state_dict().items()}
    # tiny Qwen2-VL: vision fc1/fc2 192 = 3 x 64 (left alone at 64); decoder gate/up (stacked)
    assert align_mlps(base, alignment=64) == layers
    assert not any(isinstance(block.mlp, AlignedMLP) for block in base.visual.blocks)
    assert restore_mlps(base) == layers
    assert align_mlps(base) == blocks + layers  # vision 192 -> 256
    assert restore_mlps(base) == blocks + layers
    after = base.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[key], before[key]) for key in before)


def _photo(height: int, width: int):
    import numpy as np
    from PIL import Image

    return Image.fromarray(np.random.default_rng(height).integers(0, 256, (height, width, 3), dtype=np.uint8))
