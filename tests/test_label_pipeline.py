"""One label pipeline: codes computed once at data load, written by the scheduler as the
int64 ``label`` column, read by the trainer (and so the losses) and by mining; an old
schedule file without the column still trains with the same codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from vis_embed.data import load_train_config
from vis_embed.errors import ConfigError, DataError
from vis_embed.sampling import build_schedule, iter_batches
from vis_embed.mining.hard_negatives import mine_dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _write_data(root: Path) -> Path:
    """Identity rows (3 people x 2 photos) and pairs rows whose positives repeat ("circle" x 3)."""
    root.mkdir(parents=True, exist_ok=True)
    for n in range(6):
        Image.new("RGB", (8, 8), (40 * n, 10, 10)).save(root / f"p{n}.png")
    people = [{"id": f"i{n}", "image": f"p{n}.png", "identity": f"person{n // 2}"} for n in range(6)]
    shapes = ["circle", "square", "circle", "star", "circle", "square", "moon", "sun"]
    pairs = [{"id": f"c{n}", "query": {"image": f"p{n % 6}.png"}, "positive": {"text": shape}}
             for n, shape in enumerate(shapes)]
    (root / "people.jsonl").write_text("".join(json.dumps(r) + "\n" for r in people))
    (root / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs))
    (root / "train.yaml").write_text(
        "datasets:\n"
        "  - {name: people, kind: identity, path: people.jsonl}\n"
        "  - {name: cls, kind: pairs, path: pairs.jsonl}\n")
    return root / "train.yaml"


def _expected_labels(config, batch) -> list[int]:
    return [int(config.dataset(d).labels[config.dataset(d).index[p]]) for d, p in zip(batch.dataset, batch.positive_id)]


def test_the_scheduler_writes_the_loaders_codes_as_an_int64_label_column(tmp_path: Path) -> None:
    config = load_train_config(_write_data(tmp_path / "data"))
    out = tmp_path / "schedule.parquet"
    build_schedule(config, out, steps=3, global_batch_size=4, interleave_batch_size=2, hard_negatives=0, seed=0)
    schema = pq.read_schema(out)
    assert schema.field("label").type == pa.int64()
    batches = list(iter_batches(out, data_fingerprint=config.fingerprint()))
    assert len(batches) == 3
    for batch in batches:
        assert batch.label == _expected_labels(config, batch)
        assert [m.label for m in batch.members()] == batch.label


def _strip_label(path: Path) -> None:
    table = pq.read_table(path)
    pq.write_table(table.drop(["label"]).replace_schema_metadata(table.schema.metadata), path)


def _replace_label(path: Path, value: int) -> None:
    table = pq.read_table(path)
    column = pa.array(np.full(table.num_rows, value, dtype=np.int64))
    table = table.set_column(table.schema.get_field_index("label"), "label", column)
    pq.write_table(table.replace_schema_metadata(table.schema.metadata), path)


@pytest.fixture()
def trainer_setup(tiny_checkpoint, tmp_path: Path):
    from _training_fixtures import tiny_recipe

    from vis_embed.training.recipe import load_recipe

    data = _write_data(tmp_path / "data")
    config = load_train_config(data)
    schedule = tmp_path / "schedule.parquet"
    build_schedule(config, schedule, steps=1, global_batch_size=4, interleave_batch_size=2, hard_negatives=0, seed=0)

    def recipe(run: str):
        return load_recipe(raw=tiny_recipe(tiny_checkpoint("qwen2-vl"), data, schedule, tmp_path / run, max_steps=1,
                                                   sampling__interleave_batch_size=2))
    return config, schedule, recipe


def test_the_trainer_and_its_loss_read_the_schedules_label_column(trainer_setup, monkeypatch) -> None:
    from vis_embed.training.trainer import Trainer

    config, schedule, recipe = trainer_setup
    trainer = Trainer(recipe("run"))
    batch = next(trainer.schedule.steps())
    assert trainer.prepare_step(batch).labels.tolist() == _expected_labels(config, batch)
    seen = []
    objective = trainer.objective
    monkeypatch.setattr(trainer, "objective",
                        lambda q, c, labels: seen.append(labels.labels) or objective(q, c, labels))
    trainer.train_step(trainer.prepare_step(batch))
    assert seen and all(codes.tolist() == batch.label for codes in seen)
    # the column is checked against the data's codes: a rewritten one (or one written by another
    # vis_embed's label rule) is refused naming its row, not trained on with other masks
    _replace_label(schedule, 99)
    with pytest.raises(DataError, match=r"schedule.parquet:1: field 'label': label 99 where the data's label"):
        next(trainer.schedule.steps())


@pytest.mark.parametrize("field", ["query_id", "positive_id"])
def test_a_schedule_naming_rows_the_data_lacks_is_refused_naming_row_and_field(tmp_path: Path, field: str) -> None:
    from vis_embed.training.schedule_source import ScheduleSource

    config = load_train_config(_write_data(tmp_path / "data"))
    out = tmp_path / "schedule.parquet"
    build_schedule(config, out, steps=3, global_batch_size=4, interleave_batch_size=2, hard_negatives=0, seed=0)
    table = pq.read_table(out)
    ids = table.column(field).to_pylist()
    ids[6] = "gone"  # an id edited in the file (the data, and so its fingerprint, unchanged)
    table = table.set_column(table.schema.get_field_index(field), field, pa.array(ids, type=pa.string()))
    pq.write_table(table.replace_schema_metadata(table.schema.metadata), out)
    source = ScheduleSource(out, config.fingerprint(), config)
    assert next(source.steps()).step == 0
    with pytest.raises(DataError, match=rf"schedule.parquet:7: field '{field}': 'gone' is no row of dataset"):
        list(source.steps(1))


def test_a_schedule_without_the_label_column_is_refused_with_the_fix(trainer_setup) -> None:
    from vis_embed.training.trainer import Trainer

    config, schedule, recipe = trainer_setup
    _strip_label(schedule)
    assert "label" not in pq.read_schema(schedule).names
    with pytest.raises(ConfigError, match="no 'label' column.*rebuild it with `vis-embed schedule`"):
        Trainer(recipe("run_b"))


class _TextEncoder:
    """Every item gets the same vector: mining's ranking is then decided by labels alone."""

    def encode(self, items, instruction=None, batch_size=16, show_progress=False):
        return np.tile(np.eye(4, dtype=np.float32)[:1], (len(items), 1))


def test_mining_never_picks_a_negative_the_loss_would_mask(tmp_path: Path) -> None:
    """Pairs rows whose positives are the same text share a loss label: not each other's negatives."""
    config = load_train_config(_write_data(tmp_path / "data"))
    cls = config.dataset("cls")
    rows, _result = mine_dataset(cls, _TextEncoder(), k=7)
    for row in rows:
        own = cls.labels[cls.index[row["id"]]]
        assert row["hard_negatives"], row["id"]
        assert all(cls.labels[cls.index[negative]] != own for negative in row["hard_negatives"])
    circles = [r for r in rows if r["id"] in ("c0", "c2", "c4")]
    assert all(len(r["hard_negatives"]) == 5 for r in circles)  # 8 rows - 3 circles
