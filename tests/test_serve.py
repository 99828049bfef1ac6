"""``vis-embed serve``: the OpenAI-compatible embeddings server, on loopback, in process.

A real uvicorn server runs in a thread on a free 127.0.0.1 port around the tiny checkpoint.
Bounded load: under 200 requests in all, each test well under 60 s.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import io
import random
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from PIL import Image  # noqa: E402

from _serve_fixtures import RunningServer, wait_until_healthy  # noqa: E402

from vis_embed.serving.waiting import DISCONNECT_POLL_S  # noqa: E402
from vis_embed.serving.app import create_app  # noqa: E402
from vis_embed.serving.settings import ServerSettings  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.timeout(120)]

MODEL_NAME = "tiny"
INSTRUCTIONS = (None, "Find the same person.")


def _png_data_uri(size: tuple[int, int], colour: tuple[int, int, int]) -> str:
    pixels = np.zeros((size[1], size[0], 3), dtype=np.uint8)
    pixels[...] = colour
    pixels[: size[1] // 2, : size[0] // 2] = 255 - np.array(colour, dtype=np.uint8)  # not flat
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


# Mixed text, image and text+image items of different lengths and sizes.
POOL: list[dict[str, Any]] = (
    [{"text": text} for text in ("a red car", "two people walking a dog in the park at noon",
                                 "blue", "the same woman, seen from the side")]
    + [{"image": _png_data_uri(size, colour)} for size, colour in
       (((56, 56), (200, 30, 30)), ((84, 56), (30, 200, 30)), ((56, 112), (30, 30, 200)), ((70, 70), (90, 90, 0)))]
    + [{"image": _png_data_uri((56, 84), (10, 120, 200)), "text": "this person"},
       {"image": _png_data_uri((112, 56), (250, 200, 0)), "text": "a yellow sign by the road"}]
)


class RecordingEmbedder:
    """Delegates to an Embedder; records each micro-batch group's size, optionally waits on a gate."""

    def __init__(self, embedder: Any, gate: threading.Event | None = None) -> None:
        self._embedder = embedder
        self.gate = gate
        self.group_sizes: list[int] = []

    def encode_partial(self, items, *args, **kwargs):
        self.group_sizes.append(len(items))
        if self.gate is not None:
            assert self.gate.wait(30)
        return self._embedder.encode_partial(items, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)


@pytest.fixture(scope="module")
def expected(embedder) -> dict[str | None, np.ndarray]:
    """instruction -> Embedder.encode(POOL, instruction): the vectors the server must return."""
    return {instruction: embedder.encode(POOL, instruction) for instruction in INSTRUCTIONS}


@pytest.fixture(scope="module")
def served(embedder, expected) -> Iterator[tuple[str, RecordingEmbedder]]:
    recording = RecordingEmbedder(embedder)
    settings = ServerSettings(model_name=MODEL_NAME, max_batch_size=16, max_wait_ms=20, max_queue=64,
                              max_request_bytes=200_000, max_items=32, url_timeout_s=2.0,
                              allow_urls=True, allow_private_urls=True)  # the test image server is on loopback
    running = RunningServer(create_app(recording, settings))
    yield running.url, recording
    running.stop()


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def _embed(url: str, body: dict[str, Any], client: Any = httpx) -> Any:
    return client.post(f"{url}/v1/embeddings", json={"model": MODEL_NAME, **body}, timeout=30)


def _assert_serving(url: str, expected: dict) -> None:
    response = _embed(url, {"input": [POOL[0]]})
    assert response.status_code == 200, response.text
    assert _cos(np.array(response.json()["data"][0]["embedding"]), expected[None][0]) >= 0.99999


def test_openai_client_gets_the_vectors_of_embedder_encode(served, expected) -> None:
    url, _ = served
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
    texts = [POOL[0]["text"], POOL[1]["text"]]
    for instruction in INSTRUCTIONS:
        extra = {"instruction": instruction} if instruction else None
        # Left out, the client asks for base64 and decodes it itself.
        for encoding_format in ("float", openai.NOT_GIVEN):
            response = client.embeddings.create(model=MODEL_NAME, input=texts, encoding_format=encoding_format,
                                                extra_body=extra)
            assert [row.index for row in response.data] == [0, 1]
            for row in response.data:
                assert _cos(np.array(row.embedding), expected[instruction][row.index]) >= 0.99999
            assert response.usage.prompt_tokens > 0
    items = client.embeddings.create(model=MODEL_NAME, input=[POOL[4], POOL[8]])  # items, not strings
    assert _cos(np.array(items.data[1].embedding), expected[None][8]) >= 0.99999
    assert [model.id for model in client.models.list().data] == [MODEL_NAME]
    assert client.models.retrieve(MODEL_NAME).id == MODEL_NAME  # GET /v1/models/{id}
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("another-model")


def test_a_string_input_is_one_text_item(served, expected) -> None:
    url, _ = served
    body = _embed(url, {"input": POOL[3]["text"], "instruction": INSTRUCTIONS[1]}).json()
    assert body["object"] == "list" and body["model"] == MODEL_NAME and len(body["data"]) == 1
    assert body["data"][0]["object"] == "embedding"
    assert _cos(np.array(body["data"][0]["embedding"]), expected[INSTRUCTIONS[1]][3]) >= 0.99999
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] > 0


def test_base64_encoding_decodes_to_the_same_floats(served) -> None:
    url, _ = served
    body = {"input": POOL[:3] + POOL[8:]}
    floats = _embed(url, {**body, "encoding_format": "float"}).json()["data"]
    encoded = _embed(url, {**body, "encoding_format": "base64"}).json()["data"]
    # an explicit null is "not given": the default, floats
    assert _embed(url, {**body, "encoding_format": None}).json()["data"] == floats
    for as_floats, as_base64 in zip(floats, encoded):
        decoded = np.frombuffer(base64.b64decode(as_base64["embedding"]), dtype="<f4")
        np.testing.assert_array_equal(decoded, np.array(as_floats["embedding"], dtype=np.float32))


def test_sixteen_concurrent_clients_get_encode_vectors_and_are_batched_together(served, expected) -> None:
    url, recording = served
    rng = random.Random(0)
    # 16 clients x 5 requests of 1-3 mixed items, two instructions interleaved.
    plans = [[(rng.sample(range(len(POOL)), rng.randint(1, 3)), rng.choice(INSTRUCTIONS)) for _ in range(5)]
             for _ in range(16)]
    recording.group_sizes.clear()

    def client_session(plan) -> list[tuple[list[int], Any, dict]]:
        answers = []
        with httpx.Client(timeout=60) as client:
            for indices, instruction in plan:
                body = {"input": [POOL[i] for i in indices]}
                if instruction:
                    body["instruction"] = instruction
                response = _embed(url, body, client)
                answers.append((indices, instruction, response))
        return answers

    with ThreadPoolExecutor(16) as pool:
        sessions = list(pool.map(client_session, plans))
    for answers in sessions:
        for indices, instruction, response in answers:
            assert response.status_code == 200, response.text
            data = response.json()["data"]
            assert [row["index"] for row in data] == list(range(len(indices)))
            for row, i in zip(data, indices):
                assert _cos(np.array(row["embedding"]), expected[instruction][i]) >= 0.99999
    # Requests were merged: fewer model calls than requests, and some call held several requests' items.
    assert len(recording.group_sizes) < 80
    assert max(recording.group_sizes) > 3


@contextlib.contextmanager
def _gated_server(embedder: Any, **settings: Any) -> Iterator[tuple[RunningServer, RecordingEmbedder, threading.Event]]:
    """A server whose model calls wait on the yielded gate (set on the way out, then stopped)."""
    gate = threading.Event()
    gated = RecordingEmbedder(embedder, gate)
    running = RunningServer(create_app(gated, ServerSettings(model_name=MODEL_NAME, **settings)))
    try:
        yield running, gated, gate
    finally:
        gate.set()
        running.stop()


def test_a_full_queue_answers_429_and_the_server_recovers(embedder, expected) -> None:
    with _gated_server(embedder, max_batch_size=1, max_wait_ms=0, max_queue=2) as (running, _gated, gate):
        with ThreadPoolExecutor(3) as pool:
            first = pool.submit(_embed, running.url, {"input": [POOL[0]]})
            _wait_for(running.app.state.batcher, busy=True, queued=0)  # the worker holds the first request
            waiting = [pool.submit(_embed, running.url, {"input": [POOL[i]]}) for i in (1, 2)]
            _wait_for(running.app.state.batcher, busy=True, queued=2)
            refused = _embed(running.url, {"input": [POOL[3]]})
            assert refused.status_code == 429
            assert refused.json()["error"]["type"] == "rate_limit_error"
            gate.set()
            answers = [first.result(), *(future.result() for future in waiting)]
        assert [answer.status_code for answer in answers] == [200, 200, 200]
        _assert_serving(running.url, expected)


def test_requests_that_gave_up_while_queued_free_their_queue_places(embedder, expected) -> None:
    # Two queued clients left (a client-side timeout, as the openai client's before it retries):
    # their jobs, cancelled but still queued behind the busy forward, kept the queue full -- a
    # third client got 429 and /health counted them as waiting.
    with _gated_server(embedder, max_batch_size=1, max_wait_ms=0, max_queue=2) as (running, _gated, gate):
        with ThreadPoolExecutor(3) as pool:
            first = pool.submit(_embed, running.url, {"input": [POOL[0]]})
            _wait_for(running.app.state.batcher, busy=True, queued=0)  # the worker holds the first request
            leaving = [pool.submit(httpx.post, f"{running.url}/v1/embeddings", timeout=1.0,
                                   json={"model": MODEL_NAME, "input": [POOL[i]]}) for i in (1, 2)]
            for future in leaving:
                with pytest.raises(httpx.TimeoutException):
                    future.result()
            time.sleep(4 * DISCONNECT_POLL_S)  # the server sees both clients gone: their jobs are cancelled
            assert running.app.state.batcher.stats()["queued_requests"] == 0
            staying = pool.submit(_embed, running.url, {"input": [POOL[3]]})
            _wait_for(running.app.state.batcher, busy=True, queued=1)
            gate.set()
            answers = [first.result(), staying.result()]
        assert [answer.status_code for answer in answers] == [200, 200], answers[1].text
        assert _cos(np.array(answers[1].json()["data"][0]["embedding"]), expected[None][3]) >= 0.99999


def test_a_request_that_gives_up_during_its_forward_leaves_its_batch_and_the_server_serving(embedder,
                                                                                          expected) -> None:
    # A request whose client left while the forward it shared ran: its item list was emptied, the
    # rows were sized by it, and an IndexError killed the worker thread -- its batch-mate got no
    # answer and every later request timed out behind a /health that still said ok.
    with _gated_server(embedder, max_batch_size=8, max_wait_ms=300, max_queue=4) as (running, gated, gate):
        with ThreadPoolExecutor(2) as pool:
            leaving = pool.submit(httpx.post, f"{running.url}/v1/embeddings", timeout=1.5,  # gives up while
                                  json={"model": MODEL_NAME, "input": [POOL[0], POOL[1]]})  # the forward waits
            time.sleep(0.05)  # the leaving request first: the batch starts with it and takes the other within 300 ms
            staying = pool.submit(_embed, running.url, {"input": [POOL[4]]})
            with pytest.raises(httpx.TimeoutException):
                leaving.result()
            time.sleep(4 * DISCONNECT_POLL_S)  # the server sees the client gone: the job is cancelled
            gate.set()  # ...and the shared forward returns rows for it
            answer = staying.result()
        assert gated.group_sizes == [3]  # both requests were in one model call
        assert answer.status_code == 200, answer.text
        assert _cos(np.array(answer.json()["data"][0]["embedding"]), expected[None][4]) >= 0.99999
        assert running.app.state.batcher.alive
        _assert_serving(running.url, expected)
        assert httpx.head(f"{running.url}/health").status_code == 200


def test_health_says_503_when_the_model_thread_is_gone(served, monkeypatch: pytest.MonkeyPatch) -> None:
    from vis_embed.serving.batcher import MicroBatcher

    url, _ = served
    monkeypatch.setattr(MicroBatcher, "alive", property(lambda self: False))
    response = httpx.get(f"{url}/health")
    assert response.status_code == 503 and response.json() == {"status": "unavailable"}


def _wait_for(batcher: Any, busy: bool, queued: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        health = batcher.stats()
        if health["busy"] == busy and health["queued_requests"] == queued:
            return
        time.sleep(0.01)
    pytest.fail(f"server never reached busy={busy} queued={queued}: {health}")


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens once closed


_BROKEN_PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n not really a png").decode()

BAD_REQUESTS = {
    "not json": (b"{\"model\": ", 400, None),
    "unknown field": ({"input": "hi", "temperature": 1}, 400, "temperature"),
    "unknown item field": ({"input": [{"text": "ok"}, {"img": "x"}]}, 400, "input[1].img"),
    "empty input": ({"input": []}, 400, "input"),
    "blank text": ({"input": ["fine", "  "]}, 400, "input[1]"),
    "wrong input type": ({"input": 42}, 400, "input"),
    "wrong text type": ({"input": [{"text": 7}]}, 400, "input[0].text"),
    "undecodable image": ({"input": [POOL[0], {"image": _BROKEN_PNG}]}, 400, "input[1].image"),
    "unreachable url": ({"input": [{"image": f"http://127.0.0.1:{_closed_port()}/a.png"}]}, 400, "input[0].image"),
    "local path refused": ({"input": [{"image": "/etc/hostname"}]}, 400, "input[0].image"),
    "bad encoding_format": ({"input": "hi", "encoding_format": "int8"}, 400, "encoding_format"),
    "too many items": ({"input": ["x"] * 33}, 413, "input"),
    "body too large": ({"input": ["x" * 250_000]}, 413, None),
    "unknown model": ({"input": "hi", "model": "gpt-4"}, 404, "model"),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_a_bad_request_gets_its_4xx_naming_the_item_and_the_server_goes_on(served, expected, case) -> None:
    url, _ = served
    body, status, param = BAD_REQUESTS[case]
    if isinstance(body, bytes):
        response = httpx.post(f"{url}/v1/embeddings", content=body, headers={"content-type": "application/json"})
    else:
        response = httpx.post(f"{url}/v1/embeddings", json={"model": MODEL_NAME, **body}, timeout=30)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]
    _assert_serving(url, expected)


def test_an_image_url_is_fetched_and_embedded_like_its_data_uri(served, expected) -> None:
    url, _ = served
    png = base64.b64decode(POOL[5]["image"].split(",", 1)[1])

    class OneImage(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.end_headers()
            self.wfile.write(png)

        def log_message(self, *args) -> None:
            pass

    image_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OneImage)
    threading.Thread(target=image_server.serve_forever, daemon=True).start()
    try:
        image_url = f"http://127.0.0.1:{image_server.server_address[1]}/person.png"
        response = _embed(url, {"input": [{"image": image_url}]})
    finally:
        image_server.shutdown()
    assert response.status_code == 200, response.text
    assert _cos(np.array(response.json()["data"][0]["embedding"]), expected[None][5]) >= 0.99999


def test_health_says_only_ok_without_the_key(served) -> None:
    url, _ = served
    assert httpx.get(f"{url}/health").json() == {"status": "ok"}  # details: with the key (test_serve_security)


class PoisonedEmbedder(RecordingEmbedder):
    """Reports every item whose text is "POISON" as failing inside the model (as a token-limit or
    a decoding failure during preparation would), the way Embedder.encode_partial(on_error="skip") does."""

    def encode_partial(self, items, instruction=None, batch_size=16, on_error="raise", **kwargs):
        from vis_embed.errors import DataError

        self.group_sizes.append(len(items))
        kept = [i for i, item in enumerate(items) if item.get("text") != "POISON"]
        embeddings, _kept, _errors = self._embedder.encode_partial([items[i] for i in kept], instruction,
                                                                   batch_size=batch_size, on_error=on_error)
        errors = {i: DataError("failed inside the model", field="text")
                  for i in range(len(items)) if i not in kept}
        return embeddings, kept, errors


def test_an_item_failing_inside_a_shared_batch_fails_only_its_own_request(embedder, expected) -> None:
    poisoned = PoisonedEmbedder(embedder)
    settings = ServerSettings(model_name=MODEL_NAME, max_batch_size=16, max_wait_ms=500, max_queue=8)
    running = RunningServer(create_app(poisoned, settings))
    try:
        with ThreadPoolExecutor(2) as pool:
            bad = pool.submit(_embed, running.url, {"input": [POOL[0], {"text": "POISON"}]})
            good = pool.submit(_embed, running.url, {"input": [POOL[4], POOL[9]]})
            bad, good = bad.result(), good.result()
        assert poisoned.group_sizes == [4]  # both requests were in one model call
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "input[1].text"
        assert good.status_code == 200, good.text
        rows = good.json()["data"]
        assert _cos(np.array(rows[0]["embedding"]), expected[None][4]) >= 0.99999
        assert _cos(np.array(rows[1]["embedding"]), expected[None][9]) >= 0.99999
    finally:
        running.stop()


@pytest.mark.slow
def test_the_serve_command_serves_the_checkpoint(tiny_checkpoint, expected) -> None:
    import os
    import subprocess
    import sys

    port = _closed_port()
    command = [sys.executable, "-m", "vis_embed", "serve", "--model", str(tiny_checkpoint()),
               "--served-model-name", MODEL_NAME, "--port", str(port), "--dtype", "float32", "--device", "cpu"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, url, process.stdout)
        _assert_serving(url, expected)
    finally:
        process.terminate()
        process.wait(30)
