"""The naive baseline schedule (ablation): one dataset per batch, no identity constraint."""

from __future__ import annotations

import numpy as np
import pytest

from vis_embed.errors import ConfigError
from vis_embed.sampling.naive import plan_naive_schedule
from vis_embed.sampling.settings import ScheduleSettings
from vis_embed.sampling.types import SubDataset


def _datasets() -> list[SubDataset]:
    rng = np.random.default_rng(0)
    identities = rng.integers(0, 20, size=200)  # 20 identities, ~10 rows each: collisions are likely
    return [
        SubDataset(name="people", kind="identity", ids=[f"p{i}" for i in range(200)], identities=identities),
        SubDataset(name="captions", kind="pairs", ids=[f"c{i}" for i in range(100)]),
    ]


def test_naive_batches_come_from_one_dataset_with_valid_positives() -> None:
    datasets = _datasets()
    settings = ScheduleSettings(steps=40, global_batch_size=32, interleave_batch_size=16,
                                hard_negatives=0, seed=3, strategy="naive")
    schedule = plan_naive_schedule(datasets, settings)
    batch = settings.global_batch_size
    identities = datasets[0].identities
    for step in range(settings.steps):
        rows = slice(step * batch, (step + 1) * batch)
        assert len(set(schedule.dataset[rows])) == 1
        query, positive = schedule.query_row[rows], schedule.positive_row[rows]
        assert len(set(query)) == batch  # rows are drawn without replacement within a batch
        if schedule.dataset[rows][0] == 0:
            assert (query != positive).all()
            assert (identities[query] == identities[positive]).all()
        else:
            assert (query == positive).all()
    assert set(np.unique(schedule.dataset)) == {0, 1}
    # the baseline does let identities repeat inside a batch (what identity-aware sampling forbids)
    assert schedule.report["repeated_identity_members"] > 0


def test_naive_is_deterministic_and_refuses_hard_negatives() -> None:
    settings = ScheduleSettings(steps=5, global_batch_size=32, interleave_batch_size=32,
                                hard_negatives=0, seed=1, strategy="naive")
    first = plan_naive_schedule(_datasets(), settings)
    second = plan_naive_schedule(_datasets(), settings)
    assert (first.query_row == second.query_row).all() and (first.positive_row == second.positive_row).all()
    assert settings.to_json()["strategy"] == "naive"
    with pytest.raises(ConfigError, match="hard_negatives"):
        plan_naive_schedule(_datasets(), ScheduleSettings(steps=5, global_batch_size=32, interleave_batch_size=32,
                                                          hard_negatives=2, strategy="naive"))
