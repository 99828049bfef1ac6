"""Settings that travel with the model (issue 25, items 1 and 5): EmbeddingConfig and
``embedding_config.json``.

A 2-step adapter trained with ``prompt_format: vlm2vec``, ``max_pixels: 50176`` and
``max_length: 64`` must embed with those settings wherever it is loaded with no flags (encode,
eval, serve, merge, export), a flag must override a recorded value, and a checkpoint without
the file must load exactly as before the file existed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image
from safetensors.torch import load_file

from vis_embed.cli import load_command, main
from vis_embed.errors import ConfigError
from vis_embed.model.defaults import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS
from vis_embed.model.runtime.embedder import Embedder
from vis_embed.model.embedding_config import (
    EMBEDDING_CONFIG_FILE,
    LOADING,
    EmbeddingConfig,
    flag_fields,
    read_embedding_config,
    resolve_embedding_config,
)
from vis_embed.model.network.embedding_model import resolve_dtype
from vis_embed.training.recipe import load_recipe
from vis_embed.training.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _training_fixtures import tiny_recipe, write_identity_dataset, write_schedule  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TRAINED = {"prompt_format": "vlm2vec", "max_pixels": 50176, "max_length": 64}
SPELLED_OUT = ["--prompt-format", "vlm2vec", "--max-pixels", "50176", "--max-length", "64"]
LONG_TEXT = " ".join(f"word{i} of a long caption about a red square on a blue field" for i in range(20))


@pytest.fixture(scope="module")
def trained(tiny_checkpoint, tmp_path_factory) -> dict[str, Path]:
    """A 2-step LoRA run with the settings above (a checkpoint after step 1, and final/)."""
    root = tmp_path_factory.mktemp("config-run")
    data = write_identity_dataset(root / "data", identities=6)
    schedule = write_schedule(data, root / "schedule.parquet", steps=2, batch=4)
    base = tiny_checkpoint("qwen2-vl")
    raw = tiny_recipe(base, data, schedule, root / "run", max_steps=2, checkpoint__every=1,
                      **{f"model_options__{key}": value for key, value in TRAINED.items()})
    final = Trainer(load_recipe(raw=raw)).train()
    return {"base": base, "final": final, "checkpoint": root / "run" / "checkpoint-1", "root": root}


@pytest.fixture(scope="module")
def items(trained) -> Path:
    """Items each setting changes: a large image (max_pixels), a long text (max_length), and
    a small image and a short text (the prompt format changes every item)."""
    folder = trained["root"] / "items"
    folder.mkdir()
    big = np.zeros((320, 320, 3), dtype=np.uint8)
    big[:160, :, 0], big[160:, :, 2], big[::7, ::5, 1] = 200, 180, 255
    Image.fromarray(big).save(folder / "big.png")
    Image.fromarray(big[:56, :56]).save(folder / "small.png")
    rows = [{"id": "big", "image": "big.png"}, {"id": "long", "text": LONG_TEXT},
            {"id": "small", "image": "small.png", "text": "a square"}, {"id": "short", "text": "a red square"}]
    path = folder / "items.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _encode(model: Path, adapter: Path | None, items: Path, out: Path, *flags: str) -> tuple[np.ndarray, dict]:
    argv = ["encode", "--model", str(model), "--input", str(items), "--output", str(out),
            "--device", "cpu", "--no-progress", *flags]
    assert main(argv + (["--adapter", str(adapter)] if adapter else [])) == 0
    return np.load(out), json.loads(out.with_suffix(".ids.json").read_text())


def _row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _without_config(directory: Path, into: Path) -> Path:
    """A copy of ``directory`` with no embedding_config.json (a checkpoint from before the file)."""
    if not into.exists():
        shutil.copytree(directory, into)
        (into / EMBEDDING_CONFIG_FILE).unlink()
    return into


# ------------------------------------------------------------------ the file training writes
def test_training_writes_the_settings_beside_every_adapter(trained) -> None:
    for directory in (trained["final"], trained["checkpoint"]):
        recorded = json.loads((directory / EMBEDDING_CONFIG_FILE).read_text())
        assert {key: recorded[key] for key in TRAINED} == TRAINED, directory
        assert recorded["min_pixels"] == DEFAULT_MIN_PIXELS and recorded["dtype"] == "float32"
        assert recorded["adaptation"] == "lora" and recorded["pooling"] == "last_token"
        # the data config's instructions (one dataset: shared by every row)
        assert recorded["query_instruction"] == "Find the same object."
        assert recorded["document_instruction"] == "Represent the given image."
        assert recorded["attn_implementation"] is None  # the training machine's kernel is not recorded
        EmbeddingConfig.model_validate(recorded)


def test_training_records_no_instruction_as_empty_and_disagreement_as_null(tmp_path) -> None:
    """"" (every dataset has none) and null (they differ) are kept apart: the export refuses null."""
    from types import SimpleNamespace

    from vis_embed.data.train import TrainDataConfig, TrainDataset
    from vis_embed.training.model_setup import trained_embedding_config

    def recorded(*candidate_instructions: str | None) -> str | None:
        datasets = [TrainDataset(name=f"d{i}", kind="pairs", path=tmp_path, image_root=tmp_path,
                                 query_instruction="Find it.", candidate_instruction=text)
                    for i, text in enumerate(candidate_instructions)]
        data = TrainDataConfig(path=tmp_path / "d.yaml", datasets=datasets)
        recipe = load_recipe(raw={"model": "m", "data": "d.yaml", "schedule": "s.parquet", "output_dir": "out",
                                  "max_steps": 1, "global_batch_size": 8})
        return trained_embedding_config(recipe, data, SimpleNamespace(embedding_config=EmbeddingConfig())
                                        ).document_instruction

    assert recorded(None, None) == "" and recorded(None, "") == ""
    assert recorded("Represent it.", "Represent it.") == "Represent it."
    assert recorded("Represent it.", None) is None


# ------------------------------------------------------------------ encode
def test_encode_with_no_flags_uses_the_recorded_settings(trained, items, tmp_path) -> None:
    recorded, meta = _encode(trained["base"], trained["final"], items, tmp_path / "recorded.npy")
    spelled, _ = _encode(trained["base"], trained["final"], items, tmp_path / "spelled.npy", *SPELLED_OUT)
    assert recorded.shape == spelled.shape
    assert _row_cosines(recorded, spelled).min() >= 0.99999
    # ... and the recorded settings matter: the same adapter without its file embeds differently.
    bare = _without_config(trained["final"], tmp_path / "bare")
    defaults, bare_meta = _encode(trained["base"], bare, items, tmp_path / "defaults.npy")
    assert _row_cosines(recorded, defaults).max() < 0.999
    effective = meta["embedding_config"]
    assert {key: effective[key] for key in TRAINED} == TRAINED
    assert effective["dtype"] == "float32" and effective["attn_implementation"] == "sdpa"  # a CPU's default
    assert bare_meta["embedding_config"]["prompt_format"] == "chat"
    assert bare_meta["embedding_config"]["max_pixels"] == DEFAULT_MAX_PIXELS


@pytest.mark.parametrize(("flags", "changed_row"), [
    (["--max-pixels", "25088"], "big"),  # fewer visual tokens for the 320x320 image only
    (["--max-length", "4096"], "long"),                  # only the long text is above 64 tokens
])
def test_a_flag_overrides_the_recorded_value(trained, items, tmp_path, flags, changed_row) -> None:
    recorded, meta = _encode(trained["base"], trained["final"], items, tmp_path / "recorded.npy")
    overridden, over_meta = _encode(trained["base"], trained["final"], items, tmp_path / "over.npy", *flags)
    cosines = dict(zip(meta["ids"], _row_cosines(recorded, overridden)))
    assert cosines[changed_row] < 0.9999
    assert all(cos >= 0.99999 for row, cos in cosines.items() if row != changed_row)
    field = flags[0].removeprefix("--").replace("-", "_")
    assert over_meta["embedding_config"][field] == int(flags[1])
    assert over_meta["embedding_config"]["prompt_format"] == "vlm2vec"  # the rest still recorded


def test_max_length_cuts_text_at_inference_as_in_training(trained) -> None:
    embedder = Embedder.from_pretrained(trained["base"], adapter=trained["final"], device="cpu")
    assert embedder.model.max_length == 64
    prepared = embedder.model.prepare_one({"text": LONG_TEXT})
    assert prepared.length == 64
    uncut = Embedder.from_pretrained(trained["base"], adapter=trained["final"], device="cpu", max_length=4096)
    assert uncut.model.prepare_one({"text": LONG_TEXT}).length > 64


# ------------------------------------------------------------------ precedence
def test_adapter_file_wins_over_base_file_and_explicit_values_over_both(trained, tmp_path) -> None:
    base = tmp_path / "base"
    shutil.copytree(trained["base"], base)
    EmbeddingConfig(prompt_format="vlm2vec", max_length=32, min_pixels=1024).save(base)
    assert resolve_embedding_config(base).max_length == 32  # the base's own record
    bare = _without_config(trained["final"], tmp_path / "bare")
    assert resolve_embedding_config(base, bare).max_length == 32  # an adapter without a file
    from_adapter = resolve_embedding_config(base, trained["final"])
    assert from_adapter.max_length == 64 and from_adapter.min_pixels == DEFAULT_MIN_PIXELS
    assert resolve_embedding_config(base, trained["final"], max_length=16, prompt_format=None).max_length == 16
    model = Embedder.from_pretrained(base, device="cpu").model
    assert (model.prompt_format, model.max_length, model.min_pixels) == ("vlm2vec", 32, 1024)
    # any field passes through by name (a field added to the class needs no new keyword) ...
    named = Embedder.from_pretrained(base, device="cpu", query_instruction="Find it.")
    assert named.embedding_config.query_instruction == "Find it."
    with pytest.raises(TypeError, match="max_lenght"):  # ... and a misspelt one is refused
        Embedder.from_pretrained(base, device="cpu", max_lenght=8)


def test_a_checkpoint_without_the_file_loads_as_before(trained, items) -> None:
    assert read_embedding_config(trained["base"]) == {}
    plain = Embedder.from_pretrained(trained["base"], device="cpu")
    spelled = Embedder.from_pretrained(trained["base"], device="cpu", prompt_format="chat",
                                       min_pixels=DEFAULT_MIN_PIXELS, max_pixels=DEFAULT_MAX_PIXELS)
    assert plain.embedding_config == spelled.embedding_config
    assert plain.embedding_config.max_length is None and plain.embedding_config.prompt_format == "chat"
    rows = [json.loads(line) for line in items.read_text().splitlines()]
    batch = [{key: value for key, value in row.items() if key != "id"} for row in rows]
    assert np.allclose(plain.encode(batch, base_dir=items.parent), spelled.encode(batch, base_dir=items.parent),
                       atol=1e-6)


def test_a_bad_recorded_value_names_the_file_and_field(tmp_path) -> None:
    (tmp_path / EMBEDDING_CONFIG_FILE).write_text(json.dumps({"max_pixels": 0}))
    with pytest.raises(ConfigError, match=rf"{EMBEDDING_CONFIG_FILE}: field 'max_pixels'"):
        read_embedding_config(tmp_path)
    (tmp_path / EMBEDDING_CONFIG_FILE).write_text(json.dumps({"prompt_fromat": "chat"}))
    with pytest.raises(ConfigError, match="prompt_fromat"):
        resolve_embedding_config(tmp_path)
    with pytest.raises(ConfigError, match="min_pixels"):
        EmbeddingConfig().with_values(min_pixels=10_000, max_pixels=5_000)


def test_save_pretrained_writes_the_settings_it_embeds_with(trained, tmp_path) -> None:
    model = Embedder.from_pretrained(trained["base"], adapter=trained["final"], device="cpu", max_length=48).model
    model.save_pretrained(tmp_path / "saved")
    recorded = read_embedding_config(tmp_path / "saved")
    assert recorded["prompt_format"] == "vlm2vec" and recorded["max_length"] == 48
    assert recorded["adaptation"] == "lora" and recorded["dtype"] == "float32"
    assert (tmp_path / "saved" / "adapter_config.json").is_file()


# ------------------------------------------------------------------ eval, serve
def test_eval_records_the_effective_settings_in_results_json(trained, tmp_path) -> None:
    images = tmp_path / "bench" / "images"
    images.mkdir(parents=True)
    for index, colour in enumerate(((200, 30, 30), (30, 200, 30), (30, 30, 200))):
        for view in range(2):
            Image.new("RGB", (56 + 8 * view, 56), colour).save(images / f"c{index}_{view}.png")
    rows = [{"id": f"q{i}", "query": {"image": f"c{i}_0.png"},
             "candidates": [{"image": f"c{i}_1.png"}] + [{"image": f"c{(i + j) % 3}_1.png"} for j in (1, 2)]}
            for i in range(3)]
    (tmp_path / "bench" / "cand.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    manifest = tmp_path / "bench" / "benchmark.yaml"
    manifest.write_text(yaml.safe_dump({"name": "tiny", "datasets": [
        {"name": "Cand", "benchmark": "MVEB", "meta_task": "ID-Rec", "split": "IND", "layout": "candidates",
         "path": "cand.jsonl", "image_root": "images"}]}))
    out = tmp_path / "eval"
    argv = ["eval", "--model", str(trained["base"]), "--adapter", str(trained["final"]), "--benchmark",
            str(manifest), "--out", str(out), "--device", "cpu", "--quiet", "--no-pictures"]
    assert main(argv) == 0
    model = json.loads((out / "results.json").read_text())["model"]
    assert {key: model["embedding_config"][key] for key in TRAINED} == TRAINED
    assert model["prompt_format"] == "vlm2vec" and model["pixels"]["max_pixels"] == 50176


def test_served_models_list_the_effective_settings(trained) -> None:
    from fastapi.testclient import TestClient

    from vis_embed.serving.app import create_app
    from vis_embed.serving.settings import ServerSettings

    embedder = Embedder.from_pretrained(trained["base"], adapter=trained["final"], device="cpu")
    with TestClient(create_app(embedder, ServerSettings(model_name="tiny"))) as client:
        listed = client.get("/v1/models").json()["data"][0]
    assert listed["id"] == "tiny"
    assert {key: listed["embedding_config"][key] for key in TRAINED} == TRAINED


# ------------------------------------------------------------------ merge, export
def test_merge_carries_the_settings(trained, items, tmp_path) -> None:
    from vis_embed.training.merge import merge_adapter

    merged = merge_adapter(trained["final"], tmp_path / "merged")
    recorded = read_embedding_config(merged)
    assert {key: recorded[key] for key in TRAINED} == TRAINED and recorded["adaptation"] == "full"
    adapted, _ = _encode(trained["base"], trained["final"], items, tmp_path / "adapted.npy")
    folded, meta = _encode(merged, None, items, tmp_path / "merged.npy")  # no flags, no adapter
    assert _row_cosines(adapted, folded).min() >= 0.9999
    assert meta["embedding_config"]["prompt_format"] == "vlm2vec"
    # --dtype is the written weights', not the recorded inference policy (a bf16 merge loads in fp32 on a CPU)
    bf16 = merge_adapter(trained["final"], tmp_path / "bf16", dtype="bfloat16")
    assert read_embedding_config(bf16)["dtype"] == read_embedding_config(trained["final"])["dtype"] == "float32"
    assert {tensor.dtype for tensor in load_file(str(bf16 / "model.safetensors")).values()} == {torch.bfloat16}


def test_export_carries_the_settings_and_refuses_a_format_it_cannot_reproduce(trained, tmp_path) -> None:
    from vis_embed.model.files.export import export_sentence_transformers

    with pytest.raises(ConfigError, match="vlm2vec"):  # recorded: the ST layout reproduces "chat" only
        export_sentence_transformers(None, tmp_path / "refused", adapter=trained["final"])
    assert not (tmp_path / "refused").exists()
    argv = ["export", "--adapter", str(trained["final"]), "--out", str(tmp_path / "st"), "--prompt-format", "chat"]
    # sentence-transformers cuts a long item's tokens elsewhere than vis_embed: no cap is exported
    assert main([*argv, "--max-length", "64"]) == 2 and not (tmp_path / "st").exists()
    with pytest.warns(UserWarning, match="recorded max_length 64 is not exported"):
        assert main(argv) == 0
    recorded = read_embedding_config(tmp_path / "st")
    assert recorded["prompt_format"] == "chat" and recorded["max_pixels"] == 50176 and recorded["max_length"] is None
    prompts = json.loads((tmp_path / "st" / "config_sentence_transformers.json").read_text())["prompts"]
    assert prompts == {"query": "Find the same object.", "document": "Represent the given image."}
    with pytest.warns(UserWarning):
        assert main([*argv[:4], str(tmp_path / "bf16"), *argv[5:], "--dtype", "bfloat16"]) == 0
    assert read_embedding_config(tmp_path / "bf16")["dtype"] == "float32"  # the weights' dtype only
    assert {tensor.dtype for tensor in load_file(str(tmp_path / "bf16" / "model.safetensors")).values()} == {
        torch.bfloat16}
    size = json.loads((tmp_path / "st" / "processor_config.json").read_text())["image_processor"]["size"]
    assert size["longest_edge"] == 50176


# ------------------------------------------------------------------ dtype, flags
def test_dtype_auto_is_by_device_and_checkpoint_keeps_the_checkpoints(tiny_checkpoint, tmp_path) -> None:
    from transformers import AutoModelForImageTextToText

    from vis_embed.model.files.export import load_merged

    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype(None, torch.device("cpu")) == torch.float32
    assert resolve_dtype("checkpoint") == "auto"  # transformers' spelling of "the checkpoint's own"
    source = tiny_checkpoint("qwen2-vl")
    bf16 = tmp_path / "bf16"
    shutil.copytree(source, bf16)  # processor files; the weights are replaced by bfloat16 ones
    AutoModelForImageTextToText.from_pretrained(source, dtype=torch.bfloat16).save_pretrained(bf16)
    assert load_merged(str(bf16))[0].dtype == torch.bfloat16  # default: checkpoint
    assert load_merged(str(bf16), dtype="auto")[0].dtype == torch.float32  # by device: CPU
    loaded = Embedder.from_pretrained(bf16, device="cpu", dtype="checkpoint")
    assert loaded.model.dtype == torch.bfloat16 and loaded.embedding_config.dtype == "bfloat16"
    assert Embedder.from_pretrained(bf16, device="cpu").model.dtype == torch.float32


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    load_command(command)[0](parser)  # the command's add_arguments, as the dispatcher calls it
    return parser


@pytest.mark.parametrize("command", ["encode", "eval", "serve", "mine-negatives", "export", "mteb"])
def test_every_loading_setting_is_a_flag_of_every_inference_command(command) -> None:
    options = {option: action for action in _subparser(command)._actions for option in action.option_strings}
    for name in flag_fields([LOADING]):
        flag = f"--{name.replace('_', '-')}"
        assert flag in options, (command, flag)
        assert options[flag].default is None, (command, flag)  # not given: the recorded value can win
    assert set(flag_fields([LOADING])) >= {"prompt_format", "min_pixels", "max_pixels", "max_length", "dtype", "decode",
                                           "attn_implementation"}


def test_a_hub_file_that_cannot_be_checked_is_none_with_a_warning(tmp_path, monkeypatch, caplog) -> None:
    """Offline and never cached, a Hub model's embedding_config.json is unknown: the model loads
    without it, and says so; a file the cache knows the Hub lacks is None without a word."""
    from huggingface_hub import constants

    from vis_embed.model.references import model_file

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with caplog.at_level("WARNING", logger="vis_embed.model.references"):
        assert model_file("acme/never-cached", "embedding_config.json") is None
    assert "cannot check for embedding_config.json" in caplog.text
    commit = "0" * 40
    repo_dir = tmp_path / "models--acme--plain"
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(commit)
    (repo_dir / ".no_exist" / commit).mkdir(parents=True)
    (repo_dir / ".no_exist" / commit / "embedding_config.json").touch()  # the Hub said: no such file
    caplog.clear()
    with caplog.at_level("WARNING", logger="vis_embed.model.references"):
        assert model_file("acme/plain", "embedding_config.json") is None
    assert caplog.text == ""
