"""The dense sampling ablation's regime (docs/ablation_dense.md): on `small-dense` training data a
naive interleaved batch repeats identities often, the identity-aware one never."""

from __future__ import annotations

from _eval_scripts import load_eval_script

import dataclasses
from pathlib import Path

import pytest

from vis_embed.prep.synth import SIZES, generate
from vis_embed.data import load_train_config
from vis_embed.sampling import build_schedule
from vis_embed.sampling.schedule_io import read_schedule_info

STEPS, BATCH, SLOT = 40, 64, 16  # the ablation's layout: 4 sub-datasets x 16 per batch


def _table_module():
    return load_eval_script("ablation_table")


@pytest.fixture(scope="module")
def dense_train_yaml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # the real small-dense plan; 16 px images only to render fast (the plan does not depend on them)
    size = dataclasses.replace(SIZES["small-dense"], image_size=16)
    return generate(tmp_path_factory.mktemp("dense") / "synth", seed=0, size=size, workers=1) / "train.yaml"


def test_naive_interleaved_batches_repeat_identities_for_a_fifth_of_members(dense_train_yaml: Path,
                                                                           tmp_path: Path) -> None:
    out = tmp_path / "naive.parquet"
    schedule = build_schedule(dense_train_yaml, out, steps=STEPS, global_batch_size=BATCH,
                              interleave_batch_size=SLOT, hard_negatives=0, strategy="naive", seed=0)
    # interleaved: every slot is one sub-dataset, and the 4 slots of a batch are 4 different ones
    per_slot = schedule.dataset.reshape(STEPS, BATCH // SLOT, SLOT)
    assert (per_slot == per_slot[:, :, :1]).all()
    assert all(len(set(step[:, 0].tolist())) == BATCH // SLOT for step in per_slot)
    report = read_schedule_info(out).report
    assert report["repeated_identity_fraction"] >= 0.20
    # the table recomputes the rate from the schedule file and the data, independently
    rate = _table_module().identity_repeat_rate(out, load_train_config(dense_train_yaml))
    assert rate == pytest.approx(report["repeated_identity_fraction"])


def test_identity_aware_batches_on_the_same_data_never_repeat(dense_train_yaml: Path, tmp_path: Path) -> None:
    out = tmp_path / "identity.parquet"
    build_schedule(dense_train_yaml, out, steps=STEPS, global_batch_size=BATCH, interleave_batch_size=SLOT,
                   hard_negatives=3, seed=0)
    data = load_train_config(dense_train_yaml)
    assert _table_module().identity_repeat_rate(out, data) == 0.0
    # the designated hard negatives are placed: every anchor gets its 3 family members
    for entry in read_schedule_info(out).report["datasets"]:
        if entry["anchors"]:
            assert entry["hard_negatives"]["mean_per_anchor_with_usable"] == pytest.approx(3.0)
