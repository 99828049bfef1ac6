"""Matryoshka: the loss wrapper (formula, GradCache equals full-batch), the recipe keys, the record."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from _training_standin import StandInEncoder, random_members
from vis_embed.errors import ConfigError
from vis_embed.model.embedding_config import EmbeddingConfig
from vis_embed.training.backends import TorchBackend
from vis_embed.training.recipe import GradCacheConfig, OptimizerConfig
from vis_embed.training.gradcache import contrastive_step
from vis_embed.training.losses import Temperature, info_nce_loss
from vis_embed.training.losses.matryoshka import matryoshka_for_model, matryoshka_objective
from vis_embed.training.lr_schedule import lr_lambda
from vis_embed.training.recipe import LossConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")
BATCH, WIDTH = 7, 16


def _infonce(q, c, labels):
    return info_nce_loss(q, c, 0.1)


def test_loss_is_the_weighted_sum_over_renormalised_prefixes_plus_the_full_width() -> None:
    q, c = F.normalize(torch.randn(5, WIDTH), dim=1), F.normalize(torch.randn(5, WIDTH), dim=1)
    loss = matryoshka_objective(_infonce, [4, 8], [0.5, 2.0])(q, c, None)
    by_hand = (_infonce(q, c, None) + 0.5 * _infonce(F.normalize(q[:, :4], dim=1), F.normalize(c[:, :4], dim=1), None)
               + 2.0 * _infonce(F.normalize(q[:, :8], dim=1), F.normalize(c[:, :8], dim=1), None))
    assert float(loss) == pytest.approx(float(by_hand), rel=1e-6)


def test_a_last_dim_equal_to_the_width_is_the_full_term_once() -> None:
    q, c = F.normalize(torch.randn(5, WIDTH), dim=1), F.normalize(torch.randn(5, WIDTH), dim=1)
    loss = matryoshka_objective(_infonce, [4, WIDTH], [1.0, 3.0])(q, c, None)
    by_hand = 3.0 * _infonce(q, c, None) + _infonce(F.normalize(q[:, :4], dim=1), F.normalize(c[:, :4], dim=1), None)
    assert float(loss) == pytest.approx(float(by_hand), rel=1e-6)


def test_without_dims_the_objective_is_returned_unchanged() -> None:
    assert matryoshka_objective(_infonce, None) is _infonce


def _step(chunk_size: int):
    torch.manual_seed(0)
    model = StandInEncoder(dim=WIDTH)
    tau = Temperature(0.05)
    backend = TorchBackend(model, optimizer=OptimizerConfig(lr=1e-3, max_grad_norm=0.0), lr_schedule=lr_lambda(0, 10))
    objective = matryoshka_objective(lambda q, c, labels: info_nce_loss(q, c, tau()), [2, 4, 8], [1.0, 0.5, 0.25])
    queries, candidates = random_members(BATCH, 1), random_members(BATCH, 2)
    result = contrastive_step(backend, model.collate, queries, candidates, lambda q, c: objective(q, c, None),
                              gradcache=GradCacheConfig(chunk_size=chunk_size, max_padding=1.0),
                              query_lengths=[x.length for x in queries],
                              candidate_lengths=[x.length for x in candidates])
    return result, {name: p.grad.clone() for name, p in model.named_parameters()}, tau.log_tau.grad.clone()


@pytest.mark.parametrize("chunk_size", [1, 3])
def test_gradcache_with_matryoshka_equals_the_full_batch_gradient(chunk_size: int) -> None:
    plain, plain_grads, plain_tau = _step(0)
    cached, cached_grads, cached_tau = _step(chunk_size)
    assert cached.loss == pytest.approx(plain.loss, rel=1e-6)
    for name, reference in plain_grads.items():
        assert float((cached_grads[name] - reference).norm() / reference.norm()) <= 1e-4, name
    assert float(cached_tau) == pytest.approx(float(plain_tau), rel=1e-4)


@pytest.mark.parametrize("values, problem", [
    ({"matryoshka_dims": [64, 32]}, "strictly increasing"),
    ({"matryoshka_dims": []}, "non-empty"),
    ({"matryoshka_dims": [0, 8]}, "greater than 0"),
    ({"matryoshka_dims": [8, 16], "matryoshka_weights": [1.0]}, "one weight per"),
    ({"matryoshka_weights": [1.0]}, "one weight per"),
])
def test_recipe_keys_are_validated(values, problem) -> None:
    with pytest.raises(ValueError, match=problem):
        LossConfig.model_validate(values)


def test_dims_wider_than_the_model_are_refused_before_training() -> None:
    loss = LossConfig.model_validate({"matryoshka_dims": [8, 32]})
    with pytest.raises(ConfigError, match="loss.matryoshka_dims.: 32 exceeds"):
        matryoshka_for_model(_infonce, loss, WIDTH)


def test_embedding_config_records_the_dims(tmp_path) -> None:
    EmbeddingConfig(matryoshka_dims=[8, 16]).save(tmp_path)
    from vis_embed.model.embedding_config import read_embedding_config
    assert read_embedding_config(tmp_path)["matryoshka_dims"] == [8, 16]


def test_export_tells_vllm_the_matryoshka_dimensions(tiny_checkpoint, tmp_path) -> None:
    import json
    import shutil

    from vis_embed.model.files.export import export_sentence_transformers

    base = tmp_path / "base"
    shutil.copytree(tiny_checkpoint("qwen2-vl"), base)
    plain = json.loads((export_sentence_transformers(str(base), tmp_path / "plain") / "config.json").read_text())
    assert "matryoshka_dimensions" not in plain and "is_matryoshka" not in plain
    EmbeddingConfig(matryoshka_dims=[4, 8], query_instruction="", document_instruction="").save(base)
    out = export_sentence_transformers(str(base), tmp_path / "st")
    config = json.loads((out / "config.json").read_text())
    width = config.get("text_config", config).get("hidden_size") or config["hidden_size"]
    assert config["is_matryoshka"] is True and config["matryoshka_dimensions"] == [4, 8, width]
    assert json.loads((out / "embedding_config.json").read_text())["matryoshka_dims"] == [4, 8]


def test_the_matryoshka_recipe_is_the_tiny_recipe_plus_dims() -> None:
    from pathlib import Path

    from vis_embed.training.recipe import load_recipe, recipe_to_dict

    recipes = Path(__file__).resolve().parents[1] / "recipes"
    plain = recipe_to_dict(load_recipe(recipes / "tiny_cpu.yaml"))
    matryoshka = recipe_to_dict(load_recipe(recipes / "tiny_cpu_matryoshka.yaml"))
    assert matryoshka["loss"]["matryoshka_dims"] == [16, 32, 64] and plain["loss"]["matryoshka_dims"] is None
    for recipe in (plain, matryoshka):
        recipe["loss"].update(matryoshka_dims=None)
        for key in ("model", "data", "schedule", "output_dir"):
            recipe.pop(key)
    assert matryoshka == plain


def test_training_with_dims_records_them_in_final_and_refuses_too_wide_ones(tiny_checkpoint, tmp_path) -> None:
    import json

    from _training_fixtures import tiny_recipe, write_identity_dataset, write_schedule
    from vis_embed.training.recipe import load_recipe
    from vis_embed.training.trainer import Trainer

    data = write_identity_dataset(tmp_path / "data", identities=8)
    schedule = write_schedule(data, tmp_path / "schedule.parquet", steps=2, batch=4)
    model = tiny_checkpoint("qwen2-vl")
    raw = tiny_recipe(model, data, schedule, tmp_path / "run", max_steps=2, loss__matryoshka_dims=[16, 64])
    final = Trainer(load_recipe(raw=raw)).train()
    assert json.loads((final / "embedding_config.json").read_text())["matryoshka_dims"] == [16, 64]
    wide = tiny_recipe(model, data, schedule, tmp_path / "wide", max_steps=2, loss__matryoshka_dims=[16, 4096])
    with pytest.raises(ConfigError, match="loss.matryoshka_dims.: 4096 exceeds"):
        Trainer(load_recipe(raw=wide))


def test_a_recorded_non_positive_dim_names_the_file_and_field(tmp_path) -> None:
    import json

    from vis_embed.model.embedding_config import read_embedding_config

    (tmp_path / "embedding_config.json").write_text(json.dumps({"matryoshka_dims": [0, 8]}))
    with pytest.raises(ConfigError, match=r"embedding_config.json.*matryoshka_dims"):
        read_embedding_config(tmp_path)
