"""Item preparation in worker processes (model/runtime/prepare_pool.py): same vectors and rows in input
order, the same rejects and errors as in one process, a crashed worker named, never a hang;
``encode --dry-run``; training with ``num_workers: 2`` ends with the same adapter as with 0."""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from vis_embed import Embedder
from vis_embed.errors import DataError
from vis_embed.model.runtime.encode_file import encode_jsonl
from vis_embed.model.runtime.prepare_pool import WorkerCrashedError, resolve_workers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _prepare_fixtures import CONFIG_ERROR_TEXT, CRASH_TEXT, crashing_copy, photo, write_items  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SIZES = [(320, 240), (96, 160), (640, 480), (200, 200), (500, 90), (128, 96), (700, 400)]
BAD_ROWS = [{"id": "missing", "image": "nowhere.jpg"}, {"id": "box", "image": "p0.jpg", "bbox": [0, 0, 9999, 10]},
            {"id": "typo", "img": "p1.jpg"}, {"id": "corrupt", "image": "corrupt.jpg"}]


@pytest.fixture(autouse=True)
def no_hang():
    """A hang is a failure: dump the stacks and end the run after 10 minutes."""
    faulthandler.dump_traceback_later(600, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def items_file(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("items")
    path = write_items(root, SIZES, extra=BAD_ROWS)
    (root / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    return path


def _encode(model: Path, items: Path, out: Path, workers: int, on_error: str = "skip"):
    return encode_jsonl(model, items, out, device="cpu", on_error=on_error, show_progress=False,
                        batch_size=3, workers=workers)


def test_one_and_two_workers_give_the_same_vectors_rows_and_rejects_as_the_main_process(
        tiny_checkpoint, items_file, tmp_path) -> None:
    model = tiny_checkpoint("qwen2-vl")
    outputs = {workers: tmp_path / f"w{workers}.npy" for workers in (0, 1, 2)}
    for workers, out in outputs.items():
        _encode(model, items_file, out, workers)
    vectors = {workers: np.load(out) for workers, out in outputs.items()}
    lines = {workers: json.loads(out.with_suffix(".ids.json").read_text())["lines"] for workers, out in outputs.items()}
    rejects = {workers: out.with_suffix(".rejects.jsonl").read_text() for workers, out in outputs.items()}
    good = len(SIZES) + 3
    assert vectors[1].shape[0] == good
    assert lines[1] == lines[2] == lines[0] == sorted(lines[0])  # rows in input order
    for workers in (1, 2):
        assert np.sum(vectors[workers] * vectors[0], axis=1).min() >= 0.99999
    assert np.sum(vectors[1] * vectors[2], axis=1).min() >= 0.99999
    assert rejects[1] == rejects[2] == rejects[0]
    rows = [json.loads(line)["row"] for line in rejects[2].splitlines()]
    ids = [(json.loads(row) if isinstance(row, str) else row)["id"] for row in rows]  # the reader keeps raw lines
    assert ids == ["missing", "box", "typo", "corrupt"]


def test_raise_mode_names_the_same_bad_line_with_workers(tiny_checkpoint, tmp_path) -> None:
    model = tiny_checkpoint("qwen2-vl")
    items = write_items(tmp_path / "items", SIZES, extra=[{"id": "missing", "image": "nowhere.jpg"}])
    messages = []
    for workers in (0, 2):
        with pytest.raises(DataError) as raised:
            _encode(model, items, tmp_path / f"r{workers}.npy", workers, on_error="raise")
        messages.append(str(raised.value))
    assert messages[0] == messages[1]
    line = len(items.read_text().splitlines())  # the last row
    assert messages[0].startswith(f"{items}:{line}: field 'image': image file not found")


def test_a_crashed_worker_is_an_error_naming_its_item_not_a_hang(tiny_checkpoint, monkeypatch) -> None:
    embedder = Embedder.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu", workers=2)
    items = [{"image": photo(64 + 8 * i, 48, seed=i), "text": f"item {i}"} for i in range(6)]
    items[4] = {"text": CRASH_TEXT}
    monkeypatch.setattr(embedder.model, "preparer",
                        lambda: crashing_copy(type(embedder.model).preparer(embedder.model)))
    try:
        for on_error in ("raise", "skip"):  # a crash is never skipped as a bad item
            with pytest.raises(WorkerCrashedError) as raised:
                embedder.encode_partial(items, batch_size=2, on_error=on_error)
            assert raised.value.item_index == 4
            assert "items[4]" in str(raised.value) and "exit code 7" in str(raised.value)
        monkeypatch.undo()  # a fresh pool replaces the broken one
        del items[4]
        vectors = embedder.encode(items, batch_size=2)
        assert vectors.shape[0] == 5 and np.isfinite(vectors).all()
    finally:
        embedder.close()


def test_a_configuration_error_in_a_worker_is_raised_as_in_one_process(tiny_checkpoint, monkeypatch) -> None:
    from vis_embed.errors import ConfigError

    embedder = Embedder.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu")
    items = [{"text": "fine"}, {"text": CONFIG_ERROR_TEXT}, {"text": "fine too"}]
    monkeypatch.setattr(embedder.model, "preparer",
                        lambda: crashing_copy(type(embedder.model).preparer(embedder.model)))
    try:
        for workers in (0, 2):
            embedder.workers = workers
            with pytest.raises(ConfigError, match="no chat template"):  # not skipped as a bad item
                embedder.encode_partial(items, on_error="skip")
    finally:
        embedder.close()


@pytest.mark.parametrize(("cores", "ranks", "on_cpu", "on_gpu"),
                         [(16, 1, 8, 15), (16, 2, 8, 7), (2, 1, 2, 1), (1, 1, 1, 1), (64, 1, 8, 32)])
def test_auto_workers_leave_a_gpu_models_host_its_cores_but_one(monkeypatch, cores, ranks, on_cpu, on_gpu) -> None:
    """For a model on a GPU every core of the rank but the model's own prepares (14 workers fed an
    H200's 2B forward at 85%; the CPU rule's 8 would have fed half); a model on the CPU keeps the
    cap of 8 (it needs the cores itself)."""
    from vis_embed.model.runtime import prepare_pool

    monkeypatch.setattr(prepare_pool, "available_cores", lambda: cores)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(ranks))
    assert resolve_workers("auto") == on_cpu
    assert resolve_workers("auto", image_items=10_000, accelerated=True) == on_gpu
    assert resolve_workers("auto", image_items=3, accelerated=True) == 0  # a handful: in this process
    assert resolve_workers(5, accelerated=True) == 5  # a given count is the count


def test_the_feed_knows_whether_its_model_runs_on_an_accelerator() -> None:
    from types import SimpleNamespace

    from vis_embed.model.runtime.item_feed import ItemFeed

    assert ItemFeed(SimpleNamespace(device=torch.device("cuda", 0)), "auto").accelerated()
    assert not ItemFeed(SimpleNamespace(device=torch.device("cpu")), "auto").accelerated()
    assert not ItemFeed(SimpleNamespace(), "auto").accelerated()  # the dry run's stand-in: no device


def test_auto_workers_skip_processes_for_a_handful_of_images() -> None:
    assert resolve_workers("auto", image_items=3) == 0
    assert resolve_workers("auto", image_items=10_000) >= 1
    assert resolve_workers(3, image_items=1) == 3
    with pytest.raises(ValueError):
        resolve_workers(-1)


def test_dry_run_prepares_like_encode_without_writing_vectors(tiny_checkpoint, items_file, tmp_path) -> None:
    model = tiny_checkpoint("qwen2-vl")
    real = tmp_path / "real.npy"
    _encode(model, items_file, real, workers=0)
    dry = tmp_path / "dry.npy"
    completed = subprocess.run(
        [sys.executable, "-m", "vis_embed", "encode", "--model", str(model), "--input", str(items_file),
         "--output", str(dry), "--dry-run", "--workers", "2", "--on-error", "skip", "--batch-size", "3"],
        capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr
    stats = json.loads(completed.stdout.strip().splitlines()[-1])
    assert not dry.exists() and not dry.with_suffix(".ids.json").exists()
    assert dry.with_suffix(".rejects.jsonl").read_text() == real.with_suffix(".rejects.jsonl").read_text()
    # The token counts are those of the items a real encode prepares.
    embedder = Embedder.from_pretrained(model, device="cpu")
    rows = [json.loads(line) for line in items_file.read_text().splitlines()]
    kept = json.loads(real.with_suffix(".ids.json").read_text())["lines"]
    lengths = [embedder.model.prepare_one({k: v for k, v in rows[line - 1].items() if k != "id"},
                                          base_dir=items_file.parent).length for line in kept]
    assert stats["items"] == len(kept) and stats["rejected"] == len(BAD_ROWS) and stats["workers"] == 2
    assert stats["tokens"]["count"] == sum(lengths) and stats["tokens"]["max"] == max(lengths)
    assert stats["tokens"]["p50"] == pytest.approx(float(np.percentile(lengths, 50)))
    assert 0 <= stats["padding_fraction"] < 1


def test_training_with_two_worker_processes_ends_with_the_same_adapter(tiny_checkpoint, tmp_path) -> None:
    from _training_fixtures import tiny_recipe, write_identity_dataset, write_schedule

    from vis_embed.training.recipe import load_recipe
    from vis_embed.training.trainer import Trainer

    data = write_identity_dataset(tmp_path / "data", identities=6)
    schedule = write_schedule(data, tmp_path / "schedule.parquet", steps=2, batch=4)
    model = tiny_checkpoint("qwen2-vl")
    adapters = []
    for workers in (0, 2):
        recipe = load_recipe(raw=tiny_recipe(model, data, schedule, tmp_path / f"run{workers}", max_steps=2,
                                             num_workers=workers))
        adapters.append(load_file(str(Trainer(recipe).train() / "adapter_model.safetensors")))
    assert set(adapters[0]) == set(adapters[1]) and adapters[0]
    for name, tensor in adapters[0].items():  # bit-identical on one torch thread
        assert torch.equal(tensor, adapters[1][name]), name


def test_a_bfloat16_model_gets_bfloat16_patches_with_the_bits_its_forward_pass_cast_to(tiny_checkpoint,
                                                                                       items_file) -> None:
    """The patches of a 16-bit model are cast when prepared (half the bytes through the worker
    pipes, the collation and the GPU copy).  The forward pass casts them to the model's dtype
    first thing, so the vectors must equal those of float32 patches cast there, bit for bit,
    in this process and through the worker processes."""
    embedder = Embedder.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu", dtype=torch.bfloat16)
    model = embedder.model
    assert model.preparer().pixel_dtype == "bfloat16"
    item = {"image": photo(320, 240, seed=3)}
    prepared = model.prepare([item], "find it")[0]
    assert prepared.pixel_values.dtype == torch.bfloat16
    full = dataclasses.replace(model.preparer(), pixel_dtype=None).prepare_one(item, "find it")
    assert full.pixel_values.dtype == torch.float32
    assert torch.equal(full.pixel_values.to(torch.bfloat16), prepared.pixel_values)
    with torch.inference_mode():
        assert torch.equal(model(**model.collate([prepared])), model(**model.collate([full])))
    rows = [{key: value for key, value in json.loads(line).items() if key != "id"}
            for line in items_file.read_text().splitlines()][:len(SIZES)]
    in_process = embedder.encode(rows, "find it", batch_size=3, base_dir=items_file.parent)
    embedder.workers = 2
    try:
        assert np.array_equal(embedder.encode(rows, "find it", batch_size=3, base_dir=items_file.parent), in_process)
    finally:
        embedder.close()


def test_bfloat16_tensors_cross_to_a_worker_process_and_back_unchanged() -> None:
    from vis_embed.model.inputs.preparer import PreparedItem

    patches = torch.randn(8, 12).to(torch.bfloat16)
    item = PreparedItem(input_ids=torch.arange(5), mm_token_type_ids=torch.zeros(5, dtype=torch.long),
                        pixel_values=patches, image_grid_thw=torch.tensor([[1, 2, 4]]))
    back = PreparedItem.from_numpy(pickle.loads(pickle.dumps(item.to_numpy(), protocol=5)))
    assert back.pixel_values.dtype == torch.bfloat16 and torch.equal(back.pixel_values, patches)
    assert torch.equal(back.input_ids, item.input_ids) and torch.equal(back.image_grid_thw, item.image_grid_thw)


def test_an_item_larger_than_the_pipe_crosses_whole_and_a_writer_gone_mid_item_is_eof() -> None:
    """The arrays cross the worker pipe read straight into their memory (model/runtime/worker_pipe.py: readv where
    the pipe is a descriptor): a 5 MB image item -- far past a pipe's buffer, so every read and
    write is partial -- arrives bit for bit beside a small item; a writer that dies in the middle
    of an item is EOFError, the collector's crash path, never a hang or a short tensor."""
    import multiprocessing
    import threading

    from vis_embed.model.inputs.preparer import PreparedItem
    from vis_embed.model.runtime.worker_pipe import RAW_BUFFERS, receive_message, send_message

    if not RAW_BUFFERS:
        pytest.skip("the pipe is no POSIX descriptor here: the Connection's framed messages carry the arrays")
    big = PreparedItem(input_ids=torch.arange(300), mm_token_type_ids=torch.ones(300, dtype=torch.long),
                       pixel_values=torch.randn(2048, 1176).to(torch.bfloat16),
                       image_grid_thw=torch.tensor([[1, 64, 32]]))
    small = PreparedItem(input_ids=torch.arange(7), mm_token_type_ids=torch.zeros(7, dtype=torch.long))
    parent, child = multiprocessing.Pipe(duplex=True)
    sender = threading.Thread(target=lambda: [send_message(child, ("ok", item.to_numpy())) for item in (big, small)])
    sender.start()
    received = [PreparedItem.from_numpy(receive_message(parent)[1]) for _ in range(2)]
    sender.join()
    assert torch.equal(received[0].pixel_values, big.pixel_values) and torch.equal(received[0].input_ids, big.input_ids)
    assert torch.equal(received[1].input_ids, small.input_ids) and received[1].pixel_values is None
    # a writer that stops after the item's header and half its patches, then closes its end
    half = threading.Thread(target=_send_half, args=(child, big))
    half.start()
    with pytest.raises(EOFError):
        receive_message(parent)
    half.join()


def _send_half(conn, item) -> None:  # noqa: ANN001
    """What a worker dying mid-item leaves: the sizes, the payload, the arrays before the patches,
    half the patches."""
    from vis_embed.model.runtime.worker_pipe import write_all

    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(("ok", item.to_numpy()), protocol=5, buffer_callback=buffers.append)
    views = [buffer.raw() for buffer in buffers]
    conn.send_bytes(pickle.dumps([view.nbytes for view in views]))
    conn.send_bytes(payload)
    largest = max(range(len(views)), key=lambda k: views[k].nbytes)  # the patches
    for view in views[:largest]:
        write_all(conn.fileno(), view)
    write_all(conn.fileno(), views[largest][: views[largest].nbytes // 2])
    conn.close()


def test_a_ctrl_c_reaches_the_command_not_its_preparation_workers(tiny_checkpoint) -> None:
    """Ctrl-C signals the terminal's whole process group: a worker that took it died with its own
    KeyboardInterrupt traceback under the command's one 'interrupted' line.  Workers leave it to
    the parent, which stops them."""
    import os
    import signal
    import time

    embedder = Embedder.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu", workers=2)
    items = [{"image": photo(64 + 8 * i, 48, seed=i), "text": f"item {i}"} for i in range(4)]
    try:
        first = embedder.encode(items, batch_size=2)
        workers = embedder.feed._pool._workers
        for worker in workers:
            os.kill(worker.process.pid, signal.SIGINT)
        time.sleep(1)
        assert all(worker.process.is_alive() for worker in workers)
        np.testing.assert_allclose(embedder.encode(items, batch_size=2), first, atol=1e-6)
    finally:
        embedder.close()


def test_workers_prepare_with_the_running_vis_embed_not_a_copy_in_the_working_directory(tiny_checkpoint,
                                                                                      tmp_path) -> None:
    """Run from a folder holding another vis_embed (a checkout of another version), the workers
    imported that copy (the forkserver starts as ``python -c``: the working directory first on
    its path) and prepared items with its code while the command ran the installed one."""
    import shutil

    import vis_embed

    folder = tmp_path / "checkout"
    shutil.copytree(Path(vis_embed.__file__).parent, folder / "vis_embed",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with (folder / "vis_embed" / "model" / "inputs" / "preparer.py").open("a") as module:
        module.write("\n\ndef _copy_of_the_working_directory(self, *args, **kwargs):\n"
                     "    raise RuntimeError('prepared by the copy in the working directory')\n\n\n"
                     "Preparer.prepare_one = _copy_of_the_working_directory\n")
    items = write_items(tmp_path / "items", [(64, 48), (40, 40)], texts=1)
    script = tmp_path / "script" / "encode.py"  # a script's own folder, not the directory, leads its path
    script.parent.mkdir()
    script.write_text("import sys\nfrom vis_embed.cli import main\nif __name__ == '__main__':\n    sys.exit(main())\n")
    command = [sys.executable, str(script), "encode", "--model", str(tiny_checkpoint()), "--input", str(items),
               "--out", str(tmp_path / "vectors.npy"), "--workers", "1", "--no-progress"]
    run = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert np.load(tmp_path / "vectors.npy").shape[0] == 3


def test_workers_started_in_the_background_serve_the_encodes_after_them(tiny_checkpoint, tmp_path) -> None:
    """``start_workers(background=True)`` (serve's start) returns at once; the forkserver is
    started in the caller's thread (it changes the environment, which another thread must not do
    while this one runs), the pool in the background, and later encodes use that pool."""
    embedder = Embedder.from_pretrained(tiny_checkpoint(), device="cpu", workers=1)
    items = [{"image": photo(64, 48, seed=seed)} for seed in range(3)]
    try:
        embedder.start_workers(background=True)
        embedder.feed._pool_starting.join(timeout=300)
        pool = embedder.feed._pool
        assert pool is not None and pool.size == 1
        first = embedder.encode(items)
        assert embedder.feed._pool is pool  # the background pool did the work, not a new one
        assert np.allclose(first, embedder.encode(items))
    finally:
        embedder.close()


@pytest.mark.parametrize("before", [None, "x"])
def test_starting_the_forkserver_leaves_the_environment_as_it_was(tiny_checkpoint, monkeypatch, before) -> None:
    import os

    from vis_embed.model.runtime.worker_start import start_forkserver

    if before is None:
        monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    else:
        monkeypatch.setenv("PYTHONSAFEPATH", before)
    start_forkserver(Embedder.from_pretrained(tiny_checkpoint(), device="cpu").model.preparer())
    assert os.environ.get("PYTHONSAFEPATH") == before
