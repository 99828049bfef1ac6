"""GradCache on the tiny Qwen-VL: gradients equal plain full-batch training; RNG replay with LoRA dropout."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from vis_embed.training.backends import TorchBackend
from vis_embed.training.recipe import GradCacheConfig, OptimizerConfig
from vis_embed.training.gradcache import contrastive_step
from vis_embed.training.losses import Temperature, info_nce_loss
from vis_embed.training.lr_schedule import lr_lambda

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _training_fixtures import write_identity_dataset  # noqa: E402

BATCH = 6

pytestmark = pytest.mark.usefixtures("one_torch_thread")



@pytest.fixture(scope="module")
def members(tiny_checkpoint, tmp_path_factory):
    from vis_embed.data import load_train_config

    data = load_train_config(write_identity_dataset(tmp_path_factory.mktemp("gc-data"), identities=BATCH))
    dataset = data.datasets[0]
    records = {rec["identity"]: [] for rec in dataset.records}
    for rec in dataset.records:
        records[rec["identity"]].append(rec)
    pairs = list(records.values())[:BATCH]
    queries = [dataset.query_item(group[0]) for group in pairs]
    # Texts of different lengths so chunks really are padded differently.
    for index, item in enumerate(queries):
        item["text"] = " ".join(["red square"] * (1 + 3 * (index % 3)))
    candidates = [dataset.positive_item(group[1]) for group in pairs]
    return tiny_checkpoint("qwen2-vl"), queries, candidates


def _step(members, chunk_size: int, dropout: float = 0.0, check_replay: bool = False):
    from vis_embed.model.network.embedding_model import EmbeddingModel

    path, query_items, candidate_items = members
    torch.manual_seed(0)
    model = EmbeddingModel.from_pretrained(path, device="cpu", dtype=torch.float32)
    model.add_lora(r=4, alpha=8, dropout=dropout)
    model.train()
    tau = Temperature(0.05)
    backend = TorchBackend(model, optimizer=OptimizerConfig(lr=1e-3, max_grad_norm=0.0), lr_schedule=lr_lambda(0, 10))
    queries = model.prepare(query_items, instruction="Find the same object.")
    candidates = model.prepare(candidate_items, instruction="Represent the given image.")
    torch.manual_seed(1)
    result = contrastive_step(backend, model.collate, queries, candidates, lambda q, c: info_nce_loss(q, c, tau()),
                              gradcache=GradCacheConfig(chunk_size=chunk_size, max_padding=1.0),
                              query_lengths=[p.length for p in queries],
                              candidate_lengths=[p.length for p in candidates], check_replay=check_replay)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}
    return result, grads, tau.log_tau.grad.clone()


@pytest.fixture(scope="module")
def plain(members):
    return _step(members, 0)


@pytest.mark.parametrize("chunk_size", [1, 3, BATCH])
def test_gradcache_gradients_equal_plain_on_tiny_qwen(members, plain, chunk_size: int) -> None:
    plain_result, plain_grads, plain_tau = plain
    result, grads, tau_grad = _step(members, chunk_size)
    assert result.loss == pytest.approx(plain_result.loss, rel=1e-5)
    assert set(grads) == set(plain_grads) and len(grads) > 0
    nonzero = [n for n, g in plain_grads.items() if g.norm() > 0]
    assert len(nonzero) >= len(plain_grads) // 2  # LoRA B starts at 0: only B gets a gradient at step 0
    for name in nonzero:
        reference = plain_grads[name]
        assert float((grads[name] - reference).norm() / reference.norm()) <= 1e-4, name
    assert float(tau_grad) == pytest.approx(float(plain_tau), rel=1e-4)


def test_replay_reproduces_embeddings_with_lora_dropout(members) -> None:
    result, _grads, _tau = _step(members, 2, dropout=0.3, check_replay=True)
    assert result.replay_max_abs_diff == 0.0
