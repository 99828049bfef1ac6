"""GradCache equals plain full-batch back-propagation; RNG replay; chunking.

The stand-in encoder (tests/_training_standin.py) makes these exact checks run in
milliseconds; test_gradcache_tiny.py repeats the central ones on the tiny Qwen-VL checkpoint.
"""

from __future__ import annotations

import pytest
import torch

from _training_standin import StandInEncoder, random_members
from vis_embed.training.backends import TorchBackend
from vis_embed.training.recipe import GradCacheConfig, OptimizerConfig
from vis_embed.training.gradcache import RandomState, chunk_order, contrastive_step, padded_fraction
from vis_embed.training.losses import Temperature, info_nce_loss
from vis_embed.training.lr_schedule import lr_lambda

BATCH = 7

pytestmark = pytest.mark.usefixtures("one_torch_thread")



class CountingBackend(TorchBackend):
    """TorchBackend that records how many members each forward pass encodes, and with or without
    grad, and each accumulation micro-step's ``is_last`` (where DDP / DeepSpeed reduce gradients)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.forwards: list[tuple[int, bool]] = []
        self.micro_steps: list[bool] = []

    def forward(self, batch):
        self.forwards.append((len(batch["input_ids"]), torch.is_grad_enabled()))
        return super().forward(batch)

    def accumulate(self, is_last: bool):
        self.micro_steps.append(is_last)
        return super().accumulate(is_last)


def _one_step(chunk_size: int, dropout: float = 0.0, check_replay: bool = False, forwards: list | None = None,
              micro_steps: list | None = None):
    torch.manual_seed(0)
    model = StandInEncoder(dropout=dropout)
    tau = Temperature(0.05)
    backend = CountingBackend(model, optimizer=OptimizerConfig(lr=1e-3, max_grad_norm=0.0),
                              lr_schedule=lr_lambda(0, 10))
    if forwards is not None:
        backend.forwards = forwards
    if micro_steps is not None:
        backend.micro_steps = micro_steps
    queries, candidates = random_members(BATCH, 1), random_members(BATCH, 2)
    result = contrastive_step(backend, model.collate, queries, candidates,
                              lambda q, c: info_nce_loss(q, c, tau()),
                              gradcache=GradCacheConfig(chunk_size=chunk_size, max_padding=1.0),
                              query_lengths=[x.length for x in queries],
                              candidate_lengths=[x.length for x in candidates], check_replay=check_replay)
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    return result, grads, tau.log_tau.grad.clone()


@pytest.mark.parametrize("chunk_size", [1, 3, BATCH])
def test_gradcache_gradients_equal_plain_full_batch(chunk_size: int) -> None:
    plain, plain_grads, plain_tau = _one_step(0)
    cached, cached_grads, cached_tau = _one_step(chunk_size)
    assert cached.loss == pytest.approx(plain.loss, rel=1e-6)
    for name, reference in plain_grads.items():
        assert float((cached_grads[name] - reference).norm() / reference.norm()) <= 1e-4, name
    assert float(cached_tau) == pytest.approx(float(plain_tau), rel=1e-4)


@pytest.mark.parametrize("chunk_size", [BATCH, 2 * BATCH, 4 * BATCH])
def test_a_step_whose_sides_fit_in_one_chunk_is_one_plain_forward(chunk_size: int) -> None:
    plain, plain_grads, plain_tau = _one_step(0)
    forwards: list = []
    cached, cached_grads, cached_tau = _one_step(chunk_size, forwards=forwards)
    assert forwards == [(2 * BATCH, True)]  # both sides in one forward with grad: no second pass
    assert cached.loss == plain.loss
    for name, reference in plain_grads.items():
        assert torch.equal(cached_grads[name], reference), name
    assert torch.equal(cached_tau, plain_tau)


@pytest.mark.parametrize("chunk_size", [1, 3, BATCH - 1])
def test_the_last_chunk_keeps_its_graph_and_is_not_replayed(chunk_size: int) -> None:
    forwards: list = []
    _one_step(chunk_size, forwards=forwards)
    n_chunks = 2 * -(-BATCH // chunk_size)  # per side: ceil(BATCH / chunk_size)
    pass_1, kept = forwards[:n_chunks - 1], forwards[n_chunks - 1]
    assert not any(grad for _size, grad in pass_1) and sum(size for size, _ in pass_1) + kept[0] == 2 * BATCH
    assert kept[1]  # the last chunk of pass 1 runs with grad...
    assert len(forwards) == 2 * n_chunks - 1  # ...and only the other chunks are encoded again
    assert all(grad for _size, grad in forwards[n_chunks:])
    assert [size for size, _ in forwards[n_chunks:]] == [size for size, _ in forwards[:n_chunks - 1]]


def test_replay_reproduces_the_no_grad_embeddings_with_dropout_on() -> None:
    result, _grads, _tau = _one_step(3, dropout=0.3, check_replay=True)
    assert result.replay_max_abs_diff == 0.0


@pytest.mark.parametrize("check_replay", [False, True])
def test_gradients_are_reduced_after_the_last_chunks_backward_only(check_replay: bool) -> None:
    # DDP's no_sync / DeepSpeed's boundary: every micro-step but the last accumulates locally.
    # check_replay once rebound the chunk list's name to a tensor, moving the boundary to the
    # second-last chunk: ranks' gradients differed (one process never sees it).
    micro_steps: list = []
    _one_step(3, dropout=0.3, check_replay=check_replay, micro_steps=micro_steps)
    n_chunks = 2 * -(-BATCH // 3)
    assert micro_steps == [False] * (n_chunks - 1) + [True]  # the kept chunk's, then each replay's


def test_without_replay_dropout_would_change_the_embeddings() -> None:
    # Negative control for the test above: two forwards in train mode differ unless the RNG is replayed.
    model = StandInEncoder(dropout=0.3)
    batch = model.collate(random_members(4, 3))
    state = RandomState()
    first = model(**batch)
    second = model(**batch)
    state.restore()
    replayed = model(**batch)
    assert not torch.equal(first, second)
    assert torch.equal(first, replayed)


def test_chunks_group_members_by_length() -> None:
    lengths = [3, 9, 1, 9, 4, 2, 8]
    chunks = chunk_order(lengths, 3)
    assert sorted(i for chunk in chunks for i in chunk) == list(range(7))
    assert [[lengths[i] for i in chunk] for chunk in chunks] == [[9, 9, 8], [4, 3, 2], [1]]
    assert chunk_order(lengths, 0) == [sorted(range(7), key=lambda i: -lengths[i])]


def test_each_chunk_is_padded_only_to_its_own_longest() -> None:
    members = [[1] * n for n in (9, 9, 8, 4, 3, 2)]
    collate = StandInEncoder.collate
    chunks = [collate([members[i] for i in chunk]) for chunk in chunk_order([len(m) for m in members], 3)]
    assert [c["input_ids"].shape[1] for c in chunks] == [9, 4]
    assert max(padded_fraction(c) for c in chunks) <= 0.25
    assert padded_fraction(collate(members)) > 0.3  # one padded batch would waste much more


def test_mismatched_sides_are_refused() -> None:
    model = StandInEncoder()
    backend = TorchBackend(model, optimizer=OptimizerConfig(lr=1e-3, max_grad_norm=0.0), lr_schedule=lr_lambda(0, 10))
    with pytest.raises(ValueError, match="3 queries but 2 candidates"):
        contrastive_step(backend, model.collate, [[1]] * 3, [[1]] * 2, lambda q, c: q.sum(),
                         gradcache=GradCacheConfig(chunk_size=1))


def test_padding_budget_closes_chunks_early_but_not_below_a_quarter() -> None:
    lengths = [100, 98, 97, 60, 59, 58, 57, 10, 10, 10]
    chunks = chunk_order(lengths, 4, max_padding=0.1)
    assert [[lengths[i] for i in chunk] for chunk in chunks] == [[100, 98, 97], [60, 59, 58, 57], [10, 10, 10]]
    for chunk in chunks:
        width = lengths[chunk[0]]
        assert 1 - sum(lengths[i] for i in chunk) / (width * len(chunk)) <= 0.1
    # a minimum of chunk_size // 4 members per chunk even when every length differs a lot
    spread = [2 ** k for k in range(8, 0, -1)]
    assert all(len(chunk) >= 2 for chunk in chunk_order(spread, 8, max_padding=0.0)[:-1])
