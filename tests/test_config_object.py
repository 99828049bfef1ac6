"""EmbeddingConfig is the object that travels: the model holds one, the preparer reads it, the
recipe's ``model_options`` derive from it (None = inherit), the cache key hashes its dump, the
trainer reads the loaded model's dtype, and a warm start checks the adapter's record.

Each test fails on the bug it names (recorded settings lost to recipe defaults, a string dtype
turning DeepSpeed's bf16 off, a warm start ignoring the adapter's settings, a hand-listed key).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from pydantic import create_model

from vis_embed.errors import ConfigError
from vis_embed.model.defaults import DEFAULT_MAX_PIXELS
from vis_embed.model.runtime.embedder import Embedder
from vis_embed.model.embedding_config import EMBEDDING_CONFIG_FILE, LOADING, EmbeddingConfig, flag_fields
from vis_embed.model.network.embedding_model import EmbeddingModel
from vis_embed.training import trainer as trainer_module
from vis_embed.training.backends import TorchBackend
from vis_embed.training.recipe import ModelOptions, load_recipe
from vis_embed.training.model_setup import training_embedding_config
from vis_embed.training.trainer import DEEPSPEED_CONFIG_FILE, Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _training_fixtures import tiny_recipe, write_identity_dataset, write_schedule  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RECORDED = {"prompt_format": "vlm2vec", "max_pixels": 50176}
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run_inputs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("config-object")
    data = write_identity_dataset(root / "data", identities=4, images_per_identity=2)
    return {"root": root, "data": data, "schedule": write_schedule(data, root / "schedule.parquet", steps=1, batch=4)}


@pytest.fixture(scope="module")
def recorded_base(tiny_checkpoint, run_inputs) -> Path:
    """The tiny checkpoint with an embedding_config.json recording vlm2vec / 50176."""
    base = run_inputs["root"] / "recorded-base"
    shutil.copytree(tiny_checkpoint("qwen2-vl"), base)
    EmbeddingConfig(**RECORDED).save(base)
    return base


def _recipe(base: Path, run_inputs: dict[str, Path], out: str, **overrides):
    return load_recipe(raw=tiny_recipe(base, run_inputs["data"], run_inputs["schedule"], run_inputs["root"] / out,
                                       max_steps=1, **overrides))


# ------------------------------------------------------------------ model_options: None = inherit
def test_model_options_are_derived_from_the_config() -> None:
    options = ModelOptions()
    assert set(flag_fields([LOADING])) <= set(ModelOptions.model_fields)
    assert all(getattr(options, name) is None for name in flag_fields([LOADING]))  # every one inherits
    assert options.explicit() == {}
    with pytest.raises(ConfigError, match="model_options.max_pixels"):  # the config's bounds, named in the recipe
        load_recipe(raw={"model": "m", "data": "d", "schedule": "s", "output_dir": "o", "max_steps": 1,
                         "global_batch_size": 1, "model_options": {"max_pixels": 0}})


def test_a_recipe_that_sets_nothing_trains_with_the_bases_recorded_settings(recorded_base, run_inputs) -> None:
    final = Trainer(_recipe(recorded_base, run_inputs, "inherit")).train()
    recorded = json.loads((final / EMBEDDING_CONFIG_FILE).read_text())
    assert {key: recorded[key] for key in RECORDED} == RECORDED  # not the defaults chat / 200704
    assert recorded["dtype"] == "float32"  # the recipe's explicit value


def test_an_explicit_recipe_value_beats_the_bases_file(recorded_base, run_inputs) -> None:
    config = training_embedding_config(_recipe(recorded_base, run_inputs, "x", model_options__prompt_format="chat"))
    assert config.prompt_format == "chat" and config.max_pixels == RECORDED["max_pixels"]


# ------------------------------------------------------------------ warm start
def test_a_warm_start_adopts_the_adapters_settings(tiny_checkpoint, run_inputs, tmp_path) -> None:
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    EmbeddingConfig(prompt_format="vlm2vec", max_pixels=25088, dtype="float32").save(adapter)
    config = training_embedding_config(_recipe(tiny_checkpoint("qwen2-vl"), run_inputs, "x",
                                               init_adapter=str(adapter), model_options={}))
    assert (config.prompt_format, config.max_pixels) == ("vlm2vec", 25088)


def test_a_warm_start_refuses_an_explicit_value_the_adapter_contradicts(tiny_checkpoint, run_inputs,
                                                                        tmp_path) -> None:
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    EmbeddingConfig(prompt_format="vlm2vec", dtype="float32").save(adapter)
    recipe = _recipe(tiny_checkpoint("qwen2-vl"), run_inputs, "x", init_adapter=str(adapter),
                     model_options={"prompt_format": "chat", "dtype": "bfloat16"})
    with pytest.raises(ConfigError, match=r"model_options.prompt_format: 'chat'.*prompt_format: 'vlm2vec'"):
        training_embedding_config(recipe)
    # the dtype is the machine's choice: another one than the adapter trained with is fine
    recipe = _recipe(tiny_checkpoint("qwen2-vl"), run_inputs, "x", init_adapter=str(adapter),
                     model_options={"dtype": "bfloat16"})
    assert training_embedding_config(recipe).dtype == "bfloat16"


# ------------------------------------------------------------------ dtype: checkpoint under DeepSpeed
class _RecordingDeepSpeed(TorchBackend):
    """DeepSpeedBackend's constructor signature on a TorchBackend (no DeepSpeed engine on CPU)."""

    configs: list[dict] = []

    def __init__(self, module, *, ds_config, optimizer, lr_schedule) -> None:
        type(self).configs.append(ds_config)
        super().__init__(module, optimizer=optimizer, lr_schedule=lr_schedule)


def test_dtype_checkpoint_trains_a_bf16_checkpoint_with_deepspeed_bf16(tiny_checkpoint, run_inputs,
                                                                       monkeypatch) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    bf16 = run_inputs["root"] / "bf16-base"
    source = tiny_checkpoint("qwen2-vl")
    AutoModelForImageTextToText.from_pretrained(source, dtype=torch.bfloat16).save_pretrained(bf16)
    AutoProcessor.from_pretrained(source).save_pretrained(bf16)
    monkeypatch.setattr(trainer_module, "DeepSpeedBackend", _RecordingDeepSpeed)
    recipe = _recipe(bf16, run_inputs, "ds", model_options={"dtype": "checkpoint"},
                     deepspeed=str(REPO / "ds_configs" / "zero2.json"))
    trainer = Trainer(recipe)
    assert trainer.dtype == torch.bfloat16  # the loaded model's, not the string "auto"
    assert _RecordingDeepSpeed.configs[-1]["bf16"]["enabled"] is True
    trainer.train()
    written = json.loads((Path(recipe.output_dir) / DEEPSPEED_CONFIG_FILE).read_text())
    assert written["bf16"]["enabled"] is True and written["train_micro_batch_size_per_gpu"] == 4


# ------------------------------------------------------------------ the model holds one config
def test_the_model_and_its_preparer_hold_the_one_config(tiny_checkpoint) -> None:
    model = EmbeddingModel.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu", max_pixels=25088)
    assert model.embedding_config.max_pixels == 25088 == model.max_pixels
    assert model.embedding_config.min_pixels <= model.embedding_config.max_pixels
    assert model.preparer().config is model.embedding_config
    with pytest.raises(ConfigError, match="min_pixels"):  # the one pixel-order rule, EmbeddingConfig's
        EmbeddingModel(model.backbone, model.processor, min_pixels=10**6, max_pixels=DEFAULT_MAX_PIXELS)
    with pytest.raises(ConfigError, match="decode"):  # the one decode-mode check, EmbeddingConfig's
        EmbeddingModel(model.backbone, model.processor, decode="quick")


def test_the_cache_key_is_a_hash_of_the_configs_dump(tiny_checkpoint) -> None:
    embedder = Embedder.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu")
    before = embedder.fingerprint()
    # A field added to EmbeddingConfig joins the key without anyone listing it.
    extended = create_model("Extended", __base__=EmbeddingConfig, new_setting=(int, 7))
    embedder.model.embedding_config = extended(**embedder.model.embedding_config.model_dump())
    embedder._fingerprint = None
    with_field = embedder.fingerprint()
    assert with_field != before
    embedder.model.embedding_config = embedder.model.embedding_config.with_values(new_setting=8)
    embedder._fingerprint = None
    assert embedder.fingerprint() not in (before, with_field)
