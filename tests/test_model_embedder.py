"""EmbeddingModel / Embedder on tiny checkpoints of every supported architecture.

The properties the method depends on: a vector depends only on its item (batch invariance,
any padding side), encoding is deterministic and survives save/reload, adapters load on top
and merge exactly, and the forward used for training is differentiable.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vis_embed import Embedder
from vis_embed.errors import ConfigError, DataError
from vis_embed.model.inputs.preparer import Preparer
from vis_embed.model.network.embedding_model import EmbeddingModel
from vis_embed.model.prompts import build_prompt

from _model_fixtures import perturbed_adapter

ARCHS = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"]
INSTRUCTION = "Find the same object as the one in the given image."


def _image(height: int, width: int, seed: int) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def mixed_items() -> list[dict]:
    """Text-only, image-only and image+text items; different image sizes and text lengths."""
    return [
        {"text": "a red car"},
        {"image": _image(112, 112, 0)},
        {"image": _image(60, 200, 1), "text": "the quick brown fox jumps over the lazy dog " * 3},
        {"text": "Which photo shows the same person as this one, taken on another day?"},
        {"image": _image(300, 140, 2), "text": "object"},
        {"image": _image(56, 56, 3)},
    ]


@pytest.fixture(scope="module", params=ARCHS)
def arch(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def embedder(arch: str, tiny_checkpoint: Callable[..., Path]) -> Embedder:
    return Embedder.from_pretrained(tiny_checkpoint(arch), device="cpu")


@pytest.fixture(scope="module")
def singles(embedder: Embedder) -> np.ndarray:
    """Every mixed item encoded on its own (batch of one: no padding at all)."""
    return np.concatenate([embedder.encode([item], instruction=INSTRUCTION) for item in mixed_items()])


def _min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float((a * b).sum(axis=1).min())


def test_output_contract(embedder: Embedder, singles: np.ndarray) -> None:
    assert singles.dtype == np.float32
    assert singles.shape == (len(mixed_items()), embedder.embedding_dim)
    np.testing.assert_allclose(np.linalg.norm(singles, axis=1), 1.0, atol=1e-5)
    # Different items give different vectors (the model is not collapsed / ignoring input).
    assert _min_cosine(singles[:1], singles[1:]) < 0.999


@pytest.fixture(scope="module")
def batched(embedder: Embedder) -> np.ndarray:
    """The mixed items encoded together in one batch."""
    return embedder.encode(mixed_items(), instruction=INSTRUCTION, batch_size=len(mixed_items()))


def test_batch_invariance_in_mixed_batch(embedder: Embedder, singles: np.ndarray,
                                         batched: np.ndarray) -> None:
    assert _min_cosine(batched, singles) >= 0.99999
    # Smaller batches: length-sorted across batches, rows restored to input order.
    in_fours = embedder.encode(mixed_items(), instruction=INSTRUCTION, batch_size=4)
    assert _min_cosine(in_fours, singles) >= 0.99999


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_pooling_reads_last_real_token_for_both_padding_sides(
        embedder: Embedder, singles: np.ndarray, padding_side: str) -> None:
    model = embedder.model
    batch = model.collate(model.prepare(mixed_items(), INSTRUCTION), padding_side=padding_side)
    assert (batch["attention_mask"] == 0).any()  # the batch really is padded
    with torch.inference_mode():
        vectors = model(**batch).numpy()
    assert _min_cosine(vectors, singles) >= 0.99999


def test_same_batch_twice_is_identical(embedder: Embedder, batched: np.ndarray) -> None:
    again = embedder.encode(mixed_items(), instruction=INSTRUCTION, batch_size=len(mixed_items()))
    np.testing.assert_array_equal(again, batched)


def test_instruction_and_text_change_the_vector(embedder: Embedder) -> None:
    item = [{"image": _image(112, 112, 0), "text": "red"}]
    base = embedder.encode(item, instruction=INSTRUCTION)
    assert _min_cosine(base, embedder.encode(item)) < 0.9999
    assert _min_cosine(base, embedder.encode([{**item[0], "text": "blue"}], instruction=INSTRUCTION)) < 0.9999


def test_lm_head_is_never_run(embedder: Embedder) -> None:
    calls: list[int] = []
    handle = embedder.model.backbone.lm_head.register_forward_hook(lambda *_: calls.append(1))
    try:
        embedder.encode(mixed_items()[:2])
    finally:
        handle.remove()
    assert calls == []


def test_save_and_reload_gives_identical_vectors(embedder: Embedder, batched: np.ndarray,
                                                 tmp_path: Path) -> None:
    embedder.model.save_pretrained(tmp_path / "copy")
    reloaded = Embedder.from_pretrained(tmp_path / "copy", device="cpu")
    again = reloaded.encode(mixed_items(), instruction=INSTRUCTION, batch_size=len(mixed_items()))
    np.testing.assert_array_equal(again, batched)
    assert reloaded.fingerprint() == embedder.fingerprint()


def test_lora_adapter_changes_vectors_and_merging_reproduces_them(
        arch: str, tiny_checkpoint: Callable[..., Path], embedder: Embedder, tmp_path: Path) -> None:
    checkpoint = tiny_checkpoint(arch)
    perturbed_adapter(checkpoint, tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()

    items = mixed_items()[:3]
    base = embedder
    adapted = Embedder.from_pretrained(checkpoint, adapter=tmp_path / "adapter", device="cpu")
    base_vectors, adapted_vectors = base.encode(items), adapted.encode(items)
    assert _min_cosine(base_vectors, adapted_vectors) < 0.99
    assert adapted.fingerprint() != base.fingerprint()

    adapted.model.merge_adapter()
    assert not hasattr(adapted.model.backbone, "peft_config")
    merged_vectors = adapted.encode(items)
    assert _min_cosine(merged_vectors, adapted_vectors) >= 0.99999
    np.testing.assert_allclose(merged_vectors, adapted_vectors, atol=1e-4)


def test_add_lora_targets_language_model_only_by_default(
        arch: str, tiny_checkpoint: Callable[..., Path]) -> None:
    model = EmbeddingModel.from_pretrained(tiny_checkpoint(arch), device="cpu")
    model.add_lora(r=2, alpha=4, dropout=0.0)
    trainable = [name for name, p in model.backbone.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name and "language_model" in name for name in trainable)
    assert {name.split(".")[-4] for name in trainable} == {
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    with pytest.raises(ConfigError, match="already"):
        model.add_lora()


def test_forward_is_differentiable_for_training(arch: str, tiny_checkpoint: Callable[..., Path]) -> None:
    model = EmbeddingModel.from_pretrained(tiny_checkpoint(arch), device="cpu")
    model.add_lora(r=2, alpha=4, dropout=0.0, vision=True)
    model.train()
    with torch.no_grad():  # non-zero B so that lora_A receives gradient too
        for name, parameter in model.backbone.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.01)
    vectors = model.embed(mixed_items()[:3], instruction=INSTRUCTION)
    assert vectors.requires_grad and vectors.dtype == torch.float32
    (vectors @ vectors.T).sum().backward()
    grads = {name: p.grad for name, p in model.backbone.named_parameters() if p.requires_grad}
    # LoRA on the decoder and on the vision tower both receive gradient.
    assert any(g is not None and g.abs().sum() > 0 for n, g in grads.items() if "language_model" in n)
    assert any(g is not None and g.abs().sum() > 0 for n, g in grads.items() if "visual" in n)
    assert all(p.grad is None for name, p in model.backbone.named_parameters() if not p.requires_grad)


def test_collate_matches_the_processor(embedder: Embedder) -> None:
    """Our per-item prepare + collate == the HF processor on the whole batch (right padding)."""
    model = embedder.model
    items = mixed_items()
    batch = model.collate(model.prepare(items, INSTRUCTION), padding_side="right")
    prompts = [build_prompt(model.processor, "image" in item, INSTRUCTION, item.get("text"))
               for item in items]
    images = [item["image"] for item in items if "image" in item]
    reference = model.processor(text=prompts, images=images, padding=True, return_tensors="pt",
                                images_kwargs={"size": {"shortest_edge": model.min_pixels,
                                                        "longest_edge": model.max_pixels}})
    for key in ("input_ids", "attention_mask", "mm_token_type_ids", "pixel_values", "image_grid_thw"):
        torch.testing.assert_close(batch[key], reference[key].to(batch[key].dtype), msg=key)


def test_max_pixels_bounds_visual_tokens(arch: str, tiny_checkpoint: Callable[..., Path]) -> None:
    model = EmbeddingModel.from_pretrained(tiny_checkpoint(arch), device="cpu", max_pixels=112 * 112)
    prepared = model.prepare([{"image": _image(640, 480, 4)}])[0]
    merge = model.processor.image_processor.merge_size
    assert 0 < int(prepared.image_grid_thw.prod()) // merge**2 <= 16
    assert int((prepared.mm_token_type_ids == 1).sum()) == int(prepared.image_grid_thw.prod()) // merge**2


def test_max_length_cuts_item_text_but_keeps_visual_tokens(tiny_checkpoint: Callable[..., Path]) -> None:
    model = EmbeddingModel.from_pretrained(tiny_checkpoint(), device="cpu", max_length=60)
    long_item = {"image": _image(112, 112, 5), "text": "the quick brown fox jumps " * 20}
    prepared = model.prepare([long_item], INSTRUCTION)[0]
    assert 55 <= prepared.length <= 60
    assert int((prepared.mm_token_type_ids == 1).sum()) == 16
    assert prepared.input_ids[-3:].tolist() == model.prepare([{"text": "x"}])[0].input_ids[-3:].tolist()


def test_max_length_cut_inside_a_character_ends(tiny_checkpoint: Callable[..., Path],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A cut between an emoji's byte tokens decodes as U+FFFD, which tokenises back to as many
    tokens: the cut loop made no progress and never ended (vlm2vec, 40 tokens, 200 emoji)."""
    model = EmbeddingModel.from_pretrained(tiny_checkpoint(), device="cpu", max_length=40, prompt_format="vlm2vec")
    calls = 0
    process = Preparer.process

    def counted(self: Preparer, *args: object) -> object:
        nonlocal calls
        calls += 1
        assert calls <= 20, "the text cut makes no progress"
        return process(self, *args)

    monkeypatch.setattr(Preparer, "process", counted)
    prepared = model.prepare_one({"text": "\U0001F600" * 200}, "Find it.")
    assert prepared.truncated and 30 <= prepared.length <= 40
    assert "\ufffd" not in model.processor.tokenizer.decode(prepared.input_ids)


def test_an_item_over_max_length_without_its_text_names_what_is_left(tiny_checkpoint: Callable[..., Path]) -> None:
    """A text-only item was refused as '(image and instruction)' in field 'instruction', with neither."""
    model = EmbeddingModel.from_pretrained(tiny_checkpoint(), device="cpu", max_length=8)
    with pytest.raises(DataError, match=r"without its text \(prompt template\)") as info:
        model.prepare_one({"text": "hello world"})
    assert info.value.field == "text"
    with pytest.raises(DataError, match=r"\(instruction, prompt template\)") as info:
        model.prepare_one({"text": "hello world"}, "Find it.")
    assert info.value.field == "instruction"
    with pytest.raises(DataError, match=r"\(image, prompt template\)") as info:
        model.prepare_one({"image": _image(56, 56, 0)})
    assert info.value.field == "image"


def test_prompt_formats(tiny_checkpoint: Callable[..., Path]) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_checkpoint())
    assert build_prompt(processor, True, "Represent the given image.", "a cat", "vlm2vec") == \
        "<|image_pad|> Represent the given image. a cat"
    assert build_prompt(processor, False, "Find it.", "a cat", "vlm2vec") == "Find it. a cat"
    assert build_prompt(processor, True, None, None, "vlm2vec") == "<|image_pad|>"
    chat = build_prompt(processor, True, "Find it.", "a cat", "chat")
    assert chat.index("<|image_pad|>") < chat.index("Find it. a cat")
    assert chat.startswith("<|im_start|>user") and chat.endswith("<|im_start|>assistant\n")


def test_vlm2vec_format_encodes_and_differs_from_chat(
        arch: str, tiny_checkpoint: Callable[..., Path], embedder: Embedder, batched: np.ndarray) -> None:
    raw = Embedder.from_pretrained(tiny_checkpoint(arch), device="cpu", prompt_format="vlm2vec")
    model = raw.model
    prepared = model.prepare(mixed_items(), INSTRUCTION)
    with torch.inference_mode():
        left = model(**model.collate(prepared, padding_side="left")).numpy()
        right = model(**model.collate(prepared, padding_side="right")).numpy()
    assert _min_cosine(left, right) >= 0.99999
    assert _min_cosine(left, batched) < 0.999
    assert raw.fingerprint() != embedder.fingerprint()


def test_bad_items_raise_data_errors(tiny_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    embedder = Embedder.from_pretrained(tiny_checkpoint(), device="cpu")
    with pytest.raises(DataError, match="neither an image nor a text") as info:
        embedder.encode([{"text": "fine"}, {"image": None, "text": "  "}])
    assert info.value.item_index == 1
    with pytest.raises(DataError, match="not found") as info:
        embedder.encode([{"image": "missing.png"}], base_dir=tmp_path)
    assert info.value.field == "image" and info.value.path == str(tmp_path / "missing.png")
    (tmp_path / "corrupt.png").write_bytes(b"\x89PNG garbage")
    with pytest.raises(DataError, match="cannot decode"):
        embedder.encode([{"image": tmp_path / "corrupt.png"}])
    with pytest.raises(DataError, match="must be a string"):
        embedder.encode([{"text": 3}])


def test_misused_encode_arguments_are_clear_errors(tiny_checkpoint: Callable[..., Path]) -> None:
    """One item not in a list (read as its keys: 'items[0] ... got str'), a generator (len()
    failed) and one instruction per item (an AttributeError from inside the prompt builder)."""
    embedder = Embedder.from_pretrained(tiny_checkpoint(), device="cpu")
    with pytest.raises(TypeError, match="got dict; put one item in a list"):
        embedder.encode({"text": "a red car"})
    with pytest.raises(TypeError, match="got generator"):
        embedder.encode(item for item in [{"text": "a red car"}])
    for instruction in (["Find it.", "Find it."], 3):
        with pytest.raises(DataError, match="one string for all the items") as info:
            embedder.encode([{"text": "a"}, {"text": "b"}], instruction=instruction)
        assert info.value.field == "instruction"


def test_unknown_model_and_bad_options_are_config_errors(tmp_path: Path,
                                                         tiny_checkpoint: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError, match="not found"):
        Embedder.from_pretrained(tmp_path / "no-such-model")
    with pytest.raises(ConfigError, match="prompt_format"):
        Embedder.from_pretrained(tiny_checkpoint(), prompt_format="alpaca")
    with pytest.raises(ConfigError, match="adapter"):
        Embedder.from_pretrained(tiny_checkpoint(), adapter=tmp_path)


def test_a_device_this_machine_lacks_is_a_config_error(tiny_checkpoint: Callable[..., Path],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """--device gpu / --device cuda on a machine without one: torch's RuntimeError traceback from
    inside the load (after the weights were read)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", "cuda:1", "gpu"):
        with pytest.raises(ConfigError, match="device"):
            Embedder.from_pretrained(tiny_checkpoint(), device=device)


def test_batches_run_one_ahead_in_one_thread_errors_at_their_batch_and_an_early_exit_closes_the_source() -> None:
    """Embedder.prepared_batches hands its source (items prepared here or received from the
    worker processes) to one_batch_ahead: batch i+1 is made while the model runs batch i.  The
    order, where an error surfaces and the pool's shutdown must be as without the thread."""
    import threading

    from vis_embed.model.runtime.item_feed import one_batch_ahead

    made: list[tuple[int, str]] = []
    closed = threading.Event()

    def source(fail_at: int | None = None):
        try:
            for number in range(5):
                if number == fail_at:
                    raise DataError("bad item", field="image")
                made.append((number, threading.current_thread().name))
                yield (number, [number])
        finally:
            closed.set()

    assert [batch for batch, _ in one_batch_ahead(source())] == [0, 1, 2, 3, 4]
    assert len({thread for _, thread in made}) == 1 and made[0][1] != threading.current_thread().name
    made.clear()
    seen = []
    with pytest.raises(DataError, match="bad item"):
        for batch, _ in one_batch_ahead(source(fail_at=2)):
            seen.append(batch)
    assert seen == [0, 1]  # the batches before the bad one were handed on first
    closed.clear()
    made.clear()
    stream = one_batch_ahead(source())
    assert next(stream)[0] == 0
    stream.close()  # the caller stops early (its model raised): the source is closed, not left running
    assert closed.is_set() and [number for number, _ in made] in ([0], [0, 1])  # at most one made ahead
