"""What a backend hands the save path (``trainable_state_dict``): copies on the main process only,
float32 for adapters (as always) and the model's own dtype for full fine-tuning (``keep_dtype``:
a 7B model upcast to float32 would double what rank 0 holds).  The ZeRO-3 gather, one module at a
time, is checked on two ranks in tests/test_distributed_training.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vis_embed.training.backends import TorchBackend
from vis_embed.training.recipe import OptimizerConfig


def _backend() -> tuple[nn.Module, TorchBackend]:
    module = nn.Linear(4, 3).to(torch.bfloat16)
    module.bias.requires_grad_(False)  # frozen: not part of the trainable state
    return module, TorchBackend(module, optimizer=OptimizerConfig(), lr_schedule=lambda step: 1.0)


def test_full_weights_keep_the_models_dtype_adapters_stay_float32() -> None:
    module, backend = _backend()
    kept = backend.trainable_state_dict(keep_dtype=True)
    assert list(kept) == ["weight"]
    assert kept["weight"].dtype == torch.bfloat16 and torch.equal(kept["weight"], module.weight.detach())
    assert kept["weight"].data_ptr() != module.weight.data_ptr()  # a copy, not the live parameter
    upcast = backend.trainable_state_dict()
    assert upcast["weight"].dtype == torch.float32 and torch.equal(upcast["weight"], module.weight.detach().float())


def test_other_ranks_hold_no_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    _, backend = _backend()
    monkeypatch.setenv("RANK", "1")  # not the main process (no process group: the rank is read from RANK)
    assert backend.trainable_state_dict(keep_dtype=True) == {}
    assert backend.trainable_state_dict() == {}
