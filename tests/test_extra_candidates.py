"""A pairs row's explicit negatives (``negatives``, e.g. MMEB-train's unlinked ``neg_*``) reach the
loss: the trainer encodes them after the rank's positives, the loss gets them as extra columns
in every query's denominator, with any number of ranks and with GradCache."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from vis_embed.training.extra_candidates import column_order
from vis_embed.training.losses.infonce import info_nce_loss

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _training_fixtures import tiny_recipe  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_column_order_puts_positives_first_then_the_real_extras() -> None:
    assert column_order([0, 0, 0, 0], 2) == (0, None)
    padded, order = column_order([0, 2, 0, 1], 1)
    assert padded == 3 and order.tolist() == [0, 1, 2, 3, 4, 5, 6]
    # two ranks: rank 0 has 1 extra, rank 1 none -> both encode 1; rank 1's is padding, left out
    padded, order = column_order([1, 0, 0, 0], 2)
    assert padded == 1 and order.tolist() == [0, 1, 3, 4, 2]
    padded, order = column_order([0, 1, 2, 1], 2)  # rank 0: 1 (+1 padding), rank 1: 3
    assert padded == 3 and order.tolist() == [0, 1, 5, 6, 2, 7, 8, 9]
    with pytest.raises(ValueError, match="cannot be split"):
        column_order([0, 0, 0], 2)


def test_infonce_extra_columns_are_in_every_denominator_and_never_masked() -> None:
    torch.manual_seed(0)
    queries = F.normalize(torch.randn(4, 8), dim=1)
    candidates = F.normalize(torch.randn(6, 8), dim=1)  # 4 positives + 2 extras
    identities = torch.tensor([0, 1, 0, -1])
    tau = 0.1
    scores = queries @ candidates.T / tau
    expected = []
    for i in range(4):
        keep = [j for j in range(6) if j >= 4 or j == i or identities[j] < 0 or identities[j] != identities[i]
                or identities[i] < 0]
        expected.append(torch.logsumexp(scores[i, keep], 0) - scores[i, i])
    got = info_nce_loss(queries, candidates, tau, identities)
    assert got.item() == pytest.approx(torch.stack(expected).mean().item(), abs=1e-5)
    # extras only add to the denominators: the loss without them is lower
    assert info_nce_loss(queries, candidates[:4], tau, identities).item() < got.item()
    with pytest.raises(ValueError, match="one candidate per query"):
        info_nce_loss(queries, candidates[:3], tau)


def _pairs_data(root: Path, with_negatives: bool) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(8):
        row = {"id": f"p{i}", "query": {"text": f"find the {i} red thing"}, "positive": {"text": f"a red thing {i}"}}
        if with_negatives and i % 2 == 0:
            row["negatives"] = [{"text": f"a blue thing {i}"}, {"text": f"a green thing {i}"}]
        rows.append(row)
    (root / "pairs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (root / "train.yaml").write_text(json.dumps({"datasets": [
        {"name": "pairs", "kind": "pairs", "path": "pairs.jsonl", "candidate_instruction": "Represent it."}]}))
    return root / "train.yaml"


def _trainer(tiny_checkpoint, root: Path, with_negatives: bool, chunk_size: int = 0):
    from vis_embed.data import load_train_config
    from vis_embed.training.recipe import load_recipe
    from vis_embed.training.schedule_source import write_recipe_schedule
    from vis_embed.training.trainer import Trainer

    data = _pairs_data(root / "data", with_negatives)
    schedule = write_recipe_schedule(load_train_config(data), root / "schedule.parquet", steps=2, global_batch_size=4,
                                     seed=0, sampling={"interleave_batch_size": 4, "hard_negatives": 0},
                                     show_progress=False)
    raw = tiny_recipe(tiny_checkpoint("qwen2-vl"), data, schedule, root / "run", max_steps=2,
                      gradcache__chunk_size=chunk_size)
    return Trainer(load_recipe(raw=raw))


def test_the_trainer_adds_a_rows_negatives_to_the_loss(tiny_checkpoint, tmp_path: Path) -> None:
    trainer = _trainer(tiny_checkpoint, tmp_path / "with", with_negatives=True)
    batch = next(trainer.schedule.steps())
    members = batch.members()
    owners = [m for m in members if int(m.query_id[1:]) % 2 == 0]
    prepared = trainer.prepare_step(batch)
    assert len(prepared.queries) == 4 and len(prepared.candidates) == 4 + 2 * len(owners)
    assert prepared.candidate_order.tolist() == list(range(4 + 2 * len(owners)))
    if not owners:
        pytest.skip("the first batch holds no row with negatives")
    with_loss = trainer.train_step(prepared)[0].loss
    # the same step without the rows' negatives: same members, fewer columns, lower loss
    plain = _trainer(tiny_checkpoint, tmp_path / "without", with_negatives=False)
    plain_prepared = plain.prepare_step(next(plain.schedule.steps()))
    assert plain_prepared.candidate_order is None and len(plain_prepared.candidates) == 4
    assert plain.train_step(plain_prepared)[0].loss < with_loss
    # GradCache over chunks gives the same loss with the extra columns
    chunked = _trainer(tiny_checkpoint, tmp_path / "chunked", with_negatives=True, chunk_size=2)
    assert chunked.train_step(chunked.prepare_step(next(chunked.schedule.steps())))[0].loss == \
        pytest.approx(with_loss, rel=1e-4)
