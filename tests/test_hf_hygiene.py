"""Hugging Face hygiene: a trained ``final/`` is usable from any directory by the standard
tools (AutoPeftModel, ``vis-embed merge``), a missing base fails at once with a clear message,
written files respect the umask, and ``final/`` holds what one ships and nothing else."""

from __future__ import annotations

import json
import os
import shutil
import stat
import socket
import sys
from pathlib import Path

import numpy as np
import pytest

from vis_embed.cli import main as cli_main
from vis_embed.io import atomic_directory, atomic_path, atomic_write_text
from vis_embed.training.recipe import load_recipe
from vis_embed.training.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _training_fixtures import tiny_recipe, write_identity_dataset, write_schedule  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ITEMS = [{"text": "a red square"}, {"text": "a blue circle"}]


@pytest.fixture(scope="module")
def trained(tiny_checkpoint, tmp_path_factory) -> tuple[Path, Path]:
    """(base, OUT) of a 2-step run whose recipe names the base by a RELATIVE path."""
    base = tiny_checkpoint("qwen2-vl")
    root = tmp_path_factory.mktemp("hygiene")
    data = write_identity_dataset(root / "data", identities=8)
    schedule = write_schedule(data, root / "schedule.parquet", steps=2, batch=4)
    cwd, umask = os.getcwd(), os.umask(0o022)  # trained under umask 022: files 0644
    os.chdir(base.parent)
    try:
        raw = tiny_recipe(Path(base.name), data, schedule, root / "run", max_steps=2,
                          optimizer__lr=5e-2, checkpoint__every=1)
        Trainer(load_recipe(raw=raw)).train()
    finally:
        os.chdir(cwd)
        os.umask(umask)
    return base, root / "run"


def test_adapter_records_an_absolute_base(trained) -> None:
    base, run = trained
    for directory in (run / "final", run / "checkpoint-1"):
        recorded = json.loads((directory / "adapter_config.json").read_text())["base_model_name_or_path"]
        assert recorded == str(base.resolve())


def test_autopeftmodel_loads_final_from_another_directory(trained, tmp_path, monkeypatch) -> None:
    from peft import AutoPeftModel

    _base, run = trained
    monkeypatch.chdir(tmp_path)
    model = AutoPeftModel.from_pretrained(str(run / "final"))
    assert any("lora_" in name for name, _ in model.named_parameters())


def test_merge_from_another_directory_matches_the_adapter(trained, tmp_path, monkeypatch) -> None:
    from vis_embed import Embedder

    base, run = trained
    monkeypatch.chdir(tmp_path)
    assert cli_main(["merge", str(run / "final"), "--out", "merged"]) == 0
    merged = Embedder.from_pretrained(tmp_path / "merged", device="cpu").encode(ITEMS)
    adapted = Embedder.from_pretrained(base, adapter=run / "final", device="cpu").encode(ITEMS)
    plain = Embedder.from_pretrained(base, device="cpu").encode(ITEMS)
    assert np.abs(merged - adapted).max() < 1e-4
    assert np.abs(adapted - plain).max() > 1e-3  # the training changed the vectors


def test_merge_with_a_missing_base_fails_fast(trained, tmp_path, capsys, monkeypatch) -> None:
    _base, run = trained
    adapter = tmp_path / "adapter"
    shutil.copytree(run / "final", adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "moved-away")
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    # "At once": the missing path is refused before anything asks the hub (no network, so no retries).
    connections: list[object] = []
    monkeypatch.setattr(socket.socket, "connect", lambda _self, address: connections.append(address))
    assert cli_main(["merge", str(adapter), "--out", str(tmp_path / "merged")]) == 2
    assert connections == []
    error = capsys.readouterr().err
    assert "base model not found" in error and "moved-away" in error and "--base" in error
    assert not (tmp_path / "merged").exists()


def test_final_holds_adapter_processor_and_model_card_only(trained) -> None:
    base, run = trained
    final = run / "final"
    names = {path.name for path in final.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md", "trainer_state.json",
            "tokenizer.json", "chat_template.jinja"} <= names
    assert "processor_config.json" in names or "preprocessor_config.json" in names
    assert not names & {"optimizer.pt", "temperature.pt", "deepspeed"}
    assert not [name for name in names if name.startswith("rng_state")]
    checkpoint = {path.name for path in (run / "checkpoint-1").iterdir()}
    assert {"optimizer.pt", "temperature.pt", "rng_state_rank0.pt"} <= checkpoint  # resume state stays here
    card = (final / "README.md").read_text()
    assert "base_model:" not in card and f"`{base.resolve()}`" in card  # a local base: text, not Hub metadata
    assert "| steps completed | 2 |" in card
    assert "## Evaluation" in card


def test_final_card_lists_the_training_datasets(trained) -> None:
    from vis_embed.data import load_train_config

    _base, run = trained
    state = json.loads((run / "final" / "trainer_state.json").read_text())
    card = (run / "final" / "README.md").read_text()
    for dataset in load_train_config(state["recipe"]["data"], check_images=False).datasets:
        assert f"| {dataset.name} | {dataset.kind} |" in card


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_writes_respect_the_umask(tmp_path, umask_022) -> None:
    assert _mode(atomic_write_text(tmp_path / "a.txt", "x")) == 0o644
    with atomic_path(tmp_path / "b.npy") as tmp:
        tmp.write_bytes(b"x")
    assert _mode(tmp_path / "b.npy") == 0o644
    with atomic_directory(tmp_path / "c") as tmp:
        (tmp / "inside.txt").write_text("x")
    assert _mode(tmp_path / "c") == 0o755
    os.umask(0o077)
    assert _mode(atomic_write_text(tmp_path / "private.txt", "x")) == 0o600  # a strict umask is kept


def test_atomic_writes_never_change_the_process_umask(tmp_path, monkeypatch) -> None:
    """The umask is process-wide: setting it (even to read it) races with every other thread
    creating files (prefetch, serving).  The kernel applies it instead."""
    def set_umask(_mask: int) -> int:
        raise AssertionError("the process umask was changed")

    monkeypatch.setattr(os, "umask", set_umask)
    atomic_write_text(tmp_path / "a.txt", "x")
    with atomic_path(tmp_path / "b.npy") as tmp:
        tmp.write_bytes(b"x")
    with atomic_directory(tmp_path / "c") as tmp:
        (tmp / "inside.txt").write_text("x")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.txt", "b.npy", "c"]


def test_trained_files_respect_the_umask(trained) -> None:
    _base, run = trained
    for path in (run / "final" / "trainer_state.json", run / "final" / "README.md",
                 run / "final" / "adapter_config.json", run / "checkpoint-1" / "trainer_state.json"):
        assert _mode(path) == 0o644, path
    assert _mode(run / "final") == 0o755
