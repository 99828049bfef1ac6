"""The default attention ("varlen"): one attention call per vision block and decoder layer for
a whole batch, the same vectors and gradients as transformers' sdpa path, and a kernel choice
that never picks a flash-attn package that is not really there.

transformers' own sdpa path calls attention once per image in every vision block (once per
window in Qwen2.5-VL's windowed blocks); the counting test checks that the counter sees that,
so it would catch the old behaviour coming back.
"""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vis_embed import Embedder
from vis_embed.errors import ConfigError
from vis_embed.model.network import attention, packed_rows
from vis_embed.model.network.attention import VARLEN, count_attention_calls, resolve_attn_implementation, set_attention

ARCHS = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"]
INSTRUCTION = "Find the same object as the one in the given image."


def _image(height: int, width: int, seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8))


def _items() -> list[dict]:
    """Text-only and image items; images of different sizes (several Qwen2.5-VL windows each)."""
    return [{"text": "a red car"}, {"image": _image(224, 224, 0)},
            {"image": _image(84, 280, 1), "text": "the quick brown fox jumps over the lazy dog"},
            {"text": "which photo shows the same person?"}, {"image": _image(336, 168, 2)},
            {"image": _image(56, 56, 3), "text": "object"}]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=ARCHS)
def embedder(request: pytest.FixtureRequest, tiny_checkpoint: Callable[..., Path]) -> Embedder:
    """Ours, asked for by name: on a CPU the default is transformers' sdpa (by measurement)."""
    return Embedder.from_pretrained(tiny_checkpoint(request.param), device="cpu", attn_implementation=VARLEN)


def _batch(embedder: Embedder, padding_side: str = "right") -> dict[str, torch.Tensor]:
    model = embedder.model
    return model.collate(model.prepare(_items(), INSTRUCTION), padding_side=padding_side)


def _blocks_and_layers(embedder: Embedder) -> int:
    base = embedder.model.base_model()
    return len(base.visual.blocks) + len(base.language_model.layers)


def test_varlen_makes_one_attention_call_per_block_and_layer(embedder: Embedder) -> None:
    batch = _batch(embedder)
    assert embedder.model.current_config().attn_implementation == VARLEN
    with torch.no_grad():
        ours = count_attention_calls(lambda: embedder.model(**batch))
        set_attention(embedder.model.backbone, "sdpa")
        try:
            upstream = count_attention_calls(lambda: embedder.model(**batch))
        finally:
            set_attention(embedder.model.backbone, VARLEN)
    limit = _blocks_and_layers(embedder)
    assert 0 < ours <= limit
    assert upstream > limit  # the counter sees transformers' per-image (per-window) calls


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_vectors_equal_transformers_sdpa_path(embedder: Embedder, padding_side: str) -> None:
    batch = _batch(embedder, padding_side)
    with torch.no_grad():
        ours = embedder.model(**batch)
        set_attention(embedder.model.backbone, "sdpa")
        try:
            upstream = embedder.model(**batch)
        finally:
            set_attention(embedder.model.backbone, VARLEN)
    assert (ours * upstream).sum(-1).min().item() >= 0.99999


def test_gradients_equal_transformers_sdpa_path(tiny_checkpoint: Callable[..., Path]) -> None:
    embedder = Embedder.from_pretrained(tiny_checkpoint("qwen2.5-vl"), device="cpu", attn_implementation=VARLEN)
    model = embedder.model
    batch = _batch(embedder)
    weights = torch.randn(len(_items()), model.embedding_dim, generator=torch.Generator().manual_seed(0))
    gradients = {}
    for name in (VARLEN, "sdpa"):
        set_attention(model.backbone, name)
        model.backbone.zero_grad()
        (model(**batch) * weights).sum().backward()
        gradients[name] = [block.attn.qkv.weight.grad.clone() for block in model.base_model().visual.blocks]
    for ours, upstream in zip(gradients[VARLEN], gradients["sdpa"]):
        torch.testing.assert_close(ours, upstream, rtol=1e-4, atol=1e-6)


def _host_reads(arch: str, depth: int, name: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """``Tensor.tolist`` / ``.item`` calls (device-to-host syncs on a GPU) in one vision forward."""
    from vis_embed.model.network.embedding_model import EmbeddingModel
    from vis_embed.model.files.tiny import build_random_model

    backbone, processor = build_random_model(arch, vision_depth=depth)
    model = EmbeddingModel(backbone, processor)
    batch = model.collate(model.prepare([item for item in _items() if "image" in item]))
    set_attention(backbone, name)
    reads = []
    with monkeypatch.context() as patch:
        for method in ("tolist", "item"):
            original = getattr(torch.Tensor, method)
            patch.setattr(torch.Tensor, method, lambda self, *a, _f=original: reads.append(1) or _f(self, *a))
        with torch.no_grad():
            model.base_model().visual(batch["pixel_values"], grid_thw=batch["image_grid_thw"])
    return len(reads)


@pytest.mark.parametrize("arch", ARCHS)
def test_no_host_sync_per_vision_block(arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Boundaries (and Qwen2.5-VL's windows) are read once per forward, not once per block:
    twice the blocks, the same reads -- where transformers' sdpa path reads more."""
    assert _host_reads(arch, 4, VARLEN, monkeypatch) == _host_reads(arch, 2, VARLEN, monkeypatch)
    assert _host_reads(arch, 4, "sdpa", monkeypatch) > _host_reads(arch, 2, "sdpa", monkeypatch)


def test_sdpa_stays_selectable_and_is_recorded(tiny_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    embedder = Embedder.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu", attn_implementation="sdpa")
    assert embedder.model.current_config().attn_implementation == "sdpa"
    with torch.no_grad():
        batch = _batch(embedder)
        assert count_attention_calls(lambda: embedder.model(**batch)) > _blocks_and_layers(embedder)
    default = Embedder.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu", attn_implementation=VARLEN)
    default.model.backbone.save_pretrained(tmp_path)
    # The registered kernel's name stays out of a saved config: another install may not have it.
    assert attention.VISION_ATTENTION not in json.dumps(json.loads((tmp_path / "config.json").read_text()))


def test_default_is_sdpa_on_cpu_and_varlen_on_cuda_without_flash_attn_2(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per device, by measurement (docs/benchmarks.md): on a CPU transformers' per-image sdpa calls
    are never slower than one padded call; on CUDA one variable-length call per block."""
    from transformers.utils import import_utils

    assert resolve_attn_implementation(None, torch.device("cpu")) == "sdpa"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(import_utils, "is_flash_attn_2_available", lambda: False)
    assert resolve_attn_implementation(None, torch.device("cuda")) == VARLEN
    assert resolve_attn_implementation(VARLEN, torch.device("cpu")) == VARLEN  # asked for: given


def test_a_flash_attn_folder_without_flash_attn_2_is_not_flash_attention_2(monkeypatch: pytest.MonkeyPatch) -> None:
    """flash-attn-4 installs a ``flash_attn`` folder without ``__init__.py``: ``import
    flash_attn`` succeeds, but flash-attn 2 is absent.  The old probe (``import flash_attn``)
    picked flash_attention_2 there."""
    from transformers.utils import import_utils

    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))  # importable, namespace only
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(import_utils, "is_flash_attn_2_available", lambda: False)
    assert resolve_attn_implementation(None, torch.device("cuda")) == VARLEN
    with pytest.raises(ConfigError, match="flash_attention_2.*flash-attn"):
        resolve_attn_implementation("flash_attention_2", torch.device("cuda"))
    monkeypatch.setattr(import_utils, "is_flash_attn_2_available", lambda: True)
    assert resolve_attn_implementation(None, torch.device("cuda")) == "flash_attention_2"


def test_flash_attention_4_only_when_its_package_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers.utils import import_utils

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(import_utils, "is_flash_attn_4_available", lambda: False)
    with pytest.raises(ConfigError, match="flash-attn-4"):
        resolve_attn_implementation("flash_attention_4", torch.device("cuda"))
    monkeypatch.setattr(import_utils, "is_flash_attn_4_available", lambda: True)
    assert resolve_attn_implementation("flash_attention_4", torch.device("cuda")) == "flash_attention_4"


@pytest.mark.parametrize("lengths", [[5, 1, 0, 9, 3], [9, 8, 7], [4, 4, 4], [2, 7, 3, 3, 1, 7, 4]])
def test_padded_path_equals_per_segment_attention(lengths: list[int]) -> None:
    """The CPU path against attention computed segment by segment: segments sharing a row
    (block-diagonal mask), one segment per row (key mask), an empty segment, and segments of
    one length (the no-padding shortcut)."""
    generator = torch.Generator().manual_seed(0)
    cu = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int32)
    q, k, v = (torch.randn(1, 2, sum(lengths), 8, generator=generator) for _ in range(3))
    out, _ = attention.packed_attention(torch.nn.Module(), q, k, v, None, scaling=0.3, cu_seq_lens_q=cu,
                                        cu_seq_lens_k=cu, max_length_q=max(lengths), max_length_k=max(lengths))
    expected = torch.cat([torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, scale=0.3)
                          for qs, ks, vs in zip(*(t.split(lengths, dim=2) for t in (q, k, v)))], dim=2)
    torch.testing.assert_close(out, expected.transpose(1, 2), rtol=1e-5, atol=1e-6)


def test_row_plan_packs_short_segments_into_shared_rows_without_overlap() -> None:
    lengths = [64, 12, 12, 40, 8, 0, 64, 30]
    cu = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int32)
    plan = packed_rows.RowPlan.of(cu, 64, torch.device("cpu"))
    assert plan.rows == 4  # 64 | 64 | 40+12+12 | 30+8, where padding to the longest takes 7 rows
    slots = plan.slot.tolist()
    assert len(slots) == sum(lengths) == len(set(slots))  # every token has its own slot
    for start, length in zip(np.cumsum([0, *lengths[:-1]]), lengths):
        if length:  # a segment stays contiguous, in one row
            segment = slots[start:start + length]
            assert segment == list(range(segment[0], segment[0] + length))
            assert segment[0] // 64 == segment[-1] // 64
    assert plan.mask.shape == (4, 1, 64, 64)
    assert packed_rows.RowPlan.of(cu, 64, torch.device("cpu")) is plan  # once per batch, not per block
    cu[-1] += 0  # an in-place write: the tensor may now hold other boundaries
    assert packed_rows.RowPlan.of(cu, 64, torch.device("cpu")) is not plan
    with torch.inference_mode():  # Embedder.encode's mode: its tensors have no write counter
        inference_cu = cu.clone()
        assert packed_rows.RowPlan.of(inference_cu, 64, torch.device("cpu")).rows == 4


def test_a_call_without_segments_is_refused() -> None:
    q = torch.zeros(1, 2, 4, 8)
    with pytest.raises(ConfigError, match="vision towers only"):
        attention.packed_attention(torch.nn.Module(), q, q, q, torch.ones(1, 1, 4, 4, dtype=torch.bool))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's variable-length kernel runs on CUDA")
@pytest.mark.parametrize("arch", ARCHS)
def test_on_cuda_bf16_the_varlen_kernel_runs_and_equals_sdpa(arch: str, tiny_checkpoint: Callable[..., Path],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("torch's varlen kernel needs compute capability 8.0")
    embedder = Embedder.from_pretrained(tiny_checkpoint(arch), device="cuda", dtype="bfloat16")
    calls: list[int] = []
    varlen = attention._varlen
    monkeypatch.setattr(attention, "_varlen", lambda *args: calls.append(1) or varlen(*args))
    batch = {key: value.to("cuda") for key, value in _batch(embedder).items()}
    with torch.no_grad():
        ours = embedder.model(**batch)
        set_attention(embedder.model.backbone, "sdpa")
        upstream = embedder.model(**batch)
    assert len(calls) == len(embedder.model.base_model().visual.blocks)
    assert (ours * upstream).sum(-1).min().item() >= 0.9999


def test_flash_attention_4_is_activated_through_torch_only_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's activate_flash_attention_impl("FA4") is called once, on a Hopper/Blackwell card with
    the flash-attn-4 distribution installed; never without the package or on an older card."""
    from importlib import metadata

    import torch.nn.attention as torch_attention

    calls: list[str] = []
    monkeypatch.setattr(torch_attention, "activate_flash_attention_impl", calls.append)
    installed: set[str] = set()

    def distribution(name: str) -> object:
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return object()

    monkeypatch.setattr(metadata, "distribution", distribution)
    capability = [(9, 0)]
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability[0])
    for package, card, expected in (((), (9, 0), False), (("flash-attn-4",), (8, 0), False),
                                    (("flash-attn-4",), (9, 0), True)):
        monkeypatch.setattr(attention, "_FA4_CHECKED", [])
        installed.clear()
        installed.update(package)
        capability[0] = card
        assert attention.use_flash_attention_4(torch.device("cuda")) is expected
        assert attention.use_flash_attention_4(torch.device("cuda")) is expected  # once per process
    assert calls == ["FA4"]


def test_packed_operator_trains_through_torch_compile() -> None:
    """The opaque operator a compiled vision block calls has a backward: torch's own checks of a
    custom operator (its fake, its autograd registration against finite differences of the
    eager function) pass, so a compiled block that trains gets the gradients eager gets."""
    generator = torch.Generator().manual_seed(0)
    lengths = [5, 3, 7]
    cu = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int32)
    q, k, v = (torch.randn(sum(lengths), 2, 8, generator=generator, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    torch.library.opcheck(torch.ops.vis_embed.packed_attention, (q, k, v, cu, max(lengths), 0.3))
    torch.autograd.gradcheck(lambda *qkv: torch.ops.vis_embed.packed_attention(*qkv, cu, max(lengths), 0.3),
                             (q, k, v))


def test_packed_operator_backward_works_through_a_kernel_with_a_custom_operator_autograd(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA the operator's backward differentiates torch's varlen_attn, itself a custom
    operator whose autograd (``register_autograd``) functorch cannot transform.  A stand-in
    kernel built the same way (here: the padded path behind a custom operator) must give the
    gradients of the padded path itself."""
    @torch.library.custom_op("vis_embed_test::kernel_with_registered_autograd", mutates_args=())
    def kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, max_len: int,
               scaling: float) -> torch.Tensor:
        return packed_rows.padded_attention(q, k, v, cu, max_len, scaling).contiguous()

    def setup_context(ctx: object, inputs: tuple[object, ...], output: torch.Tensor) -> None:
        ctx.inputs = inputs  # type: ignore[attr-defined]

    def kernel_backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, cu, max_len, scaling = ctx.inputs  # type: ignore[attr-defined]
        with torch.enable_grad():
            qkv = [tensor.detach().requires_grad_() for tensor in (q, k, v)]
            grads = torch.autograd.grad(packed_rows.padded_attention(*qkv, cu, max_len, scaling), qkv, grad)
        return (*grads, None, None, None)

    kernel.register_autograd(kernel_backward, setup_context=setup_context)
    monkeypatch.setattr(attention, "_varlen_kernel_usable", lambda q: True)
    monkeypatch.setattr(attention, "_varlen", lambda *args: kernel(*args))
    generator = torch.Generator().manual_seed(0)
    lengths = [5, 3, 7]
    cu = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int32)
    q, k, v = (torch.randn(sum(lengths), 2, 8, generator=generator, dtype=torch.float64) for _ in range(3))
    grad = torch.randn(sum(lengths), 2, 8, generator=generator, dtype=torch.float64)
    got = torch.ops.vis_embed.packed_attention_backward(grad, q, k, v, cu, max(lengths), 0.3)
    qkv = [tensor.clone().requires_grad_() for tensor in (q, k, v)]
    expected = torch.autograd.grad(packed_rows.padded_attention(*qkv, cu, max(lengths), 0.3), qkv, grad)
    for name, got_grad, expected_grad in zip("qkv", got, expected, strict=True):
        torch.testing.assert_close(got_grad, expected_grad, msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's variable-length kernel runs on CUDA")
def test_on_cuda_the_packed_operator_backward_equals_the_varlen_kernels_own() -> None:
    """The backward a compiled, training vision block calls, on the real kernel (bf16): the
    gradients torch's varlen_attn gives in eager autograd."""
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("torch's varlen kernel needs compute capability 8.0")
    generator = torch.Generator(device="cuda").manual_seed(0)
    lengths = [64, 16, 100]
    cu = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int32, device="cuda")
    q, k, v, grad = (torch.randn(sum(lengths), 4, 80, generator=generator, device="cuda", dtype=torch.bfloat16)
                     for _ in range(4))
    got = torch.ops.vis_embed.packed_attention_backward(grad, q, k, v, cu, max(lengths), None)
    qkv = [tensor.clone().requires_grad_() for tensor in (q, k, v)]
    expected = torch.autograd.grad(attention._varlen(*qkv, cu, max(lengths), None), qkv, grad)
    for name, got_grad, expected_grad in zip("qkv", got, expected, strict=True):
        # the kernel's backward accumulates dq with atomics: bf16 sums in another order
        torch.testing.assert_close(got_grad, expected_grad, rtol=2e-2, atol=2e-2, msg=name)
