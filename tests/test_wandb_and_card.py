"""Weights & Biases logging (``logging.wandb``) and the Hub model card of ``final/`` and ``export``.

The W&B run is read back from wandb's own offline transaction log (``run-ID.wandb``: a
LevelDB-style log of protobuf ``Record`` messages, which wandb 0.31 no longer reads in Python).
The model card is read back with huggingface_hub's parsers (``ModelCard``, ``metadata_load``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

wandb = pytest.importorskip("wandb")

from eval_fakes import make_identity_benchmark  # noqa: E402
from huggingface_hub import ModelCard, metadata_load  # noqa: E402

from _training_fixtures import tiny_recipe, write_identity_dataset, write_schedule  # noqa: E402
from vis_embed.cli import main  # noqa: E402
from vis_embed.errors import ConfigError  # noqa: E402
from vis_embed.training.recipe import load_recipe  # noqa: E402
from vis_embed.training.trainer import Trainer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BLOCK = 32 * 1024  # the log's block size; a record header is checksum (4) + length (2) + type (1)


def wandb_records(path: Path) -> list:
    """The protobuf records of a ``.wandb`` transaction log."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    records, pending, position = [], b"", 7
    while position + 7 <= len(data):
        if BLOCK - position % BLOCK < 7:  # a block's tail too short for a header is padding
            position += BLOCK - position % BLOCK
            continue
        length, kind = int.from_bytes(data[position + 4:position + 6], "little"), data[position + 6]
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # FULL or LAST: a record is complete
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _history(records: list) -> list[dict[str, float]]:
    rows = []
    for record in records:
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


def _updates(records: list, kind: str) -> dict:
    """Keys set by ``summary`` / ``config`` records (the run record carries the initial config)."""
    found = {}
    for record in records:
        record_type = record.WhichOneof("record_type")
        if record_type == kind or (kind == "config" and record_type == "run"):
            update = record.run.config.update if record_type == "run" else getattr(record, kind).update
            for item in update:
                found[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return found


@pytest.fixture(scope="module")
def wandb_run(tiny_checkpoint, tmp_path_factory):
    """A 2-step training run with ``logging.wandb: true`` under WANDB_MODE=offline."""
    root = tmp_path_factory.mktemp("wandb")
    data = write_identity_dataset(root / "data", identities=6)
    schedule = write_schedule(data, root / "schedule.parquet", steps=2, batch=4)
    base = tiny_checkpoint("qwen2-vl")
    out = root / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")
        patch.setenv("WANDB_SILENT", "true")
        recipe = load_recipe(raw=tiny_recipe(base, data, schedule, out, max_steps=2, logging__wandb=True,
                                             logging__wandb_project="vis-embed-test",
                                             logging__wandb_run_name="two-steps"))
        Trainer(recipe).train()
    return base, out


def test_offline_wandb_run_holds_the_logged_losses_and_the_recipe(wandb_run) -> None:
    _base, out = wandb_run
    recorded = json.loads((out / "wandb_run.json").read_text())
    assert recorded["project"] == "vis-embed-test" and recorded["name"] == "two-steps"
    [log_file] = list((out / "wandb").glob(f"offline-run-*-{recorded['id']}/run-{recorded['id']}.wandb"))
    records = wandb_records(log_file)
    history = _history(records)
    train_log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [row["train/loss"] for row in history] == pytest.approx([row["loss"] for row in train_log])
    for key in ("lr", "tau", "step_time_s", "memory_gb"):  # the TensorBoard scalars
        assert [row[f"train/{key}"] for row in history] == pytest.approx([row[key] for row in train_log])
    assert all(row["memory_gb"] > 0 for row in train_log)
    config = _updates(records, "config")
    assert config["max_steps"] == 2 and config["logging"]["wandb"] is True  # the recipe is the run's config


def test_eval_of_final_puts_results_on_the_card_and_in_the_wandb_summary(wandb_run, tmp_path: Path,
                                                                        monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    base, out = wandb_run
    files = make_identity_benchmark(tmp_path / "bench", n_views=2)
    manifest = files["gallery"].parent / "benchmark.yaml"
    manifest.write_text(yaml.safe_dump({"name": "tiny", "datasets": [
        {"name": "Gal", "benchmark": "MVEB", "meta_task": "Re-ID", "split": "OOD", "layout": "gallery",
         "queries": "queries.jsonl", "gallery": "gallery.jsonl", "image_root": "images"}]}))
    final = out / "final"
    card_before = ModelCard.load(final / "README.md")
    # a local base is no Hub id: named in the text, never as the Hub's base_model
    assert card_before.data.base_model is None and not card_before.data.eval_results
    assert str(base.resolve()) in card_before.text
    assert main(["eval", "--model", str(base), "--adapter", str(final), "--benchmark", str(manifest),
                 "--out", str(tmp_path / "eval"), "--device", "cpu", "--quiet", "--no-pictures"]) == 0
    p_at_1 = json.loads((tmp_path / "eval" / "results.json").read_text())["datasets"]["Gal"]["metrics"]["P@1"]

    card = ModelCard.load(final / "README.md")
    assert card.data.library_name == "peft" and card.data.pipeline_tag == "feature-extraction"
    assert card.data.datasets == ["toy"]
    [result] = card.data.eval_results
    assert (result.dataset_name, result.metric_type) == ("Gal", "P@1")
    assert result.metric_value == pytest.approx(p_at_1, abs=1e-4)

    recorded = json.loads((out / "wandb_run.json").read_text())
    summaries = {}
    for log_file in out.glob(f"wandb/offline-run-*-{recorded['id']}/run-{recorded['id']}.wandb"):
        summaries.update(_updates(wandb_records(log_file), "summary"))
    assert summaries["eval/Gal/P@1"] == pytest.approx(p_at_1)


def test_export_card_parses_with_huggingface_hub(wandb_run, tmp_path: Path) -> None:
    base, out = wandb_run
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"model": {}, "groups": {"overall": 12.5}, "datasets": {
        "SynthRec": {"primary": "P@1", "metrics": {"P@1": 12.5}, "meta_task": "ID-Rec", "split": "IND"}}}))
    exported = tmp_path / "st"
    assert main(["export", "--adapter", str(out / "final"), "--out", str(exported), "--results", str(results)]) == 0
    metadata = metadata_load(exported / "README.md")
    assert metadata["library_name"] == "sentence-transformers"
    assert "base_model" not in metadata  # a local path: the Hub takes only model ids there
    assert metadata["pipeline_tag"] == "feature-extraction" and metadata["datasets"] == ["toy"]
    [result] = ModelCard.load(exported / "README.md").data.eval_results
    assert (result.dataset_name, result.metric_type, result.metric_value) == ("SynthRec", "P@1", 12.5)
    assert "| steps completed | 2 |" in (exported / "README.md").read_text()


def test_recipe_asking_for_wandb_without_it_fails_at_load(tiny_checkpoint, tmp_path: Path, monkeypatch) -> None:
    import vis_embed.integrations as integrations

    real = integrations.find_spec
    monkeypatch.setattr(integrations, "find_spec", lambda name: None if name == "wandb" else real(name))
    raw = tiny_recipe(Path("model"), Path("data.yaml"), Path("s.parquet"), tmp_path / "out", logging__wandb=True)
    with pytest.raises(ConfigError, match=r"vis_embed\[wandb\]"):
        load_recipe(raw=raw)
    raw["logging"]["wandb"] = False
    assert load_recipe(raw=raw).logging.wandb is False  # never required otherwise


def test_only_the_main_process_opens_a_wandb_run(tiny_checkpoint, tmp_path: Path, monkeypatch) -> None:
    import vis_embed.integrations.wandb as wandb_module
    from vis_embed.training.run_log import RunLogger

    opened = []
    monkeypatch.setattr(wandb_module.WandbRun, "__init__", lambda self, *a, **k: opened.append(a))
    raw = tiny_recipe(Path("model"), Path("data.yaml"), Path("s.parquet"), tmp_path / "out", logging__wandb=True)
    recipe = load_recipe(raw=raw)
    RunLogger(tmp_path, recipe, 0, enabled=False, show_progress=False).close()  # another rank
    assert opened == []
    main_process = RunLogger(tmp_path, recipe, 0, enabled=True, show_progress=False)  # rank 0
    main_process.jsonl.close()
    assert len(opened) == 1


def test_card_names_a_hub_base_model_and_parses_back(tmp_path: Path) -> None:
    from vis_embed.model.files.model_card import read_facts, write_model_card

    facts = {"base_model": "Qwen/Qwen2-VL-2B-Instruct", "recipe": {"adaptation": "lora"}, "steps": 3,
             "datasets": [{"name": "toy"}], "adapter": True,
             "evaluation": {"datasets": {"Gal": {"metric": "P@1", "value": 41.23456, "split": "OOD"}}}}
    write_model_card(tmp_path, facts)
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.base_model == "Qwen/Qwen2-VL-2B-Instruct" and "lora" in card.data.tags
    [result] = card.data.eval_results
    assert (result.dataset_split, result.metric_value) == ("OOD", 41.2346)
    stored = read_facts(tmp_path)
    assert stored is not None and stored.adaptation == "lora"  # older facts' `adapter: true` read as its kind
    assert (stored.steps, stored.evaluation) == (facts["steps"], facts["evaluation"])
    write_model_card(tmp_path, {**facts, "base_model": "a/b/c"})  # a path, whatever exists on disk
    assert ModelCard.load(tmp_path / "README.md").data.base_model is None


def test_an_eval_whose_wandb_run_cannot_be_reached_still_succeeds(wandb_run, tmp_path: Path, monkeypatch,
                                                                 caplog) -> None:
    """The run logged offline; the later eval runs online without a W&B key (wandb.init raises
    UsageError): the evaluation and the card are written, the W&B summary is skipped with a warning."""
    import shutil

    base, out = wandb_run
    run = shutil.copytree(out, tmp_path / "run")  # the module's run keeps its card as it was
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_SILENT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc key
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "home" / "wandb"))
    files = make_identity_benchmark(tmp_path / "bench", n_views=2)
    manifest = files["gallery"].parent / "benchmark.yaml"
    manifest.write_text(yaml.safe_dump({"name": "tiny", "datasets": [
        {"name": "Gal", "benchmark": "MVEB", "meta_task": "Re-ID", "split": "OOD", "layout": "gallery",
         "queries": "queries.jsonl", "gallery": "gallery.jsonl", "image_root": "images"}]}))
    assert main(["eval", "--model", str(base), "--adapter", str(run / "final"), "--benchmark", str(manifest),
                 "--out", str(tmp_path / "eval"), "--device", "cpu", "--quiet", "--no-pictures"]) == 0
    [result] = ModelCard.load(run / "final" / "README.md").data.eval_results
    assert result.dataset_name == "Gal"
    assert "could not add the evaluation to the W&B run" in caplog.text


def test_a_wandb_failure_at_the_end_of_training_does_not_lose_final(tiny_checkpoint, tmp_path: Path,
                                                                    monkeypatch, caplog) -> None:
    """wandb's finish raising (its service gone, a network error) must not stop final/ being saved."""
    from wandb.sdk.wandb_run import Run

    def broken_finish(self, *args, **kwargs):
        raise RuntimeError("wandb service stopped")

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setattr(Run, "finish", broken_finish)
    data = write_identity_dataset(tmp_path / "data", identities=6)
    schedule = write_schedule(data, tmp_path / "schedule.parquet", steps=1, batch=4)
    recipe = load_recipe(raw=tiny_recipe(tiny_checkpoint("qwen2-vl"), data, schedule, tmp_path / "run", max_steps=1,
                                         logging__wandb=True))
    final = Trainer(recipe).train()
    assert (final / "adapter_model.safetensors").is_file()
    assert "wandb service stopped" in caplog.text
