"""Schedule file: Parquet contract, streaming from a step, sharding, fingerprints, CLI with the real loader."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vis_embed.cli import main
from vis_embed.errors import ConfigError, DataError, FingerprintMismatchError
from vis_embed.sampling import (
    COLUMNS,
    ScheduleSettings,
    SubDataset,
    iter_batches,
    plan_schedule,
    read_schedule_info,
    write_schedule,
)
from vis_embed.sampling.schedule_io import META_SCHEDULE


@pytest.fixture(scope="module")
def schedule_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    labels = rng.permutation(np.repeat(np.arange(40), 3))
    datasets = [SubDataset("ids", "identity", [f"r{i}" for i in range(120)], labels),
                SubDataset("pairs", "pairs", [f"q{i}" for i in range(50)])]
    settings = ScheduleSettings(steps=23, global_batch_size=16, interleave_batch_size=8, hard_negatives=0, seed=1)
    path = tmp_path_factory.mktemp("sched") / "s.parquet"
    # several row groups of 4 steps, so that reading from a step skips some
    write_schedule(plan_schedule(datasets, settings), path, data_fingerprint="abc", steps_per_row_group=4)
    return path


def test_file_has_the_documented_columns_and_metadata(schedule_file: Path) -> None:
    table = pq.read_table(schedule_file)
    assert tuple(table.column_names) == COLUMNS
    assert table.num_rows == 23 * 16
    steps = table.column("step").to_numpy()
    assert (np.bincount(steps) == 16).all()
    assert set(table.column("role").to_pylist()) == {"anchor"}
    info = read_schedule_info(schedule_file)
    assert info.data_fingerprint == "abc" and len(info.args_fingerprint) == 64
    assert info.steps == 23 and info.datasets == ["ids", "pairs"]
    assert pq.ParquetFile(schedule_file).metadata.num_row_groups == 6


def test_reading_from_step_s_equals_the_tail_of_a_full_read(schedule_file: Path) -> None:
    full = list(iter_batches(schedule_file, data_fingerprint="abc"))
    assert [b.step for b in full] == list(range(23))
    for start in (0, 3, 4, 9, 22, 23):
        assert list(iter_batches(schedule_file, data_fingerprint="abc", start_step=start)) == full[start:]


@pytest.mark.parametrize("world_size", [1, 2, 4, 8, 16])
def test_sharded_union_is_the_global_batch(schedule_file: Path, world_size: int) -> None:
    full = list(iter_batches(schedule_file, data_fingerprint="abc"))
    shards = [list(iter_batches(schedule_file, data_fingerprint="abc", rank=r, world_size=world_size))
              for r in range(world_size)]
    for step, batch in enumerate(full):
        parts = [shard[step] for shard in shards]
        assert sum((p.query_id for p in parts), []) == batch.query_id
        for part in parts:  # whole slots, or a contiguous part of one slot
            assert len(set(part.slot)) == 1 or len(part) % 8 == 0


def test_rank_layout_that_splits_slots_unevenly_is_refused(schedule_file: Path) -> None:
    with pytest.raises(ConfigError):
        next(iter_batches(schedule_file, data_fingerprint="abc", rank=0, world_size=3))


def test_changed_data_is_refused(schedule_file: Path) -> None:
    with pytest.raises(FingerprintMismatchError):
        next(iter_batches(schedule_file, data_fingerprint="other"))


def _edited(table: "pa.Table", name: str, row: int, value: object) -> "pa.Table":
    column = table.column(name).to_pylist()
    column[row] = value
    return table.set_column(table.schema.get_field_index(name), name,
                            pa.array(column, type=table.schema.field(name).type))


# a schedule edited (or damaged) after it was written, its metadata kept: (edit, row, field)
EDITS = {
    "role spelled wrong": (lambda t: _edited(t, "role", 37, "negative"), 38, "role"),
    "slot starting with a hard negative": (lambda t: _edited(t, "role", 40, "hard_negative"), 41, "role"),
    "slot out of the layout": (lambda t: _edited(t, "slot", 37, 5), 38, "slot"),
    "row of another step": (lambda t: _edited(t, "step", 37, 9), 38, "step"),
    "unknown dataset": (lambda t: _edited(t, "dataset", 37, "idz"), 38, "dataset"),
    "a slot mixing datasets": (lambda t: _edited(t, "dataset", 34, "pairs" if t.column("dataset")[34].as_py() == "ids"
                                                 else "ids"), 35, "dataset"),
    "empty query id": (lambda t: _edited(t, "query_id", 37, None), 38, "query_id"),
}


@pytest.mark.parametrize("edit", EDITS, ids=list(EDITS))
def test_an_edited_schedule_is_refused_naming_row_and_field(schedule_file: Path, tmp_path: Path, edit: str) -> None:
    change, row, field = EDITS[edit]
    table = pq.read_table(schedule_file)
    path = tmp_path / "edited.parquet"
    pq.write_table(change(table).replace_schema_metadata(table.schema.metadata), path, row_group_size=4 * 16)
    with pytest.raises(DataError) as caught:
        next(iter_batches(path, data_fingerprint="abc"))  # before its first step trains
    assert (caught.value.path, caught.value.line, caught.value.field) == (str(path), row, field)


def test_a_schedule_missing_rows_is_refused_before_its_first_step(schedule_file: Path, tmp_path: Path) -> None:
    table = pq.read_table(schedule_file)
    path = tmp_path / "short.parquet"
    pq.write_table(table.slice(0, table.num_rows - 16), path, row_group_size=4 * 16)  # the last step dropped
    with pytest.raises(DataError, match="352 rows, expected 23 x 16"):
        next(iter_batches(path, data_fingerprint="abc"))


def test_damaged_schedule_metadata_is_a_data_error(schedule_file: Path, tmp_path: Path) -> None:
    table = pq.read_table(schedule_file)
    for damaged in (b"{not json", json.dumps({"format_version": 1}).encode(), b"[1]"):
        metadata = {**table.schema.metadata, META_SCHEDULE.encode(): damaged}
        path = tmp_path / "damaged.parquet"
        pq.write_table(table.replace_schema_metadata(metadata), path)
        with pytest.raises(DataError, match="damaged schedule metadata"):
            read_schedule_info(path)


def _write_config(root: Path) -> Path:
    rows = [{"id": f"r{i}", "image": "img.png", "identity": f"p{i % 12}"} for i in range(36)]
    (root / "img.png").write_bytes(b"")
    (root / "rec.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pairs = [{"id": f"q{i}", "query": {"text": f"q{i}"}, "positive": {"text": f"p{i}"},
              "hard_negatives": [f"q{(i + 1) % 20}", f"q{(i + 2) % 20}"]} for i in range(20)]
    (root / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs))
    (root / "train.yaml").write_text(
        "datasets:\n"
        "  - {name: rec, kind: identity, path: rec.jsonl}\n"
        "  - {name: qa, kind: pairs, path: pairs.jsonl, weight: 2.0}\n")
    return root / "train.yaml"


def test_cli_schedule_with_the_real_loader(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vis_embed.data import load_train_config

    config_path = _write_config(tmp_path)
    out = tmp_path / "schedule.parquet"
    code = main(["schedule", "--data", str(config_path), "--steps", "7", "--global-batch-size", "8",
                 "--interleave-batch-size", "4", "--hard-negatives", "2", "--seed", "3", "--out", str(out),
                 "--no-progress"])
    assert code == 0
    assert "rec" in capsys.readouterr().out
    config = load_train_config(config_path)
    batches = list(iter_batches(out, data_fingerprint=config.fingerprint()))
    assert len(batches) == 7 and all(len(b) == 8 for b in batches)
    for batch in batches:
        for member in batch.members():
            ds = config.dataset(member.dataset)
            query, positive = ds.get(member.query_id), ds.get(member.positive_id)
            if ds.kind == "identity":
                assert query["identity"] == positive["identity"] and query["id"] != positive["id"]
            else:
                assert member.query_id == member.positive_id
    report = json.loads((tmp_path / "schedule.parquet.report.json").read_text())
    assert [d["name"] for d in report["datasets"]] == ["rec", "qa"]
    # the trainer's fingerprint check refuses the schedule once a data file changes
    with (tmp_path / "pairs.jsonl").open("a") as handle:
        handle.write(json.dumps({"id": "q99", "query": {"text": "x"}, "positive": {"text": "y"}}) + "\n")
    changed = load_train_config(config_path)
    with pytest.raises(FingerprintMismatchError):
        next(iter_batches(out, data_fingerprint=changed.fingerprint()))


def test_cli_reports_impossible_requests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_path = _write_config(tmp_path)
    code = main(["schedule", "--data", str(config_path), "--steps", "2", "--global-batch-size", "32",
                 "--interleave-batch-size", "16", "--out", str(tmp_path / "s.parquet"), "--no-progress"])
    assert code == 2
    assert "has only 12 distinct usable identities" in capsys.readouterr().err
