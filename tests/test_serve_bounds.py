"""``vis-embed serve``, security round 2 (issue 39): bounded work and memory for every request,
whatever its bytes say.  Each test crafts one hostile input of the red team's report, small.

Loopback only; every client loop is bounded.  The attacks at full size (RSS, bystander latency)
are rerun by ``benchmarks/serve_attacks.py``; here the properties behind them are tested.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from _loopback import ScriptedServer, closed_port, send  # noqa: E402
from _serve_fixtures import RunningServer  # noqa: E402
from PIL import Image  # noqa: E402

from vis_embed.cli import main  # noqa: E402
from vis_embed.data.images import load_image  # noqa: E402
from vis_embed.errors import DataError  # noqa: E402
from vis_embed.serving.app import create_app  # noqa: E402
from vis_embed.serving.settings import ServerSettings  # noqa: E402
from vis_embed.serving.protocol import header_timeout_protocol  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.timeout(120)]

MODEL = "tiny"
TEXTS = ["a red car", "two people walking a dog"]


def _encoded(image: Image.Image, **save: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, **save)
    return buffer.getvalue()


def _uri(data: bytes, kind: str = "png") -> str:
    return f"data:image/{kind};base64," + base64.b64encode(data).decode("ascii")


def _serve(embedder: Any, http: Any = None, **settings: Any) -> RunningServer:
    options = {} if http is None else {"http": http}
    return RunningServer(create_app(embedder, ServerSettings(model_name=MODEL, **settings)), **options)


def _post(url: str, body: dict[str, Any], timeout: float = 60, headers: dict[str, str] | None = None) -> Any:
    return httpx.post(f"{url}/v1/embeddings", content=json.dumps({"model": MODEL, **body}).encode(), timeout=timeout,
                      headers={"content-type": "application/json", **(headers or {})})


@pytest.fixture()
def slow_forwards(embedder, monkeypatch) -> list[int]:
    """Each forward of the tiny model takes 0.1 s more; the list counts the forwards."""
    calls: list[int] = []
    model = embedder.model
    real_forward = model.forward

    def forward(*args, **kwargs):
        calls.append(1)
        time.sleep(0.1)
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", forward)
    return calls


# ---------------------------------------------------------------- 1. pixels of every buffer
def test_a_one_pixel_high_sliver_is_scaled_down_before_its_canvas_is_allocated(embedder) -> None:
    """A 60000 x 1 mode-"1" PNG (a few hundred bytes) asked for a 60000 x 300 canvas (18 Mpx);
    the canvas is now bounded by a few times the model's pixel budget."""
    preparer = embedder.model.preparer()
    sliver = _encoded(Image.new("1", (60_000, 1), 1), format="PNG")
    assert len(sliver) < 2_000
    image = preparer.load_image({"image": _uri(sliver)})
    assert image.width * image.height <= 4 * preparer.config.max_pixels
    assert max(image.size) <= 200 * min(image.size)  # still within the processor's ratio
    assert embedder.encode([{"image": _uri(sliver)}]).shape[0] == 1


def test_the_pixels_of_all_requests_in_flight_are_bounded(embedder, monkeypatch) -> None:
    """Two requests of 15,000 pixels each under a 20,000-pixel budget: the second is decoded
    only once the first has been answered."""
    from vis_embed.serving import images

    gate, decoded = threading.Event(), []
    real_load = images.load_image
    monkeypatch.setattr(images, "load_image", lambda *a, **k: decoded.append(1) or real_load(*a, **k))

    class Gated:
        def __init__(self) -> None:
            self.calls = 0

        def encode_partial(self, *args, **kwargs):
            self.calls += 1
            assert gate.wait(30)
            return embedder.encode_partial(*args, **kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(embedder, name)

    gated = Gated()
    running = _serve(gated, max_pixels_in_flight=20_000, max_wait_ms=0)
    body = {"input": [{"image": _uri(_encoded(Image.new("RGB", (100, 150)), format="PNG"))}]}
    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(_post, running.url, body)
            _until(lambda: gated.calls == 1)
            second = pool.submit(_post, running.url, body)
            time.sleep(0.5)
            assert len(decoded) == 1  # the second waits for pixels, undecoded
            gate.set()
            assert first.result().status_code == 200 and second.result().status_code == 200
        assert len(decoded) == 2 and running.app.state.batcher.stats()["queued_requests"] == 0
        too_big = _post(running.url, {"input": [{"image": _uri(_encoded(Image.new("1", (200, 150)),
                                                                         format="PNG"))}]})
        assert too_big.status_code == 413
    finally:
        gate.set()
        running.stop()


def test_a_pixel_budget_serves_waiters_first_come_first_served() -> None:
    from vis_embed.serving.budget import PixelBudget
    from vis_embed.serving.errors import RequestError

    async def scenario() -> list[str]:
        budget, order = PixelBudget(100), []

        async def request(name: str, pixels: int, hold_s: float) -> None:
            async with budget.reservation() as reservation:
                await reservation.acquire(pixels)
                order.append(name)
                await asyncio.sleep(hold_s)

        await asyncio.gather(request("a", 60, 0.1), request("b", 60, 0), request("c", 30, 0))
        with pytest.raises(RequestError) as refused:
            async with budget.reservation() as reservation:
                await reservation.acquire(101)
        assert refused.value.status == 413 and budget.used == 0
        return order

    assert asyncio.run(scenario()) == ["a", "b", "c"]  # c fits beside a, but b came first


# ---------------------------------------------------------------- 2. formats and error texts
EPS = (b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n%%EndComments\n"
       b"newpath 0 0 moveto 10 10 lineto stroke\nshowpage\n%%EOF\n")


@pytest.mark.parametrize("name", ["eps", "ico with a png inside"])
def test_formats_outside_the_allow_list_are_never_opened(name) -> None:
    data = EPS if name == "eps" else _encoded(Image.new("RGB", (32, 32)), format="ICO", sizes=[(32, 32)])
    with pytest.raises(DataError) as refused:
        load_image(_uri(data))
    assert "not one of JPEG" in refused.value.reason


def test_decode_errors_show_no_heap_address() -> None:
    with pytest.raises(DataError) as refused:
        load_image(b"not an image at all")
    assert "0x" not in str(refused.value) and "BytesIO" not in str(refused.value)


def test_no_input_gets_a_500_with_the_exception_text(embedder, monkeypatch) -> None:
    running = _serve(embedder)
    try:
        eps = _post(running.url, {"input": [{"image": _uri(EPS)}]})
        assert eps.status_code == 400 and eps.json()["error"]["param"] == "input[0].image"
        assert "Ghostscript" not in eps.text and "/tmp" not in eps.text
        limiter = running.app.state.limiter
        monkeypatch.setattr(limiter, "apply", lambda *a: (_ for _ in ()).throw(RuntimeError("/srv/secret 0x7f00")))
        broken = _post(running.url, {"input": TEXTS})
        assert broken.status_code == 500 and "secret" not in broken.text and "0x7f" not in broken.text
        assert broken.json()["error"]["type"] == "server_error"
    finally:
        running.stop()


def _progressive_jpeg_with_scans(extra: int) -> bytes:
    data = _encoded(Image.new("RGB", (64, 64), (200, 10, 10)), format="JPEG", progressive=True)
    last_scan = data.rindex(b"\xff\xda")
    scan = data[last_scan:-2]  # the last scan, up to the end-of-image marker
    return data[:-2] + scan * extra + data[-2:]


def test_a_progressive_jpeg_with_absurdly_many_scans_is_refused_before_decoding() -> None:
    assert load_image(_progressive_jpeg_with_scans(0)).size == (64, 64)
    with pytest.raises(DataError) as refused:
        load_image(_progressive_jpeg_with_scans(150))
    assert "scans" in refused.value.reason


def test_a_decode_past_its_deadline_is_stopped() -> None:
    noise = Image.frombytes("L", (512, 512), bytes(range(256)) * 1024)
    data = _encoded(noise, format="PNG")
    assert load_image(data, max_decode_s=30).size == (512, 512)
    with pytest.raises(DataError) as refused:
        load_image(data, max_decode_s=0)
    assert "too long" in refused.value.reason


# ---------------------------------------------------------------- 3. tokens and abandoned work
def test_a_request_over_its_token_budget_gets_413_before_the_model(embedder) -> None:
    calls: list[int] = []

    class Counting:
        def encode_partial(self, items, *args, **kwargs):
            calls.append(len(items))
            return embedder.encode_partial(items, *args, **kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(embedder, name)

    running = _serve(Counting(), max_request_tokens=400)
    try:
        instruction = "find " * 20  # 61 tokens (the tiny tokenizer), in each item
        refused = _post(running.url, {"input": ["x"] * 40, "instruction": instruction})
        assert refused.status_code == 413 and "--max-request-tokens" in refused.json()["error"]["message"]
        assert _post(running.url, {"input": ["x"] * 4, "instruction": instruction}).status_code == 200
    finally:
        running.stop()
    assert calls == [4]


def test_a_running_request_that_times_out_stops_between_forward_batches(embedder, slow_forwards) -> None:
    running = _serve(embedder, max_batch_size=2, request_timeout_s=0.5)
    try:
        timed_out = _post(running.url, {"input": [f"item {i}" for i in range(30)]})
        assert timed_out.status_code == 504
        time.sleep(0.5)  # one forward may still be finishing
        forwards = len(slow_forwards)
        assert forwards < 10  # 15 without the stop
        assert _post(running.url, {"input": TEXTS}).status_code == 200  # the next one is served
    finally:
        running.stop()


def test_a_client_that_goes_away_stops_its_work(embedder, slow_forwards) -> None:
    running = _serve(embedder, max_batch_size=2)
    try:
        with pytest.raises(httpx.TimeoutException):
            _post(running.url, {"input": [f"item {i}" for i in range(30)]}, timeout=0.5)
        time.sleep(1.0)  # the server looks every 0.25 s, then one forward finishes
        assert len(slow_forwards) < 12
    finally:
        running.stop()


def test_text_requests_never_wait_behind_image_decodes(embedder, monkeypatch) -> None:
    """Eight image requests stuck in decoding (more than the event loop's default pool has
    threads); a text-only request is answered meanwhile."""
    from vis_embed.serving import images

    gate = threading.Event()
    real_load = images.load_image
    monkeypatch.setattr(images, "load_image", lambda *a, **k: gate.wait(30) and real_load(*a, **k))
    running = _serve(embedder, decode_workers=1)
    body = {"input": [{"image": _uri(_encoded(Image.new("RGB", (32, 32)), format="PNG"))}]}
    try:
        with ThreadPoolExecutor(8) as pool:
            stuck = [pool.submit(_post, running.url, body) for _ in range(8)]
            time.sleep(0.5)
            text = _post(running.url, {"input": TEXTS}, timeout=10)
            gate.set()
            assert all(future.result().status_code == 200 for future in stuck)
        assert text.status_code == 200
    finally:
        gate.set()
        running.stop()


# ---------------------------------------------------------------- 4. connections and heads
def test_the_header_deadline_is_rearmed_for_every_request_on_a_kept_alive_connection(embedder) -> None:
    running = _serve(embedder, http=header_timeout_protocol(0.5))
    try:
        with socket.create_connection(("127.0.0.1", _port(running)), timeout=10) as kept:
            kept.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            reply = b""
            while not reply.endswith(b'{"status":"ok"}'):
                reply += kept.recv(1000)
            kept.sendall(b"G")  # one byte of a next request, then nothing
            started = time.monotonic()
            assert kept.recv(100) == b""  # closed by the server (the recv timeout is 10 s)
            assert time.monotonic() - started < 5
    finally:
        running.stop()


def test_a_request_head_over_the_cap_gets_431_even_in_one_write(embedder) -> None:
    running = _serve(embedder, http=header_timeout_protocol(5, max_header_bytes=16_384))
    try:
        with socket.create_connection(("127.0.0.1", _port(running)), timeout=10) as big:
            big.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 70_000 + b"\r\n\r\n")
            answer = big.recv(1000)
        assert answer.startswith(b"HTTP/1.1 431") and b'"error"' in answer
        assert httpx.get(f"{running.url}/health", headers={"x-small": "b" * 1000}).status_code == 200
    finally:
        running.stop()


def _port(running: RunningServer) -> int:
    return int(running.url.rsplit(":", 1)[1])


# ---------------------------------------------------------------- 6. URLs
def test_url_fetches_run_in_parallel_and_end_with_their_request(embedder) -> None:
    """8 URLs that answer after 3 s, a 1 s request deadline: 4 fetched at once, the other 4
    never started, the request answered 504 at its deadline."""
    image = _encoded(Image.new("RGB", (16, 16)), format="PNG")
    active, peak, lock = [0], [0], threading.Lock()

    def slow(handler) -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            time.sleep(3)
            send(handler, 200, image, {"Content-Type": "image/png"})
        except OSError:
            pass
        finally:
            with lock:
                active[0] -= 1

    listener = ScriptedServer(slow)
    running = _serve(embedder, allow_urls=True, allow_private_urls=True, request_timeout_s=1.0)
    try:
        started = time.monotonic()
        response = _post(running.url, {"input": [{"image": f"{listener.url}/{i}.png"} for i in range(8)]})
        assert response.status_code == 504 and time.monotonic() - started < 2.5
        time.sleep(3.5)
        assert listener.hits == 4 and peak[0] == 4
    finally:
        running.stop()
        listener.close()


def test_every_refused_or_failed_url_reads_the_same(embedder) -> None:
    listener = ScriptedServer(lambda handler: send(handler, 404))
    messages = []
    try:
        for settings, url in (({}, f"http://127.0.0.1:{closed_port()}/a.png"),  # private: refused
                              ({"allow_private_urls": True}, f"http://127.0.0.1:{closed_port()}/a.png"),  # closed
                              ({"allow_private_urls": True}, f"{listener.url}/a.png")):  # HTTP 404
            running = _serve(embedder, allow_urls=True, **settings)
            try:
                response = _post(running.url, {"input": [{"image": url}]})
            finally:
                running.stop()
            assert response.status_code == 400
            messages.append(response.json()["error"]["message"])
    finally:
        listener.close()
    assert len(set(messages)) == 1, messages


@pytest.mark.parametrize("address, public", [
    ("64:ff9b::10.0.0.1", False), ("64:ff9b::127.0.0.1", False), ("64:ff9b::8.8.8.8", True),
    ("2002:a9fe:a9fe::1", False), ("2002:0808:0808::1", True),  # 6to4 of 169.254.169.254, of 8.8.8.8
    ("::10.0.0.1", False), ("::127.0.0.1", False), ("::ffff:0:192.168.1.1", False),
    ("::ffff:10.0.0.1", False), ("2606:4700::1111", True), ("::1", False)])
def test_ipv6_forms_that_embed_an_ipv4_are_judged_by_it(address, public) -> None:
    from vis_embed.data.fetch import is_public_address

    assert is_public_address(address) is public


# ---------------------------------------------------------------- 7. what the server shows
def test_health_docs_and_routing_errors_show_nothing_more_than_needed(embedder) -> None:
    keyless, keyed = _serve(embedder), _serve(embedder, api_key="k3y")
    try:
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert httpx.get(f"{keyless.url}{path}").status_code == 404
        missing = httpx.get(f"{keyless.url}/nowhere")
        wrong_method = httpx.get(f"{keyless.url}/v1/embeddings")
        assert (missing.status_code, wrong_method.status_code) == (404, 405)
        for response in (missing, wrong_method):
            assert set(response.json()) == {"error"} and response.json()["error"]["message"]
        assert httpx.get(f"{keyless.url}/health").json() == {"status": "ok"}
        assert httpx.get(f"{keyed.url}/health").json() == {"status": "ok"}
        details = httpx.get(f"{keyed.url}/health", headers={"authorization": "Bearer k3y"}).json()
        assert details["model"] == MODEL and details["queued_requests"] == 0
    finally:
        keyless.stop()
        keyed.stop()


# ---------------------------------------------------------------- 8. memory
def test_serve_caps_malloc_arenas_unless_the_operator_chose() -> None:
    import sys

    from vis_embed.serving.cli import MALLOC_ARENAS, limit_malloc_arenas

    environ: dict[str, str] = {}
    applied = limit_malloc_arenas(environ)
    assert environ["MALLOC_ARENA_MAX"] == str(MALLOC_ARENAS)
    if sys.platform.startswith("linux"):
        assert applied == MALLOC_ARENAS
    chosen = {"MALLOC_ARENA_MAX": "4"}
    limit_malloc_arenas(chosen)
    assert chosen["MALLOC_ARENA_MAX"] == "4"


def test_serve_fixes_the_mmap_threshold_unless_the_operator_chose(monkeypatch) -> None:
    import sys

    from vis_embed.serving import cli as serve_cli

    environ: dict[str, str] = {}
    applied = serve_cli.fix_mmap_threshold(environ)
    assert environ["MALLOC_MMAP_THRESHOLD_"] == str(serve_cli.MMAP_THRESHOLD)
    if sys.platform.startswith("linux"):
        assert applied == serve_cli.MMAP_THRESHOLD
    chosen = {"MALLOC_MMAP_THRESHOLD_": "262144", "MALLOC_ARENA_MAX": "4"}
    assert serve_cli.tune_malloc(chosen) in ({"MALLOC_ARENA_MAX": 4, "MALLOC_MMAP_THRESHOLD_": 262144},
                                             {"MALLOC_ARENA_MAX": None, "MALLOC_MMAP_THRESHOLD_": None})
    assert chosen == {"MALLOC_MMAP_THRESHOLD_": "262144", "MALLOC_ARENA_MAX": "4"}
    # `vis-embed serve` applies them first thing, before the flags are even checked
    tuned = []
    monkeypatch.setattr(serve_cli, "tune_malloc", lambda: tuned.append(True))
    assert main(["serve", "--model", "/nonexistent/model", "--max-batch-size", "0"]) == 2 and tuned == [True]


def test_a_url_fetch_waiting_for_a_worker_counts_its_wait_in_its_timeout(embedder) -> None:
    """One URL worker, three URLs answering after 0.8 s under a 1 s --url-timeout: the second
    fetch waited 0.8 s for the worker, so it has 0.2 s left (it used to get a whole second)."""
    image = _encoded(Image.new("RGB", (16, 16)), format="PNG")

    def slow(handler) -> None:
        try:
            time.sleep(0.8)
            send(handler, 200, image, {"Content-Type": "image/png"})
        except OSError:
            pass

    listener = ScriptedServer(slow)
    running = _serve(embedder, allow_urls=True, allow_private_urls=True, url_workers=1, url_timeout_s=1.0)
    try:
        started = time.monotonic()
        response = _post(running.url, {"input": [{"image": f"{listener.url}/{i}.png"} for i in range(3)]})
        seconds = time.monotonic() - started
    finally:
        running.stop()
        listener.close()
    assert response.status_code == 400 and seconds < 1.8, (response.status_code, seconds)


def _until(condition, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.01)


def test_sixteen_bit_greyscale_is_scaled_in_bands_with_the_same_pixels() -> None:
    """A 2000 x 2000 16-bit image: float64 temporaries of one band (~8 MB), not of the whole
    image (32 MB each, three at once), and the same 8-bit values."""
    import tracemalloc

    import numpy as np

    values = np.random.default_rng(0).integers(0, 65536, size=(2000, 2000), dtype=np.uint16)
    image = Image.fromarray(values)
    tracemalloc.start()
    try:
        loaded = load_image(image)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 48 * 2**20, peak
    expected = np.clip(np.round(values.astype(np.float64) * (255.0 / 65535.0)), 0, 255).astype(np.uint8)
    assert np.array_equal(np.asarray(loaded)[:, :, 0], expected)


def test_the_bytes_a_request_fetches_are_bounded_like_its_body(embedder) -> None:
    image = _encoded(Image.effect_noise((64, 64), 50), format="PNG")  # ~4 KB: noise does not compress
    listener = ScriptedServer(lambda handler: send(handler, 200, image, {"Content-Type": "image/png"}))
    running = _serve(embedder, allow_urls=True, allow_private_urls=True, max_request_bytes=2 * len(image) + 500)
    try:
        one = _post(running.url, {"input": [{"image": f"{listener.url}/0.png"}]})
        three = _post(running.url, {"input": [{"image": f"{listener.url}/{i}.png"} for i in range(3)]})
    finally:
        running.stop()
        listener.close()
    assert one.status_code == 200, one.text
    assert three.status_code == 413 and "--max-request-bytes" in three.json()["error"]["message"]
