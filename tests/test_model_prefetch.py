"""Embedder.encode prepares the next batch in a worker thread while the model runs the current one."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from PIL import Image

from vis_embed import Embedder
from vis_embed.errors import DataError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _items(count: int) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"image": Image.fromarray(rng.integers(0, 256, (56, 56, 3), dtype=np.uint8)), "text": f"item {i}"}
            for i in range(count)]


@pytest.fixture(scope="module")
def embedder(tiny_checkpoint) -> Embedder:
    return Embedder.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu")


def test_the_next_batch_is_prepared_while_the_model_runs(embedder: Embedder, monkeypatch) -> None:
    model = embedder.model
    prepared_threads: list[str] = []
    second_batch_started = threading.Event()
    overlapped: list[bool] = []
    original_prepare, original_forward = model.prepare_one, model.forward

    def prepare_one(item, *args, **kwargs):
        prepared_threads.append(threading.current_thread().name)
        if item["text"] == "item 2":  # the first item of the second batch
            second_batch_started.set()
        return original_prepare(item, *args, **kwargs)

    def forward(**batch):
        if not overlapped:  # the first batch's forward waits for the second batch's preparation
            overlapped.append(second_batch_started.wait(timeout=30))
        return original_forward(**batch)

    monkeypatch.setattr(model, "prepare_one", prepare_one)
    monkeypatch.setattr(model, "forward", forward)
    items = _items(4)
    vectors = embedder.encode(items, batch_size=2)
    assert overlapped == [True]
    assert all(name.startswith("vis-embed-prepare") for name in prepared_threads)
    monkeypatch.undo()
    np.testing.assert_array_equal(vectors, embedder.encode(items, batch_size=2))


def test_a_bad_item_in_a_prefetched_batch_raises_as_before(embedder: Embedder, tmp_path) -> None:
    items = _items(4)
    items[3] = {"image": str(tmp_path / "missing.png")}
    with pytest.raises(DataError) as raised:
        embedder.encode(items, batch_size=2)
    assert raised.value.item_index == 3
    vectors, kept, errors = embedder.encode_partial(items, batch_size=2, on_error="skip")
    assert kept == [0, 1, 2] and set(errors) == {3} and len(vectors) == 3


def test_rows_read_behind_the_next_batch_survive_a_batch_that_failed_whole(embedder: Embedder, tmp_path) -> None:
    """encode reads each batch back after launching the next (model/runtime/readback.py): a batch
    whose every item failed (nothing launched) between good ones loses no row and moves none."""
    items = _items(5)
    broken = tmp_path / "truncated.png"  # its header gives the same length estimate: it stays 3rd in line
    items[2]["image"].save(broken)
    broken.write_bytes(broken.read_bytes()[:-200])
    items[2] = {"image": str(broken), "text": "item 2"}
    assert embedder.batch_plan(items, None, 1) == [[0], [1], [2], [3], [4]]
    vectors, kept, errors = embedder.encode_partial(items, batch_size=1, on_error="skip")
    assert kept == [0, 1, 3, 4] and set(errors) == {2}
    alone = np.concatenate([embedder.encode([items[index]]) for index in kept])
    np.testing.assert_allclose(vectors, alone, rtol=0, atol=1e-6)
