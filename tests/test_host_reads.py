"""No host reads in the forward: the batch's bookkeeping (vision boundaries and rotary positions,
Qwen2.5-VL's windows, Qwen3-VL's position-grid resampling, ``max_seqlen``, the decoder's M-RoPE
index, the padding mask, the pooled token) is computed when the batch is collated
(model/network/vision_metadata.py), so one ``EmbeddingModel`` forward reads at most 2 values back from the
device (on a GPU each read stalls its queue) -- with the same vectors and gradients as
transformers' own bookkeeping.  The counter is checked to see transformers' reads (~30 a batch).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vis_embed.model.network.attention import VARLEN
from vis_embed.model.network.embedding_model import EmbeddingModel
from vis_embed.model.network.vision_metadata import METADATA_KEY

ARCHS = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"]
# Tensor methods that copy a value from the device to the host (each a sync on a GPU).
HOST_READS = frozenset({"tolist", "item", "__bool__", "__index__", "__int__", "__float__"})
MAX_READS = 2

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _CountHostReads(torch.overrides.TorchFunctionMode):
    """Counts :data:`HOST_READS` calls on tensors while active (Python-level calls: transformers'
    and ours; the mode is off inside torch's own implementation of an op)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if getattr(func, "__name__", "") in HOST_READS:
            self.calls.append(func.__name__)
        return func(*args, **(kwargs or {}))


def _image(height: int, width: int, seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8))


def _items() -> list[dict]:
    """Mixed sizes (several Qwen2.5-VL windows, edge windows), text-only rows, different lengths."""
    return [{"image": _image(448, 448, 0), "text": "a photo"}, {"text": "only text, a little longer than most"},
            {"image": _image(224, 336, 1)}, {"image": _image(112, 112, 2), "text": "small"},
            {"image": _image(336, 196, 3), "text": "object"}]


@pytest.fixture(scope="module", params=ARCHS)
def model(request: pytest.FixtureRequest, tiny_checkpoint: Callable[..., Path]) -> EmbeddingModel:
    # The GPU's default attention ("varlen": one call per vision block), asked for by name on this CPU.
    return EmbeddingModel.from_pretrained(tiny_checkpoint(request.param), device="cpu", dtype="float32",
                                          attn_implementation=VARLEN).eval()


def _forward(model: EmbeddingModel, batch: dict) -> tuple[torch.Tensor, list[str]]:
    counter = _CountHostReads()
    with torch.no_grad(), counter:
        vectors = model(**batch)
    return vectors, counter.calls


def _plain(batch: dict) -> dict:
    return {key: value for key, value in batch.items() if key != METADATA_KEY}


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_forward_reads_at_most_two_values_back(model: EmbeddingModel, padding_side: str) -> None:
    batch = model.collate(model.prepare(_items()), padding_side=padding_side)
    assert (batch["attention_mask"] == 0).any()  # really padded: the decoder mask is needed
    vectors, reads = _forward(model, batch)
    assert len(reads) <= MAX_READS, reads
    plain, plain_reads = _forward(model, _plain(batch))
    assert len(plain_reads) > 10  # the counter sees transformers' own bookkeeping reads
    assert float((vectors * plain).sum(-1).min()) >= 0.99999
    torch.testing.assert_close(vectors, plain, rtol=0, atol=1e-6)


def test_text_only_and_unpadded_batches_read_nothing(model: EmbeddingModel) -> None:
    texts = model.collate(model.prepare([{"text": "one"}, {"text": "two words"}]))
    vectors, reads = _forward(model, texts)
    assert reads == []
    torch.testing.assert_close(vectors, _forward(model, _plain(texts))[0], rtol=0, atol=1e-6)
    same_size = model.collate(model.prepare([{"image": _image(224, 224, 5)}, {"image": _image(224, 224, 6)}]))
    assert bool(same_size["attention_mask"].all())
    vectors, reads = _forward(model, same_size)
    assert len(reads) <= 1  # transformers' check that the visual tokens match the features
    torch.testing.assert_close(vectors, _forward(model, _plain(same_size))[0], rtol=0, atol=1e-6)


def test_gradients_equal_transformers_bookkeeping(model: EmbeddingModel) -> None:
    """Training runs the same forward: the vision tower's and decoder's gradients agree."""
    batch = model.collate(model.prepare(_items()[:4]), padding_side="left")
    base = model.base_model()
    weights = [base.visual.blocks[0].attn.qkv.weight, base.language_model.layers[0].self_attn.q_proj.weight]
    grads = []
    for inputs in (batch, _plain(batch)):
        model.zero_grad()
        model(**inputs).square().sum().backward()
        grads.append([weight.grad.clone() for weight in weights])
    model.zero_grad()
    for ours, upstream in zip(*grads):
        torch.testing.assert_close(ours, upstream, rtol=1e-5, atol=1e-7)


def test_video_grids_get_the_same_bookkeeping(model: EmbeddingModel) -> None:
    """Generic over modalities: a batch of videos (``video_grid_thw``, ``pixel_values_videos``, and
    Qwen2.5-VL's ``second_per_grid_ts``, as the processor makes it) gets its metadata the same way,
    and the vectors equal transformers' own forward of that batch."""
    from vis_embed.model.network.pooling import last_token_pool
    from vis_embed.model.network.vision_metadata import describe_batch

    rng = np.random.default_rng(0)
    videos = [rng.integers(0, 256, shape, dtype=np.uint8) for shape in ((4, 56, 84, 3), (2, 84, 56, 3))]
    texts = ["<|vision_start|><|video_pad|><|vision_end|>a clip",
             "<|vision_start|><|video_pad|><|vision_end|>another clip, with a longer text"]
    processed = model.processor(text=texts, videos=videos, padding=True, return_tensors="pt",
                                videos_kwargs={"fps": 2.0})
    batch = {key: value for key, value in processed.items() if isinstance(value, torch.Tensor)}
    with torch.no_grad():
        hidden = model.base_model()(**batch, use_cache=False).last_hidden_state
        expected = torch.nn.functional.normalize(last_token_pool(hidden, batch["attention_mask"]), dim=-1)
    batch[METADATA_KEY] = describe_batch(model.base_model(), batch)
    assert set(batch[METADATA_KEY].visual_tokens) == {"video"}
    vectors, reads = _forward(model, batch)
    assert len(reads) <= MAX_READS, reads
    torch.testing.assert_close(vectors, expected, rtol=0, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on a lent GPU)")
@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_fused_path_reads_little_and_equals_plain(arch: str, tiny_checkpoint: Callable[..., Path]) -> None:
    """On a GPU in bf16: the Embedder's default path (varlen, metadata, aligned MLPs, compiled
    blocks) reads at most 2 values back and gives the plain path's vectors (cos >= 0.9999)."""
    from vis_embed import Embedder

    embedder = Embedder.from_pretrained(tiny_checkpoint(arch), device="cuda")
    model = embedder.model
    assert model.current_config().attn_implementation == VARLEN and model.dtype == torch.bfloat16
    plain = EmbeddingModel.from_pretrained(tiny_checkpoint(arch), device="cuda").eval()
    batch = model.collate(model.prepare(_items()), padding_side="left", pin_memory=True)
    with torch.inference_mode():
        fused = model(**batch)  # compiles
    with torch.compiler.set_stance("force_eager"):  # the counter sees the Python around the blocks
        _, reads = _forward(model, batch)
    assert len(reads) <= MAX_READS, reads
    expected, _ = _forward(plain, _plain(batch))
    assert float((fused.float() * expected.float()).sum(-1).min()) >= 0.9999


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on a lent GPU)")
@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_encode_reads_each_batch_back_behind_the_next(arch: str, tiny_checkpoint: Callable[..., Path]) -> None:
    """On a GPU, encode launches batch i+1 before reading batch i back (a pinned copy and an event,
    model/runtime/readback.py; every collated value pinned): each row is still its own item's
    vector, in input order -- a read before the copy landed would give another row's or zeros."""
    from vis_embed import Embedder

    # compile off: the read-back is what is tested, and eleven encodes of other shapes would recompile
    embedder = Embedder.from_pretrained(tiny_checkpoint(arch), device="cuda", compile=False)
    items = _items() + _items()[::-1]
    batch = embedder.model.collate(embedder.model.prepare(items[:2]), pin_memory=True)
    assert all(value.is_pinned() for value in batch.values() if isinstance(value, torch.Tensor))
    from vis_embed.model.network.vision_metadata import pinned

    expanded = torch.arange(3).expand(2, 3)  # stride 0: pinned as it is, torch would refuse the copy
    assert pinned(expanded).is_pinned() and torch.equal(pinned(expanded), expanded)
    one_by_one = np.concatenate([embedder.encode([item]) for item in items])
    in_batches = embedder.encode(items, batch_size=2)  # 5 batches: four read behind the next one
    assert in_batches.shape == one_by_one.shape
    assert float((in_batches * one_by_one).sum(-1).min()) >= 0.999  # bf16, other batch neighbours
