"""``POST /v1/search`` bounded like the embeddings surface: the search-floats budget (413 alone,
FIFO in flight), re-ranking in bounded blocks, the search pool, and work stopped with its request."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from _serve_fixtures import RunningServer, binary_text_index  # noqa: E402
from vis_embed.gallery.quantized_index import rescored  # noqa: E402
from vis_embed.gallery.store import GalleryIndex  # noqa: E402
from vis_embed.serving import search_work  # noqa: E402
from vis_embed.serving.app import create_app  # noqa: E402
from vis_embed.serving.settings import ServerSettings  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.timeout(120)]

NAME, KEY = "tiny", "sesame"
AUTH = {"Authorization": f"Bearer {KEY}"}
TEXTS = [f"gallery item {i}" for i in range(12)]


class WatchedIndex:
    """A GalleryIndex seen through a proxy that records where and how often it searched
    (``delay_s`` per call: a slow search)."""

    def __init__(self, index: GalleryIndex, delay_s: float = 0.0) -> None:
        self._index, self.delay_s = index, delay_s
        self.calls, self.threads, self.running, self.most_at_once = 0, set(), 0, 0
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)

    def search(self, queries: np.ndarray, k: int) -> Any:
        with self._lock:
            self.calls += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            self.threads.add(threading.current_thread().name)
        try:
            time.sleep(self.delay_s)
            return self._index.search(queries, k)
        finally:
            with self._lock:
                self.running -= 1


@pytest.fixture(scope="module")
def index(embedder, tmp_path_factory) -> GalleryIndex:
    return binary_text_index(embedder, TEXTS, tmp_path_factory.mktemp("gallery"), rescore=2)


def _serve(embedder: Any, index: Any, **settings: Any) -> RunningServer:
    return RunningServer(create_app(embedder, ServerSettings(model_name=NAME, api_key=KEY, **settings), index))


def _search(url: str, queries: int, k: int, timeout: float = 30) -> httpx.Response:
    return httpx.post(f"{url}/v1/search", json={"model": NAME, "input": ["q"] * queries, "k": k},
                      headers=AUTH, timeout=timeout)


def test_a_search_over_the_budget_alone_is_a_413_naming_k_before_any_embedding(embedder, index) -> None:
    one_query = 1 * 4 * index.rescore * index.dim  # k 4
    watched = WatchedIndex(index)
    running = _serve(embedder, watched, max_search_floats=3 * one_query, max_search_floats_in_flight=3 * one_query)
    try:
        assert _search(running.url, 3, 4).status_code == 200
        refused = _search(running.url, 4, 4)
        metrics = httpx.get(f"{running.url}/metrics", headers=AUTH, timeout=10).text
    finally:
        running.stop()
    assert refused.status_code == 413 and refused.json()["error"]["param"] == "k"
    assert "--max-search-floats" in refused.json()["error"]["message"]
    assert 'vis_embed_items_total{endpoint="/v1/search"} 3.0' in metrics  # the refused one was not embedded
    assert watched.calls == 1


def test_a_search_over_the_budget_in_flight_alone_is_a_413_before_any_embedding(embedder, index,
                                                                             monkeypatch) -> None:
    # --max-search-floats-in-flight set below --max-search-floats: a request between the two can
    # never be searched, so it is refused before the model embeds its queries (it was embedded,
    # then refused when its floats were reserved)
    one_query = 1 * 4 * index.rescore * index.dim  # k 4
    watched = WatchedIndex(index)
    running = _serve(embedder, watched, max_search_floats=3 * one_query, max_search_floats_in_flight=2 * one_query)

    def no_embedding(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the refused search's queries were embedded")

    monkeypatch.setattr(embedder, "encode_partial", no_embedding)
    try:
        refused = _search(running.url, 3, 4)
        metrics = httpx.get(f"{running.url}/metrics", headers=AUTH, timeout=10).text
    finally:
        running.stop()
        monkeypatch.undo()
    error = refused.json()["error"]
    assert refused.status_code == 413 and error["param"] == "k", error
    assert "--max-search-floats-in-flight" in error["message"]
    assert 'vis_embed_items_total{endpoint="/v1/search"}' not in metrics  # nothing accepted for embedding
    assert watched.calls == 0


def test_searches_run_in_the_search_pool_within_the_budget_in_flight(embedder, index) -> None:
    one_request = 2 * 3 * index.rescore * index.dim  # 2 queries at k 3
    watched = WatchedIndex(index, delay_s=0.3)
    running = _serve(embedder, watched, max_search_floats=one_request, max_search_floats_in_flight=one_request,
                     search_workers=4)
    try:
        with ThreadPoolExecutor(3) as pool:
            statuses = [future.result().status_code for future in [pool.submit(_search, running.url, 2, 3)
                                                                   for _ in range(3)]]
    finally:
        running.stop()
    assert statuses == [200] * 3
    assert watched.most_at_once == 1  # the budget held one search's floats at a time, though 4 threads could run
    assert watched.threads and all(name.startswith("vis-embed-search") for name in watched.threads)


def test_a_search_stops_between_blocks_once_its_request_times_out(embedder, index, monkeypatch) -> None:
    monkeypatch.setattr(search_work, "SEARCH_BLOCK_FLOATS", 1)  # one query a block
    watched = WatchedIndex(index, delay_s=0.2)
    running = _serve(embedder, watched, request_timeout_s=1.0)
    try:
        answer = _search(running.url, 40, 2)  # 40 blocks of 0.2 s: 8 s of work
        time.sleep(1.0)
        calls = watched.calls
        time.sleep(0.6)
    finally:
        running.stop()
    assert answer.status_code == 504
    assert calls < 12 and watched.calls <= calls + 1  # stopped: no more blocks after the give-up


def test_a_health_check_is_not_held_by_a_slow_search(embedder, index) -> None:
    watched = WatchedIndex(index, delay_s=2.0)
    running = _serve(embedder, watched)
    try:
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(_search, running.url, 1, 2)
            time.sleep(0.5)
            started = time.monotonic()
            health = httpx.get(f"{running.url}/health", timeout=10)
            seconds = time.monotonic() - started
            assert slow.result().status_code == 200
    finally:
        running.stop()
    assert health.status_code == 200 and seconds < 1.0


class GatherLog:
    """Float vectors that record the rows gathered per fancy-indexing call."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors, self.gathered = vectors, []

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        self.gathered.append(len(rows))
        return self.vectors[rows]


def test_rescoring_gathers_bounded_blocks_with_the_same_answer() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((50, 8)).astype(np.float32)
    queries = rng.standard_normal((30, 8)).astype(np.float32)
    shortlist = np.stack([rng.permutation(50)[:20] for _ in range(30)])
    whole = rescored(queries, shortlist, vectors, 5)
    log = GatherLog(vectors)
    blocked = rescored(queries, shortlist, log, 5, block_floats=20 * 8 * 3)  # 3 queries a block
    assert max(log.gathered) * 8 <= 20 * 8 * 3 and len(log.gathered) == 10
    np.testing.assert_array_equal(whole[1], blocked[1])
    np.testing.assert_allclose(whole[0], blocked[0])
