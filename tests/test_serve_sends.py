"""Answers nobody reads (serving/sends.py through serving/protocol.py): a send deadline and
bounds on unsent bytes per connection and in total, counted in /metrics; a malformed request
answered in the API's error shape."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from fastapi.responses import Response  # noqa: E402

from _serve_fixtures import RunningServer  # noqa: E402
from vis_embed.serving.app import create_app  # noqa: E402
from vis_embed.serving.settings import ServerSettings  # noqa: E402
from vis_embed.serving.protocol import header_timeout_protocol  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.timeout(120)]
ANSWER_BYTES = 48 * 2 ** 20  # far more than the kernel's socket buffers hold


def _serve(embedder: Any, **settings: Any) -> RunningServer:
    app = create_app(embedder, ServerSettings(model_name="tiny", **settings))
    app.add_api_route("/big", lambda: Response(b"x" * ANSWER_BYTES, media_type="text/plain"))
    return RunningServer(app, http=header_timeout_protocol(10.0, 16384, app.state.send_guard))


def _never_reading(url: str) -> socket.socket:
    """A client that asks for /big and reads nothing (a small receive buffer, so the server's fills)."""
    host, port = url.removeprefix("http://").split(":")
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect((host, int(port)))
    client.sendall(b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    return client


def _metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def _cut(client: socket.socket, seconds: float = 10) -> bool:
    """The server closed (or reset) the client's connection before it read the whole answer
    (False: the connection was still open after ``seconds`` of reading)."""
    client.settimeout(seconds)
    received = 0
    try:
        while chunk := client.recv(1 << 20):
            received += len(chunk)
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    finally:
        client.close()
    return received < ANSWER_BYTES


def _wait_for(condition, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def test_an_answer_not_read_within_the_send_timeout_is_cut_and_its_bytes_freed(embedder) -> None:
    running = _serve(embedder, send_timeout_s=1.0)
    try:
        client = _never_reading(running.url)
        assert _wait_for(lambda: _metric(running.url, "vis_embed_unsent_bytes") > 2 ** 20, 5)
        assert _wait_for(lambda: _metric(running.url, 'vis_embed_connections_cut_total{reason="send_timeout"}') == 1)
        assert _metric(running.url, "vis_embed_unsent_bytes") == 0
        assert _cut(client)
    finally:
        running.stop()


def test_a_reader_within_the_deadline_gets_the_whole_answer(embedder) -> None:
    running = _serve(embedder, send_timeout_s=5.0)
    try:
        answer = httpx.get(f"{running.url}/big", timeout=30)
        assert answer.status_code == 200 and len(answer.content) == ANSWER_BYTES
        assert _metric(running.url, "vis_embed_connections_cut_total") == 0
    finally:
        running.stop()


def test_unsent_bytes_over_the_connection_bound_are_cut_at_once(embedder) -> None:
    running = _serve(embedder, send_timeout_s=60.0, max_unsent_bytes=2 ** 20)
    try:
        client = _never_reading(running.url)
        assert _wait_for(lambda: _metric(running.url, 'vis_embed_connections_cut_total{reason="unsent_bytes"}') == 1,
                         5)
        assert _cut(client)
    finally:
        running.stop()


def test_unsent_bytes_over_the_total_cut_the_longest_waiting_first(embedder) -> None:
    running = _serve(embedder, send_timeout_s=60.0, max_unsent_bytes_total=ANSWER_BYTES + ANSWER_BYTES // 2)
    try:
        first = _never_reading(running.url)
        assert _wait_for(lambda: _metric(running.url, "vis_embed_unsent_bytes") > ANSWER_BYTES // 2, 5)
        second = _never_reading(running.url)
        assert _wait_for(lambda: _metric(
            running.url, 'vis_embed_connections_cut_total{reason="unsent_bytes_total"}') == 1, 5)
        assert _metric(running.url, "vis_embed_unsent_bytes") <= ANSWER_BYTES + ANSWER_BYTES // 2
        assert _cut(first, 5)
        assert not _cut(second, 0.5)  # the later one still waits (its answer keeps coming as it reads)
    finally:
        running.stop()


def test_a_malformed_request_is_answered_in_the_api_error_shape(embedder) -> None:
    running = _serve(embedder)
    try:
        host, port = running.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as client:
            client.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n")
            reply = b""
            while chunk := client.recv(4096):
                reply += chunk
    finally:
        running.stop()
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head
    assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}


def test_a_path_with_a_newline_is_not_served_nor_counted_under_its_raw_path(embedder) -> None:
    running = _serve(embedder)
    try:
        host, port = running.url.removeprefix("http://").split(":")
        body = json.dumps({"model": "tiny", "input": ["a", "b"]}).encode()
        with socket.create_connection((host, int(port)), timeout=30) as client:
            client.sendall(b"POST /v1/embeddings%0a HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                           b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            reply = b""
            while chunk := client.recv(4096):
                reply += chunk
        metrics = httpx.get(f"{running.url}/metrics", timeout=10).text
    finally:
        running.stop()
    head, _, answer = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404") and set(json.loads(answer)) == {"error"}
    labels = [line for line in metrics.splitlines() if line.startswith("vis_embed_requests_total{")]
    assert labels and all('endpoint="unmatched"' in line for line in labels), labels
    assert "vis_embed_items_total{" not in metrics  # nothing was embedded
