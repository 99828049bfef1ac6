"""Embedder.compile: which modules are compiled, and that the vectors do not change.

Compiling is opt-in (``--compile``); it must leave every vector as eager computes it (up to
float rounding), and must not compile the vision attention, whose per-image loop would
recompile for every new number of images in a batch.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters
from PIL import Image

from vis_embed import Embedder
from vis_embed.errors import ConfigError
from vis_embed.model.network import compile_blocks as compile_module
from vis_embed.model.network.compile_blocks import VISION_BLOCK_PARTS, is_compiled

from _model_fixtures import perturbed_adapter

INSTRUCTION = "Find the same object as the one in the given image."


def _items() -> list[dict]:
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in [(56, 56), (84, 140)]]
    return [{"text": "a red car"}, {"image": images[0]}, {"image": images[1], "text": "the same dog"},
            {"text": "a longer description of a small blue bicycle by the river"}]


@pytest.mark.parametrize("arch", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"])
def test_compiles_decoder_layers_and_whole_vision_blocks(arch: str, tiny_checkpoint: Callable[..., Path]) -> None:
    """Under the default "varlen" attention a vision block is one call: compiled whole (the
    rotary embedding fused); under transformers' sdpa (a per-image loop) only norms and MLP."""
    embedder = Embedder.from_pretrained(tiny_checkpoint(arch), device="cpu", attn_implementation="varlen",
                                        compile=True)
    base = embedder.model.base_model()
    assert all(is_compiled(layer) for layer in base.language_model.layers)
    assert all(is_compiled(block) for block in base.visual.blocks)
    upstream = Embedder.from_pretrained(tiny_checkpoint(arch), device="cpu", attn_implementation="sdpa", compile=True)
    for block in upstream.model.base_model().visual.blocks:
        assert all(is_compiled(getattr(block, name)) for name in VISION_BLOCK_PARTS)
        assert not is_compiled(block.attn) and not is_compiled(block)


def test_compile_is_on_by_default_on_cuda_only(tiny_checkpoint: Callable[..., Path]) -> None:
    assert compile_module.resolve_compile(None, torch.device("cuda")) is True
    assert compile_module.resolve_compile(None, torch.device("cpu")) is False
    assert compile_module.resolve_compile(False, torch.device("cuda")) is False  # --no-compile
    assert compile_module.resolve_compile(True, torch.device("cpu")) is True
    embedder = Embedder.from_pretrained(tiny_checkpoint(), device="cpu")
    assert not any(is_compiled(layer) for layer in embedder.model.base_model().language_model.layers)


@pytest.mark.parametrize("arch", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"])
def test_blocks_trace_without_graph_breaks(arch: str, tiny_checkpoint: Callable[..., Path]) -> None:
    """A vision block (attention as one opaque operator) and a decoder layer are one graph each:
    no graph break (torch._dynamo.explain traces without compiling)."""
    embedder = Embedder.from_pretrained(tiny_checkpoint(arch), device="cpu", attn_implementation="varlen")
    base = embedder.model.base_model()
    captured: dict = {}
    blocks = (("vision", base.visual.blocks[-1]), ("decoder", base.language_model.layers[0]))

    def keep(name: str) -> Callable[..., None]:
        def hook(_module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
            captured.setdefault(name, (args, kwargs))  # the first batch's inputs; nothing replaced
        return hook

    hooks = [module.register_forward_pre_hook(keep(name), with_kwargs=True) for name, module in blocks]
    embedder.encode(_items(), instruction=INSTRUCTION, batch_size=4)
    for hook in hooks:
        hook.remove()
    torch._dynamo.reset()
    with torch.no_grad():
        for name, module in blocks:
            args, kwargs = captured[name]
            explained = torch._dynamo.explain(module)(*args, **kwargs)
            assert explained.graph_break_count == 0, (name, explained.break_reasons)
            assert explained.graph_count == 1, name


@pytest.mark.parametrize("arch", ["qwen2-vl", pytest.param("qwen2.5-vl", marks=pytest.mark.slow),
                                  pytest.param("qwen3-vl", marks=pytest.mark.slow)])
def test_compiled_vectors_equal_eager(arch: str, tiny_checkpoint: Callable[..., Path]) -> None:
    """Whole vision blocks (the attention an opaque operator, Qwen2.5-VL's two boundary tensors)
    and decoder layers compiled: the same vectors (~20-90 s of compilation on a 2-core CPU)."""
    eager = Embedder.from_pretrained(tiny_checkpoint(arch), device="cpu", attn_implementation="varlen")
    expected = eager.encode(_items(), instruction=INSTRUCTION, batch_size=2)
    torch._dynamo.reset()
    compiled = eager.compile()
    # Two batch shapes and a batch without padding (no attention mask): each graph variant runs.
    for batch_size in (2, 4, 1):
        got = compiled.encode(_items(), instruction=INSTRUCTION, batch_size=batch_size)
        np.testing.assert_allclose(got, expected, atol=1e-5)
    assert counters["stats"]["unique_graphs"] >= 2  # compiled graphs ran: not a silent eager fallback


def test_without_a_cpp_compiler_the_error_says_what_to_do(tiny_checkpoint: Callable[..., Path],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_module.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="C\\+\\+ compiler"):
        Embedder.from_pretrained(tiny_checkpoint(), device="cpu", compile=True)


def test_encode_and_eval_commands_pass_compile_on(tiny_checkpoint: Callable[..., Path], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from vis_embed.cli import main
    from vis_embed.evaluation import cli as eval_cli

    calls: list[bool] = []
    original = Embedder.from_pretrained.__func__

    def recording(cls, *args, **kwargs):  # noqa: ANN001, ANN202 - a spy with from_pretrained's signature
        calls.append(kwargs.get("compile", False))
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(Embedder, "from_pretrained", classmethod(recording))
    items = tmp_path / "items.jsonl"
    items.write_text('{"text": "a red car"}\n{"text": "a blue bicycle by the river"}\n')
    assert main(["encode", "--model", str(tiny_checkpoint()), "--input", str(items),
                 "--output", str(tmp_path / "emb.npy"), "--compile", "--no-progress"]) == 0
    assert calls == [True]
    parser = argparse.ArgumentParser()
    eval_cli.add_eval_arguments(parser)
    args = parser.parse_args(["--model", str(tiny_checkpoint()), "--benchmark", "b.yaml",
                              "--out", str(tmp_path / "eval"), "--compile"])
    eval_cli._load_encoder(args)
    assert calls == [True, True]


def test_compiles_through_an_unmerged_lora_adapter(tiny_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    perturbed_adapter(tiny_checkpoint(), tmp_path / "adapter")
    adapted = Embedder.from_pretrained(tiny_checkpoint(), adapter=tmp_path / "adapter", device="cpu")
    expected = adapted.encode(_items(), instruction=INSTRUCTION, batch_size=2)
    compiled = Embedder.from_pretrained(tiny_checkpoint(), adapter=tmp_path / "adapter", device="cpu", compile=True)
    assert hasattr(compiled.model.backbone, "peft_config")  # the LoRA layers are inside the compiled blocks
    np.testing.assert_allclose(compiled.encode(_items(), instruction=INSTRUCTION, batch_size=2), expected, atol=1e-5)


@pytest.mark.slow
def test_each_block_kind_is_compiled_once_and_reused() -> None:
    """Regional compilation: twice the vision blocks and decoder layers (Qwen2.5-VL: windowed and
    full blocks), the same number of graphs -- one per block kind, reused by every block."""
    from vis_embed.model.network.attention import VARLEN, set_attention
    from vis_embed.model.network.embedding_model import EmbeddingModel
    from vis_embed.model.files.tiny import build_random_model

    graphs = []
    for depth in (2, 4):
        torch._dynamo.reset()
        counters.clear()
        backbone, processor = build_random_model("qwen2.5-vl", num_layers=depth, vision_depth=depth)
        set_attention(backbone, VARLEN)
        model = EmbeddingModel(backbone, processor)
        compile_module.compile_blocks(model.base_model(), torch.device("cpu"))
        with torch.inference_mode():
            model.embed(_items()[:3], INSTRUCTION)  # a padded batch with images
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[0] == graphs[1] <= 3, graphs


def test_the_shared_block_code_may_hold_more_graphs_than_torchs_default() -> None:
    """Every decoder layer and vision block runs through ONE transformers function (so one Dynamo
    cache); a lent H200 filled 7 of its default 8 entries in one process, and past the limit
    Dynamo runs the blocks eagerly (one logged warning).  Compiling raises the limit, never lowers it."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    from vis_embed.model.files.tiny import build_random_model

    backbone, _ = build_random_model("qwen2-vl")
    base = backbone.model
    shared = {type(module).__call__ for module in [*base.language_model.layers, *base.visual.blocks]}
    assert shared == {GradientCheckpointingLayer.__call__}  # the reason: one code object for both kinds
    # Dynamo's own patch(), not monkeypatch: undoing a setattr on its config module deletes the key
    with torch._dynamo.config.patch(recompile_limit=8):
        compile_module.compile_blocks(base, torch.device("cpu"))
        assert torch._dynamo.config.recompile_limit >= 32
    with torch._dynamo.config.patch(recompile_limit=1000):
        compile_module.compile_blocks(base, torch.device("cpu"))
        assert torch._dynamo.config.recompile_limit == 1000


def test_training_through_compiled_blocks_gets_eager_gradients(tiny_checkpoint: Callable[..., Path]) -> None:
    """``model_options.compile``: the LoRA gradients of a compiled model (decoder layers and whole
    vision blocks, gradient checkpointing on) equal eager's -- the vision attention's operator
    has a backward, and checkpointing's recomputation runs through the compiled blocks.  LoRA
    dropout is 0: a compiled graph draws its dropout masks from another random stream."""
    from vis_embed.model.network.attention import VARLEN
    from vis_embed.model.network.embedding_model import EmbeddingModel

    def lora_gradients(compiled: bool) -> dict[str, torch.Tensor]:
        model = EmbeddingModel.from_pretrained(tiny_checkpoint(), device="cpu", attn_implementation=VARLEN)
        torch.manual_seed(0)
        model.add_lora(dropout=0.0, vision=True)  # the vision blocks train too: their attention's backward runs
        model.enable_gradient_checkpointing()
        model.train()
        if compiled:
            compile_module.compile_blocks(model.base_model(), torch.device("cpu"))
        batch = model.collate(model.prepare(_items(), INSTRUCTION))
        vectors = model(**batch)
        (vectors @ vectors.T / 0.05).logsumexp(dim=1).sum().backward()
        return {name: p.grad for name, p in model.named_parameters() if p.requires_grad and p.grad is not None}

    torch._dynamo.reset()
    counters.clear()
    eager, compiled = lora_gradients(False), lora_gradients(True)
    assert counters["stats"]["unique_graphs"] >= 2  # compiled graphs ran
    assert eager.keys() == compiled.keys() and any(g.abs().sum() > 0 for g in eager.values())
    for name, gradient in eager.items():
        torch.testing.assert_close(compiled[name], gradient, rtol=1e-4, atol=1e-6, msg=name)
