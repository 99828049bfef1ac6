"""False-negative diagnostics (training/losses/diagnostics.py) and the warm start (recipe init_adapter)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vis_embed.errors import ConfigError
from vis_embed.training.losses.diagnostics import DIAGNOSTIC_KEYS, false_negative_stats, own_image_matrix
from vis_embed.training.recipe import load_recipe
from vis_embed.training.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _training_fixtures import tiny_recipe, write_identity_dataset  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _embeddings_with_logits(scores: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and candidates whose dot products are ``scores`` (queries = identity rows)."""
    matrix = torch.tensor(scores, dtype=torch.float64)
    return torch.eye(matrix.shape[0], dtype=torch.float64), matrix.T.contiguous()


def test_hand_made_logits_give_the_formula() -> None:
    scores = [[2.0, 1.0, 0.0, 0.5],
              [0.0, 3.0, 1.0, 0.0],
              [1.0, 1.0, 1.0, 2.0],
              [0.0, 0.0, 0.0, 1.0]]
    queries, candidates = _embeddings_with_logits(scores)
    tau = 0.5
    identities = torch.tensor([7, 7, 3, -1])  # rows 0 and 1 share a label; -1 = unknown (never one)
    stats = false_negative_stats(queries, candidates, tau, identities)

    def denominator(row: int) -> float:
        return sum(math.exp(s / tau) for s in scores[row])

    share0 = math.exp(1.0 / tau) / denominator(0)  # query 0's false negative: candidate 1
    share1 = math.exp(0.0 / tau) / denominator(1)  # query 1's false negative: candidate 0
    assert stats["fn_share"] == pytest.approx((share0 + share1) / 4)
    assert stats["fn_query_fraction"] == pytest.approx(0.5)
    # logit of the false negative minus the positive's: (1 - 2) / tau and (0 - 3) / tau
    assert stats["fn_logit_gap"] == pytest.approx(((1 - 2) / tau + (0 - 3) / tau) / 2)


def test_several_false_negatives_extra_columns_and_a_learnable_tau() -> None:
    scores = [[1.0, 0.5, 0.2, 0.0, 0.3],
              [0.1, 1.0, 0.4, 0.0, 0.0],
              [0.3, 0.2, 1.0, 0.0, 0.9]]  # column 4: an explicit extra negative, never a false negative
    queries, _ = _embeddings_with_logits([row[:3] for row in scores])
    candidates = torch.tensor(scores, dtype=torch.float64).T.contiguous()
    tau = torch.tensor(0.1, requires_grad=True)
    stats = false_negative_stats(queries, candidates, tau, torch.tensor([1, 1, 1]))
    shares, gaps = [], []
    for i, row in enumerate(scores):
        total = sum(math.exp(s / 0.1) for s in row)
        negatives = [j for j in range(3) if j != i]
        shares.append(sum(math.exp(row[j] / 0.1) for j in negatives) / total)
        gaps.append(sum((row[j] - row[i]) / 0.1 for j in negatives) / len(negatives))
    assert stats["fn_share"] == pytest.approx(sum(shares) / 3)
    assert stats["fn_query_fraction"] == 1.0
    assert stats["fn_logit_gap"] == pytest.approx(sum(gaps) / 3)


def test_a_batch_without_false_negatives() -> None:
    queries, candidates = _embeddings_with_logits([[1.0, 0.0], [0.0, 1.0]])
    stats = false_negative_stats(queries, candidates, 0.07, torch.tensor([0, 1]))
    assert stats["fn_share"] == 0.0 and stats["fn_query_fraction"] == 0.0
    assert math.isnan(stats["fn_logit_gap"])


def test_own_image_share_is_the_part_of_the_false_negative_mass_that_is_the_querys_own_record() -> None:
    # the naive sampler's case (issue 38): slots 0, 1 and 2 hold one identity; slot 1's positive
    # is slot 0's query record r0 (its own photo under the candidate prompt), slot 2's is r5
    members = [("ds", "r0", "r1"), ("ds", "r3", "r0"), ("ds", "r4", "r5"), ("ds", "x", "y")]
    own = own_image_matrix([(d, q) for d, q, _ in members], [(d, p) for d, _, p in members])
    assert own.tolist() == [[False, True, False, False]] + [[False] * 4] * 3
    scores = [[1.0, 2.0, 0.5, 0.0],   # query 0: its own image (column 1) above its positive
              [0.3, 1.0, 0.2, 0.1],
              [0.1, 0.4, 1.0, 0.0],
              [0.0, 0.0, 0.0, 1.0]]
    queries, candidates = _embeddings_with_logits(scores)
    tau = 0.5
    stats = false_negative_stats(queries, candidates, tau, torch.tensor([1, 1, 1, 2]), own)
    p = [[math.exp(s / tau) / sum(math.exp(x / tau) for x in row) for s in row] for row in scores]
    false_negatives = [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    mass = sum(p[i][j] for i, j in false_negatives)
    assert stats["fn_own_image_share"] == pytest.approx(p[0][1] / mass)
    # the gap without the own image: query 0 keeps column 2 only, queries 1 and 2 both theirs
    others = {0: [2], 1: [0, 2], 2: [0, 1]}
    expected = sum(sum((scores[i][j] - scores[i][i]) / tau for j in js) / len(js) for i, js in others.items()) / 3
    assert stats["fn_logit_gap_other"] == pytest.approx(expected)
    assert stats["fn_logit_gap"] > stats["fn_logit_gap_other"]  # the own image sat above the positive


def test_own_image_share_without_records_or_false_negatives_is_nan() -> None:
    queries, candidates = _embeddings_with_logits([[1.0, 0.5], [0.5, 1.0]])
    unknown = false_negative_stats(queries, candidates, 0.1, torch.tensor([3, 3]))
    assert math.isnan(unknown["fn_own_image_share"]) and math.isnan(unknown["fn_logit_gap_other"])
    own = own_image_matrix([("d", "a"), ("d", "b")], [("d", "b"), ("d", "a")])  # each the other's own image
    assert false_negative_stats(queries, candidates, 0.1, torch.tensor([3, 3]), own)["fn_own_image_share"] == 1.0
    none = false_negative_stats(queries, candidates, 0.1, torch.tensor([3, 4]), own)
    assert math.isnan(none["fn_own_image_share"])  # different labels: no false-negative mass at all


# ------------------------------------------------------------------ in training
# the recipe settings of naive_setup's schedule (a recipe must match its schedule's)
NAIVE = {"global_batch_size": 6, "sampling__strategy": "naive"}


@pytest.fixture(scope="module")
def naive_setup(tiny_checkpoint, tmp_path_factory):
    """A naive schedule over few identities: batches repeat identities (false negatives)."""
    from vis_embed.data import load_train_config
    from vis_embed.training.schedule_source import write_recipe_schedule

    root = tmp_path_factory.mktemp("fn-data")
    data = write_identity_dataset(root, identities=4, images_per_identity=4)
    schedule = write_recipe_schedule(load_train_config(data), root / "naive.parquet", steps=4, global_batch_size=6,
                                     seed=0, sampling={"strategy": "naive", "hard_negatives": 0}, show_progress=False)
    return tiny_checkpoint("qwen2-vl"), data, schedule


def _schedule_fn_fraction(schedule: Path, data: Path, step: int) -> float:
    """Share of a step's members with another member of the same identity, from the files."""
    import pyarrow.parquet as pq

    rows = json.loads("[" + ",".join((data.parent / "rec.jsonl").read_text().splitlines()) + "]")
    identity = {row["id"]: row["identity"] for row in rows}
    table = pq.read_table(schedule).to_pydict()
    members = [identity[p] for s, p in zip(table["step"], table["positive_id"]) if s == step]
    return sum(members.count(m) > 1 for m in members) / len(members)


def _train(setup, out: Path, **overrides) -> list[dict]:
    model, data, schedule = setup
    raw = tiny_recipe(model, data, schedule, out, max_steps=2, **NAIVE, **overrides)
    Trainer(load_recipe(raw=raw)).train()
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


def test_training_logs_the_diagnostics_mask_on_and_off(naive_setup, tmp_path) -> None:
    _model, data, schedule = naive_setup
    masked = _train(naive_setup, tmp_path / "masked")
    unmasked = _train(naive_setup, tmp_path / "unmasked", loss__identity_mask=False)
    chunked = _train(naive_setup, tmp_path / "chunked", loss__identity_mask=False, gradcache__chunk_size=2)
    for log in (masked, unmasked, chunked):
        assert len(log) == 2 and all(set(DIAGNOSTIC_KEYS) <= set(record) for record in log)
    for step in range(2):
        fraction = _schedule_fn_fraction(schedule, data, step)
        assert fraction > 0  # the fixture's batches do repeat identities
        assert all(log[step]["fn_query_fraction"] == pytest.approx(fraction) for log in (masked, unmasked, chunked))
    assert 0 < unmasked[0]["fn_share"] < 1 and unmasked[0]["fn_logit_gap"] is not None
    # step 0: same initialisation, same batch -> the same share whatever the mask (it is measured
    # on the unmasked denominator) and whatever the GradCache chunking
    assert masked[0]["fn_share"] == pytest.approx(unmasked[0]["fn_share"], rel=1e-5)
    assert chunked[0]["fn_share"] == pytest.approx(unmasked[0]["fn_share"], rel=1e-4)


def _lora_state(trainer: Trainer) -> dict[str, torch.Tensor]:
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(trainer.model.backbone).items()}


def test_warm_start_begins_from_the_adapter_with_a_fresh_optimiser(naive_setup, tmp_path) -> None:
    model, data, schedule = naive_setup
    first = tmp_path / "first"
    _train(naive_setup, first)
    saved = load_file(str(first / "final" / "adapter_model.safetensors"))
    raw = tiny_recipe(model, data, schedule, tmp_path / "warm", max_steps=2, **NAIVE,
                      init_adapter=str(first / "final"))
    warm = Trainer(load_recipe(raw=raw))
    state = _lora_state(warm)
    assert set(state) == set(saved)
    assert all(torch.equal(state[name], saved[name]) for name in saved)
    cold = _lora_state(Trainer(load_recipe(raw=tiny_recipe(model, data, schedule, tmp_path / "cold", max_steps=2,
                                                           **NAIVE))))
    assert any(not torch.equal(cold[name], saved[name]) for name in saved)  # not the fresh init anyway
    warm.train()
    log = [json.loads(line) for line in (tmp_path / "warm" / "train_log.jsonl").read_text().splitlines()]
    first_log = [json.loads(line) for line in (first / "train_log.jsonl").read_text().splitlines()]
    assert log[0]["lr"] == first_log[0]["lr"]  # the LR schedule starts again (warm-up step 0)
    assert log[0]["loss"] < first_log[0]["loss"]  # same batch, trained weights: lower loss


def test_warm_start_refuses_an_adapter_that_does_not_fit(naive_setup, tmp_path) -> None:
    model, data, schedule = naive_setup
    first = tmp_path / "first"
    _train(naive_setup, first)
    for overrides, message in (({"init_adapter": str(tmp_path / "nowhere")}, "not a directory"),
                               ({"init_adapter": str(first / "final"), "lora__r": 8}, "does not fit"),
                               ({"init_adapter": str(first / "final"), "lora__vision": True}, "lacks")):
        raw = tiny_recipe(model, data, schedule, tmp_path / "bad", max_steps=2, **NAIVE, **overrides)
        with pytest.raises(ConfigError, match=message):
            Trainer(load_recipe(raw=raw), overwrite=True)
