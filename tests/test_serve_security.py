"""``vis-embed serve`` as a server one can expose (issue 26): isolation of bad requests, bounded
work per request, URLs off by default, API keys, protocol hygiene.

Loopback only; every client loop is bounded (a fixed number of requests).  Timing claims of
the issue (1 MB text within 10 s, RSS under two image bombs) are measured by
``benchmarks/serve_probe.py``; here the properties behind them are tested: a long text never
reaches the tokenizer whole, an over-budget image is refused from its header, and so on.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from _loopback import ScriptedServer, send  # noqa: E402
from _serve_fixtures import RunningServer, wait_until_healthy  # noqa: E402
from PIL import Image  # noqa: E402

from vis_embed.serving.app import create_app  # noqa: E402
from vis_embed.serving.settings import ServerSettings  # noqa: E402
from vis_embed.serving.protocol import header_timeout_protocol  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.timeout(120)]

MODEL = "tiny"
NORMAL = [{"text": "a red car"}, {"text": "two people walking a dog"}]


def _png_uri(size: tuple[int, int], mode: str = "RGB") -> str:
    buffer = io.BytesIO()
    Image.new(mode, size).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


@pytest.fixture(scope="module")
def expected(embedder) -> np.ndarray:
    return embedder.encode(NORMAL)


class Spy:
    """Delegates to an Embedder; records the items each model call got."""

    def __init__(self, embedder: Any, fail_on: str | None = None) -> None:
        self._embedder = embedder
        self.fail_on = fail_on
        self.calls: list[list[dict[str, Any]]] = []

    def encode_partial(self, items, *args, **kwargs):
        self.calls.append(list(items))
        if self.fail_on is not None and any(item.get("text") == self.fail_on for item in items):
            raise RuntimeError("an input the model cannot take")  # a failure nothing foresaw
        return self._embedder.encode_partial(items, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)


def _serve(embedder: Any, **settings: Any) -> RunningServer:
    return RunningServer(create_app(embedder, ServerSettings(model_name=MODEL, **settings)))


def _post(url: str, body: Any, headers: dict[str, str] | None = None, raw: bytes | None = None) -> Any:
    content = raw if raw is not None else json.dumps({"model": MODEL, **body}).encode()
    return httpx.post(f"{url}/v1/embeddings", content=content, timeout=60,
                      headers={"content-type": "application/json", **(headers or {})})


def _assert_normal(response: Any, expected: np.ndarray) -> None:
    assert response.status_code == 200, response.text
    vectors = np.array([row["embedding"] for row in response.json()["data"]])
    np.testing.assert_allclose(vectors, expected, atol=1e-5)


@pytest.fixture(scope="module")
def server(embedder):
    spy = Spy(embedder)
    running = _serve(spy, max_wait_ms=50, max_input_tokens=64, max_request_pixels=20_000)
    yield running.url, spy, running.app.state.limiter
    running.stop()


# ---------------------------------------------------------------- isolation
POISON = {
    "lone surrogate text": (b'{"model": "tiny", "input": ["\\ud800"]}', "input[0]"),
    "lone surrogate in an item": (b'{"model": "tiny", "input": [{"text": "ok \\udfff"}]}', "input[0].text"),
    "infinite bbox": (f'{{"model": "tiny", "input": [{{"image": "{_png_uri((8, 8))}", '
                      f'"bbox": [0, 0, Infinity, 5]}}]}}'.encode(), None),
    "bbox outside the image": (json.dumps({"model": MODEL, "input": [{"image": _png_uri((8, 8)),
                                                                      "bbox": [0, 0, 9, 5]}]}).encode(),
                               "input[0].bbox"),
    "lone surrogate instruction": (b'{"model": "tiny", "input": "hi", "instruction": "\\ud800"}', "instruction"),
}


@pytest.mark.parametrize("case", sorted(POISON))
def test_a_poison_request_among_concurrent_clients_fails_alone(server, expected, case) -> None:
    """4 clients x 6 normal requests while the poison is sent 6 times: every normal request
    gets its vectors, every poison a 400, and the poison never reaches the model."""
    url, spy, _limiter = server
    raw, param = POISON[case]
    spy.calls.clear()

    def normal_client(_: int) -> list[Any]:
        return [_post(url, {"input": NORMAL}) for _ in range(6)]

    with ThreadPoolExecutor(5) as pool:
        normal = [pool.submit(normal_client, i) for i in range(4)]
        poison = [_post(url, None, raw=raw) for _ in range(6)]
        answers = [response for future in normal for response in future.result()]
    for response in answers:
        _assert_normal(response, expected)
    for response in poison:
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == param
    texts = [item.get("text") for call in spy.calls for item in call]
    assert all(text is None or text.encode("utf-8") for text in texts)  # only valid items were batched


def test_a_batch_that_fails_anyway_is_retried_apart(embedder, expected) -> None:
    """An input that passes every check but still breaks the shared model call fails alone (400)."""
    spy = Spy(embedder, fail_on="unforeseen")
    running = _serve(spy, max_wait_ms=500)
    try:
        with ThreadPoolExecutor(2) as pool:
            bad = pool.submit(_post, running.url, {"input": ["unforeseen"]})
            time.sleep(0.05)
            good = pool.submit(_post, running.url, {"input": NORMAL})
            bad, good = bad.result(), good.result()
    finally:
        running.stop()
    assert [len(call) for call in spy.calls] == [3, 1, 2]  # together, then apart
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    _assert_normal(good, expected)


# ---------------------------------------------------------------- bounded work
def test_a_long_text_is_refused_without_tokenizing_it_whole(server, expected) -> None:
    url, spy, limiter = server
    limiter_tokenizer = _record_tokenizer_inputs(limiter)
    megabyte = "word " * 200_000
    response = _post(url, {"input": [megabyte]})
    assert response.status_code == 400 and response.json()["error"]["param"] == "input[0]"
    assert "--max-input-tokens" in response.json()["error"]["message"]
    assert max(limiter_tokenizer, default=0) <= 64 * 16  # cut by characters before tokenizing
    assert all(len(item.get("text") or "") < 10_000 for call in spy.calls for item in call)
    over = _post(url, {"input": ["word " * 100]})  # short in characters, 100+ tokens
    assert over.status_code == 400


def _record_tokenizer_inputs(limiter: Any) -> list[int]:
    lengths: list[int] = []
    tokenizer = limiter._tokenizer

    class Recording:
        def __call__(self, text, *args, **kwargs):
            lengths.append(len(text))
            return tokenizer(text, *args, **kwargs)

        def __getattr__(self, name):
            return getattr(tokenizer, name)

    limiter._tokenizer = Recording()
    return lengths


def test_truncate_mode_cuts_the_text_and_usage_counts_the_embedded_tokens(embedder) -> None:
    running = _serve(embedder, max_input_tokens=16, long_input="truncate")
    try:
        tokenizer = embedder.model.processor.tokenizer
        long_text = " ".join(f"w{i}" for i in range(2_000))
        response = _post(running.url, {"input": [long_text, "short"]})
    finally:
        running.stop()
    assert response.status_code == 200, response.text
    embedded = response.json()["data"][0]["embedding"]
    short_tokens = len(tokenizer("short", add_special_tokens=False)["input_ids"])
    prompt_tokens = response.json()["usage"]["prompt_tokens"]
    assert 16 - 3 <= prompt_tokens - short_tokens <= 16  # the cut text's tokens, not 2,000+
    # The vector is that of a text cut to fit 16 tokens (what Embedder.encode gives it).
    ids = tokenizer(long_text, add_special_tokens=False)["input_ids"]
    candidates = [tokenizer.decode(ids[:n]) for n in range(12, 17)]
    vectors = embedder.encode([{"text": text} for text in candidates])
    assert max(float(np.dot(vector, embedded)) for vector in vectors) >= 0.99999


def test_the_request_pixel_budget_is_checked_from_headers_before_decoding(server, monkeypatch) -> None:
    from vis_embed.serving import images

    url, _spy, _limiter = server
    decoded: list[Any] = []
    real_load = images.load_image
    monkeypatch.setattr(images, "load_image", lambda source, *a, **k: decoded.append(1) or real_load(source, *a, **k))
    fits = _post(url, {"input": [{"image": _png_uri((100, 100))}, {"image": _png_uri((100, 99))}]})
    assert fits.status_code == 200, fits.text
    decoded.clear()
    # 9,000 x 9,000 1-bit: 10 KB of PNG, 243 MB of RGB once decoded; refused unread.
    bomb = _png_uri((9_000, 9_000), mode="1")
    refused = _post(url, {"input": [{"image": _png_uri((100, 100))}, {"image": bomb}]})
    assert refused.status_code == 413 and refused.json()["error"]["param"] == "input[1].image"
    assert not decoded  # every header is read before any image is decoded


def test_a_request_past_its_deadline_gets_504_and_is_never_run(embedder, expected) -> None:
    gate = threading.Event()

    class Gated(Spy):
        def encode_partial(self, items, *args, **kwargs):
            assert gate.wait(30)
            return super().encode_partial(items, *args, **kwargs)

    gated = Gated(embedder)
    running = _serve(gated, request_timeout_s=1.0, max_wait_ms=0)
    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(_post, running.url, {"input": ["holds the worker"]})
            time.sleep(0.3)
            late = _post(running.url, {"input": ["waits in the queue"]})
            assert late.status_code == 504
            gate.set()
            assert first.result().status_code == 504  # its deadline passed in the model call
        _assert_normal(_post(running.url, {"input": NORMAL}), expected)
    finally:
        gate.set()
        running.stop()
    texts = [item["text"] for call in gated.calls for item in call]
    assert "waits in the queue" not in texts  # cancelled while queued: no model time spent


# ---------------------------------------------------------------- URLs
def test_urls_are_off_by_default_and_loopback_stays_off_with_allow_urls(embedder) -> None:
    image = base64.b64decode(_png_uri((16, 16)).split(",", 1)[1])
    listener = ScriptedServer(lambda handler: send(handler, 200, image, {"Content-Type": "image/png"}))
    try:
        body = {"input": [{"image": f"{listener.url}/a.png"}]}
        for settings, status in (({}, 400), ({"allow_urls": True}, 400),
                                 ({"allow_urls": True, "allow_private_urls": True}, 200)):
            running = _serve(embedder, **settings)
            try:
                response = _post(running.url, body)
            finally:
                running.stop()
            assert response.status_code == status, (settings, response.text)
            if status == 400:
                assert response.json()["error"]["param"] == "input[0].image"
                assert listener.hits == 0  # refused before any connection
    finally:
        listener.close()
    assert listener.hits == 1


# ---------------------------------------------------------------- keys
def test_an_api_key_guards_every_endpoint_but_health(embedder, expected, monkeypatch) -> None:
    running = _serve(embedder, api_key="s3cret")
    try:
        url = running.url
        assert _post(url, {"input": NORMAL}).status_code == 401
        assert _post(url, {"input": NORMAL}, {"authorization": "Bearer wrong"}).status_code == 401
        assert _post(url, {"input": NORMAL}, {"authorization": "Basic s3cret"}).status_code == 401
        assert httpx.get(f"{url}/v1/models").status_code == 401
        assert httpx.get(f"{url}/openapi.json").status_code == 404
        assert httpx.get(f"{url}/health").status_code == 200
        _assert_normal(_post(url, {"input": NORMAL}, {"authorization": "Bearer s3cret"}), expected)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="s3cret")
        rows = client.embeddings.create(model=MODEL, input=[item["text"] for item in NORMAL]).data
        np.testing.assert_allclose(np.array([row.embedding for row in rows]), expected, atol=1e-5)
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{url}/v1", api_key="guess", max_retries=0).embeddings.create(
                model=MODEL, input="x")
    finally:
        running.stop()


# ---------------------------------------------------------------- protocol
HYGIENE = {
    "text/plain": ({"content-type": "text/plain"}, json.dumps({"model": MODEL, "input": "hi"}).encode(), 415),
    "form": ({"content-type": "application/x-www-form-urlencoded"}, b"model=tiny&input=hi", 415),
    "nested": ({}, b'{"model": "tiny", "input": "hi", "user": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400),
    "shallow but too deep": ({}, b'{"model": "tiny", "input": [[[[[[[[["x"]]]]]]]]]}', 400),
    "5000 digits": ({}, b'{"model": "tiny", "input": "hi", "dimensions": 1' + b"0" * 5000 + b"}", 400),
    "NaN": ({}, b'{"model": "tiny", "input": [{"text": "x", "bbox": [NaN, 0, 1, 1]}]}', 400),
    "1e999": ({}, b'{"model": "tiny", "input": "hi", "dimensions": 1e999}', 400),
}


@pytest.mark.parametrize("case", sorted(HYGIENE))
def test_bodies_that_are_not_plain_json_get_4xx(server, expected, case) -> None:
    url, _spy, _limiter = server
    headers, raw, status = HYGIENE[case]
    response = httpx.post(f"{url}/v1/embeddings", content=raw, timeout=30,
                          headers={"content-type": "application/json", **headers})
    assert response.status_code == status, response.text
    assert response.json()["error"]["message"]
    _assert_normal(_post(url, {"input": NORMAL}), expected)


def test_a_body_of_many_tiny_json_values_is_refused_before_it_is_parsed(server, expected) -> None:
    """200,000 empty lists in a 600 KB body (a 32 MiB one: 11 M lists, +1.6 GB and /health stalled
    6 s while the event loop parsed it) are a 413 counted from the bytes, never parsed."""
    url, _spy, _limiter = server
    raw = b'{"model": "tiny", "input": "hi", "user": [' + b"[]," * 200_000 + b"[]]}"
    response = httpx.post(f"{url}/v1/embeddings", content=raw, timeout=30, headers={"content-type": "application/json"})
    assert response.status_code == 413, response.text
    assert "JSON values" in response.json()["error"]["message"]
    _assert_normal(_post(url, {"input": NORMAL}), expected)


def test_the_json_value_bound_leaves_room_for_every_item_a_request_may_hold() -> None:
    """--max-items items of text (commas, brackets, escaped quotes and backslashes), image and bbox pass."""
    from vis_embed.serving.schemas import parse_request

    item = {"text": 'a, [b] {c} \\ " d\\', "image": "data:image/png;base64,AAAA", "bbox": [1, 2, 3, 4]}
    body = json.dumps({"model": MODEL, "input": [item] * 4096}).encode()
    assert len(parse_request(body, max_items=4096).input) == 4096


def test_a_foreign_host_header_is_refused_against_dns_rebinding(embedder, expected) -> None:
    from vis_embed.serving.hosts import LOOPBACK_HOSTS

    running = _serve(embedder, allowed_hosts=LOOPBACK_HOSTS)
    try:
        rebound = _post(running.url, {"input": NORMAL}, {"host": "attacker.example"})
        assert rebound.status_code == 400 and "Host" in rebound.json()["error"]["message"]
        assert httpx.get(f"{running.url}/health", headers={"host": "attacker.example:80"}).status_code == 400
        _assert_normal(_post(running.url, {"input": NORMAL}), expected)  # Host: 127.0.0.1:PORT
        _assert_normal(_post(running.url, {"input": NORMAL}, {"host": "localhost"}), expected)
    finally:
        running.stop()


def test_a_connection_that_never_finishes_its_headers_is_closed(embedder) -> None:
    running = RunningServer(create_app(embedder, ServerSettings(model_name=MODEL)),
                            http=header_timeout_protocol(0.5))
    try:
        port = int(running.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as half_sent:
            half_sent.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n")  # no blank line: never ends
            assert half_sent.recv(100) == b""  # closed by the server (the recv timeout is 10 s)
        assert httpx.get(f"{running.url}/health").status_code == 200  # a whole request is unaffected
    finally:
        running.stop()


def test_the_serve_command_takes_its_key_from_the_environment(tiny_checkpoint, expected) -> None:
    import os
    import subprocess
    import sys

    from _loopback import closed_port

    port = closed_port()
    command = [sys.executable, "-m", "vis_embed", "serve", "--model", str(tiny_checkpoint()), "--served-model-name",
               MODEL, "--port", str(port), "--dtype", "float32", "--device", "cpu", "--header-timeout", "2"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1", "VIS_EMBED_API_KEY": "from-env"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, url, process.stderr)
        assert _post(url, {"input": NORMAL}).status_code == 401
        _assert_normal(_post(url, {"input": NORMAL}, {"authorization": "Bearer from-env"}), expected)
    finally:
        process.terminate()
        process.wait(30)
