"""``vis-embed export --format sentence-transformers``: the exported directory gives the same
vectors in sentence-transformers (no custom code) as vis_embed's Embedder with base + adapter.

The adapter is a LoRA with perturbed weights (lora_B drawn at random instead of peft's zero
init, on the language model and the vision tower), saved in peft format: cheaper than a
training run and, unlike a freshly initialised adapter, it changes the vectors (asserted).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vis_embed import Embedder
from vis_embed.cli import main as cli_main
from vis_embed.model.files.export import INSTRUCTION_TEMPLATE_PREFIX, export_sentence_transformers

from _model_fixtures import perturbed_adapter

pytestmark = pytest.mark.usefixtures("one_torch_thread")
sentence_transformers = pytest.importorskip("sentence_transformers")

ARCHS = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"]
QUERY = "Find the same object as the one in the given image."
DOCUMENT = "Represent the given image."


def _image(height: int, width: int, seed: int) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def inputs() -> list[tuple[object, dict]]:
    """(sentence-transformers input, the same vis_embed item): a string, an image, both."""
    image = _image(70, 130, 0)
    return [("a red car on a bridge", {"text": "a red car on a bridge"}),
            (image, {"image": image}),
            ({"image": image, "text": "the same car"}, {"image": image, "text": "the same car"})]


@pytest.fixture(scope="module", params=ARCHS)
def exported(request: pytest.FixtureRequest, tiny_checkpoint: Callable[..., Path],
             tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    base = tiny_checkpoint(request.param)
    work = tmp_path_factory.mktemp(f"export-{request.param}")
    adapter = perturbed_adapter(base, work / "adapter")
    out = export_sentence_transformers(None, work / "st", adapter=adapter,
                                       query_instruction=QUERY, document_instruction=DOCUMENT)
    return base, adapter, out


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return (a * b).sum(-1)


def test_sentence_transformers_matches_embedder(exported: tuple[Path, Path, Path]) -> None:
    base, adapter, out = exported
    model = sentence_transformers.SentenceTransformer(str(out), device="cpu")
    embedder = Embedder.from_pretrained(base, adapter=adapter, device="cpu", dtype="float32")
    for st_input, item in inputs():
        for encode, instruction in ((model.encode_query, QUERY), (model.encode_document, DOCUMENT)):
            st_vector = np.asarray(encode([st_input], convert_to_numpy=True))
            ours = embedder.encode([item], instruction=instruction)
            assert _cosines(st_vector, ours).min() >= 0.9999, (type(st_input).__name__, instruction)


def test_batched_sentence_transformers_matches_embedder(exported: tuple[Path, Path, Path]) -> None:
    """A mixed batch (padding, one message batch) gives each item its own vector."""
    base, adapter, out = exported
    model = sentence_transformers.SentenceTransformer(str(out), device="cpu")
    embedder = Embedder.from_pretrained(base, adapter=adapter, device="cpu", dtype="float32")
    st_inputs, items = zip(*inputs())
    st_vectors = np.asarray(model.encode_document(list(st_inputs), convert_to_numpy=True))
    assert _cosines(st_vectors, embedder.encode(list(items), instruction=DOCUMENT)).min() >= 0.9999


def test_adapter_changes_the_vectors(exported: tuple[Path, Path, Path]) -> None:
    base, adapter, _out = exported
    items = [item for _input, item in inputs()]
    plain = Embedder.from_pretrained(base, device="cpu", dtype="float32").encode(items, instruction=QUERY)
    adapted = Embedder.from_pretrained(base, adapter=adapter, device="cpu", dtype="float32").encode(
        items, instruction=QUERY)
    assert _cosines(plain, adapted).max() < 0.999


def test_export_files_name_last_token_pooling_and_prompts(exported: tuple[Path, Path, Path]) -> None:
    _base, _adapter, out = exported
    pooling = json.loads((out / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode"] == "lasttoken" and pooling["pooling_mode_lasttoken"] is True
    assert not any(value for key, value in pooling.items()
                   if key.startswith("pooling_mode_") and key != "pooling_mode_lasttoken")
    prompts = json.loads((out / "config_sentence_transformers.json").read_text())["prompts"]
    assert prompts == {"query": QUERY, "document": DOCUMENT}
    assert (out / "chat_template.jinja").read_text().startswith(INSTRUCTION_TEMPLATE_PREFIX)
    assert not (out / "adapter_config.json").exists()  # merged: no peft needed to load it


def test_export_cli_without_adapter_matches_base(tiny_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    base = tiny_checkpoint("qwen2-vl")
    out = tmp_path / "st"
    assert cli_main(["export", str(base), "--out", str(out), "--query-instruction", "Find it."]) == 0
    model = sentence_transformers.SentenceTransformer(str(out), device="cpu")
    ours = Embedder.from_pretrained(base, device="cpu", dtype="float32").encode([{"text": "a cat"}],
                                                                                 instruction="Find it.")
    assert _cosines(np.asarray(model.encode_query(["a cat"])), ours).min() >= 0.9999


def test_export_cli_missing_base_fails_fast(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["export", str(tmp_path / "nowhere"), "--out", str(tmp_path / "st")]) == 2
    assert "base model not found" in capsys.readouterr().err
    assert not (tmp_path / "st").exists()


def _vllm_skip_reason() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA GPU (vLLM's pooling runner)"
    if importlib.util.find_spec("vllm") is None:
        return "needs vLLM installed (pip install vllm)"
    return None


@pytest.mark.skipif(_vllm_skip_reason() is not None, reason=_vllm_skip_reason() or "")
def test_vllm_pooling_runner_matches_embedder(exported: tuple[Path, Path, Path]) -> None:
    """``vllm serve DIR --runner pooling --convert embed`` reads the same directory: offline LLM."""
    from transformers import AutoProcessor
    from vllm import LLM

    base, adapter, out = exported
    processor = AutoProcessor.from_pretrained(out)
    llm = LLM(model=str(out), runner="pooling", convert="embed", dtype="float32",
              max_model_len=4096, enforce_eager=True)
    embedder = Embedder.from_pretrained(base, adapter=adapter, device="cuda", dtype="float32")
    for _st_input, item in inputs():
        content = ([{"type": "image"}] if "image" in item else []) + (
            [{"type": "text", "text": item["text"]}] if "text" in item else [])
        messages = [{"role": "system", "content": [{"type": "text", "text": QUERY}]},
                    {"role": "user", "content": content}]
        prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        request = {"prompt": prompt, **({"multi_modal_data": {"image": item["image"]}} if "image" in item else {})}
        vector = np.asarray(llm.embed([request])[0].outputs.embedding, dtype=np.float32)[None]
        assert _cosines(vector, embedder.encode([item], instruction=QUERY)).min() >= 0.9999


def test_a_recorded_null_instruction_is_refused_not_replaced_by_the_default(
        tiny_checkpoint: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """null is what training records when its datasets had different candidate instructions:
    exporting the default in its place would prompt with text the model never saw."""
    import shutil

    from vis_embed.model.embedding_config import EmbeddingConfig

    base = tmp_path / "base"
    shutil.copytree(tiny_checkpoint("qwen2-vl"), base)
    EmbeddingConfig(query_instruction="Find it.", document_instruction=None).save(base)
    assert cli_main(["export", str(base), "--out", str(tmp_path / "refused")]) == 2
    assert "records document_instruction: null" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "st"
    assert cli_main(["export", str(base), "--out", str(out), "--document-instruction", ""]) == 0
    prompts = json.loads((out / "config_sentence_transformers.json").read_text())["prompts"]
    assert prompts == {"query": "Find it."}  # "" = no prompt, as the Embedder reads it
    EmbeddingConfig(query_instruction="Find it.", document_instruction="").save(base)  # recorded: none
    export_sentence_transformers(str(base), tmp_path / "st2")
    assert json.loads((tmp_path / "st2" / "config_sentence_transformers.json").read_text())["prompts"] == prompts


def test_recorded_matryoshka_widths_above_the_models_are_refused(
        tiny_checkpoint: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Else config.json would list a width vLLM then offers as `dimensions` and cannot give."""
    import shutil

    from vis_embed.model.embedding_config import EmbeddingConfig

    base = tmp_path / "base"
    shutil.copytree(tiny_checkpoint("qwen2-vl"), base)
    EmbeddingConfig(matryoshka_dims=[8, 100000], query_instruction="q", document_instruction="d").save(base)
    assert cli_main(["export", str(base), "--out", str(tmp_path / "st")]) == 2
    assert "matryoshka_dims [8, 100000]: 100000 exceeds the model's embedding width" in capsys.readouterr().err
    assert not (tmp_path / "st").exists()


def test_out_naming_the_adapters_recorded_base_is_refused(
        tiny_checkpoint: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The base read from the adapter's record is an input as a given MODEL is (was: --out BASE
    replaced the base checkpoint by the export, and the adapter then named merged weights)."""
    import shutil

    base = tmp_path / "base"
    shutil.copytree(tiny_checkpoint("qwen2-vl"), base)
    adapter = perturbed_adapter(base, tmp_path / "lora")
    weights = (base / "model.safetensors").read_bytes()
    assert cli_main(["export", "--adapter", str(adapter), "--out", str(base),
                     "--query-instruction", "q", "--document-instruction", "d"]) == 2
    assert f"--out {base}: holds the input {base}" in capsys.readouterr().err
    assert (base / "model.safetensors").read_bytes() == weights and not (base / "modules.json").exists()


def test_an_adapter_given_as_the_model_is_named_as_one(
        tiny_checkpoint: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``vis-embed export runs/x/final`` (the run's adapter as MODEL), ``merge --base`` or
    ``Embedder.from_pretrained`` of it: told to pass it as the adapter (was transformers'
    'Unrecognized processing class' / 'model_type' message, or a recorded-instruction error)."""
    from vis_embed.errors import ConfigError
    from vis_embed.model.network.projection_head import ProjectionHead, save_head

    base = tiny_checkpoint("qwen2-vl")
    lora = perturbed_adapter(base, tmp_path / "lora")
    head = save_head(tmp_path / "head", ProjectionHead(8, 4), str(base))
    for command in (["export", str(lora), "--out", str(tmp_path / "st")],
                    ["export", str(head), "--out", str(tmp_path / "st"), "--query-instruction", "q"],
                    ["merge", str(lora), "--base", str(head), "--out", str(tmp_path / "merged")]):
        assert cli_main(command) == 2
        assert "holds a saved adapter" in capsys.readouterr().err, command
    with pytest.raises(ConfigError, match=r"lora holds a saved adapter \(lora\), not a model: pass it as the adapter"):
        Embedder.from_pretrained(lora, device="cpu")
    assert not (tmp_path / "st").exists() and not (tmp_path / "merged").exists()


def test_the_adapters_evaluation_goes_on_the_card_only_of_an_export_that_embeds_alike(
        tiny_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """An export with another pixel budget (or without a recorded token cap) gives other vectors
    than the evaluated adapter: its card does not claim the adapter's scores (was: copied)."""
    from vis_embed.model.files.model_card import write_model_card

    adapter = perturbed_adapter(tiny_checkpoint("qwen2-vl"), tmp_path / "lora")
    write_model_card(adapter, {"base_model": "b", "steps": 3, "evaluation": {"datasets": {"SynthRec": {
        "metric": "P@1", "value": 61.2, "meta_task": "ID-Rec", "split": "IND"}}, "groups": {}}})
    prompts = ["--query-instruction", "q", "--document-instruction", "d"]
    assert cli_main(["export", "--adapter", str(adapter), "--out", str(tmp_path / "same"), *prompts]) == 0
    assert "| SynthRec | ID-Rec | IND | P@1 | 61.20 |" in (tmp_path / "same" / "README.md").read_text()
    assert cli_main(["export", "--adapter", str(adapter), "--out", str(tmp_path / "smaller"), *prompts,
                     "--max-pixels", "40000"]) == 0
    card = (tmp_path / "smaller" / "README.md").read_text()
    assert "61.2" not in card and "Not evaluated when this card was written" in card


def test_a_fully_fine_tuned_models_card_facts_travel_to_its_export(tiny_checkpoint: Callable[..., Path],
                                                                   tmp_path: Path) -> None:
    """``vis-embed export RUN/final`` (a full fine-tune: the model itself, no adapter) built the
    card from the folder's name alone (no base, steps, data or evaluation); the folder's own card
    facts are the export's, and --results still replaces the evaluation."""
    import shutil

    from vis_embed.model.files.model_card import read_facts, write_model_card

    final = tmp_path / "run" / "final"
    shutil.copytree(tiny_checkpoint("qwen2-vl"), final)
    write_model_card(final, {"base_model": "Qwen/Qwen2-VL-2B-Instruct", "steps": 3,
                             "datasets": [{"name": "SynthRec", "kind": "pairs", "path": "d.jsonl", "weight": 1.0}],
                             "evaluation": {"datasets": {"SynthRec": {"metric": "P@1", "value": 61.2,
                                                                      "meta_task": "ID-Rec", "split": "IND"}},
                                            "groups": {}}})
    assert cli_main(["export", str(final), "--out", str(tmp_path / "st")]) == 0
    facts = read_facts(tmp_path / "st")
    assert facts is not None and facts.base_model == "Qwen/Qwen2-VL-2B-Instruct" and facts.steps == 3
    assert [dataset["name"] for dataset in facts.datasets] == ["SynthRec"]
    assert "| SynthRec | ID-Rec | IND | P@1 | 61.20 |" in (tmp_path / "st" / "README.md").read_text()


def test_an_export_whose_card_cannot_be_written_leaves_no_model_folder(tiny_checkpoint: Callable[..., Path],
                                                                       tmp_path: Path, monkeypatch) -> None:
    """The card is written in the folder being built, before it becomes --out: an export either
    lands with its card or not at all (was: the model landed, then the card was written into it)."""
    from vis_embed.model.files import model_card

    def broken_card(*args, **kwargs):
        raise RuntimeError("the card could not be written")

    monkeypatch.setattr(model_card, "write_model_card", broken_card)
    with pytest.raises(RuntimeError, match="the card could not be written"):
        cli_main(["export", str(tiny_checkpoint("qwen2-vl")), "--out", str(tmp_path / "st")])
    assert not (tmp_path / "st").exists()
    assert list(tmp_path.iterdir()) == []  # no staging folder left behind either
