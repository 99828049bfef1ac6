"""Security probe of ``vis-embed serve`` (issue 26): starts the server on 127.0.0.1 and runs the
poison / long-text / image-bomb / SSRF / auth / content-type / protocol cases, printing a table.

Only loopback is ever contacted; every loop is bounded (a fixed number of requests, fixed
waits).  The server runs as a subprocess (``python -m vis_embed serve``) with an API key from
``VIS_EMBED_API_KEY``, so its RSS can be read from /proc and it is configured as deployed.

    .venv/bin/python benchmarks/serve_probe.py                      # tiny random model
    .venv/bin/python benchmarks/serve_probe.py --model DIR --device cuda --normal-clients 8
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

KEY = "probe-key"
MODEL_NAME = "probe"
NORMAL = {"model": MODEL_NAME, "input": ["a red car", "two people walking a dog"]}


class Server:
    """``python -m vis_embed serve`` on a free loopback port."""

    def __init__(self, model: str, extra: list[str]) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "vis_embed", "serve", "--model", model, "--served-model-name", MODEL_NAME,
                   "--port", str(self.port), *extra]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, "VIS_EMBED_API_KEY": KEY})
        import httpx

        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"the server exited: {self.process.stderr.read()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.3)
        raise SystemExit("the server did not come up in 180 s")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def post(url: str, body: Any = None, raw: bytes | None = None, key: str | None = KEY,
         content_type: str = "application/json", timeout: float = 60) -> tuple[int, float]:
    """(status, seconds) of one POST /v1/embeddings (status 0: no answer in ``timeout``)."""
    import httpx

    headers = {"content-type": content_type}
    if key:
        headers["authorization"] = f"Bearer {key}"
    started = time.monotonic()
    try:
        response = httpx.post(f"{url}/v1/embeddings", content=raw if raw is not None else json.dumps(body).encode(),
                              headers=headers, timeout=timeout)
        return response.status_code, time.monotonic() - started
    except httpx.TransportError:
        return 0, time.monotonic() - started


def png_uri(size: tuple[int, int], mode: str = "RGB") -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new(mode, size).save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def while_running(action: Callable[[], Any], meanwhile: Callable[[], Any], delay_s: float = 0.3) -> tuple[Any, Any]:
    """``action()`` in a thread and, ``delay_s`` later, ``meanwhile()`` here."""
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(action)
        time.sleep(delay_s)
        other = meanwhile()
        return future.result(), other


def case_poison(server: Server, clients: int, requests: int) -> tuple[str, str, bool]:
    surrogate = b'{"model": "probe", "input": ["\\ud800"]}'
    image = png_uri((8, 8))
    infinite = f'{{"model": "probe", "input": [{{"image": "{image}", "bbox": [0, 0, Infinity, 5]}}]}}'.encode()

    def normal_client(_: int) -> list[int]:
        return [post(server.url, NORMAL)[0] for _ in range(requests)]

    with ThreadPoolExecutor(clients + 1) as pool:
        normal = [pool.submit(normal_client, i) for i in range(clients)]
        poison = [post(server.url, raw=surrogate if i % 2 else infinite)[0] for i in range(2 * requests)]
        statuses = [status for future in normal for status in future.result()]
    ok = statuses.count(200) == len(statuses) and all(400 <= status < 500 for status in poison)
    return ("poison among normal clients",
            f"{clients} clients: {statuses.count(200)}/{len(statuses)} x 200; poison: {sorted(set(poison))}", ok)


def case_long_text(server: Server) -> tuple[str, str, bool]:
    megabyte = {"model": MODEL_NAME, "input": ["word " * 200_000]}
    (long_status, long_s), (normal_status, normal_s) = while_running(
        lambda: post(server.url, megabyte), lambda: post(server.url, NORMAL), delay_s=0.1)
    ok = 0 < long_status < 500 and long_s < 10 and normal_status == 200 and normal_s < 10
    return "1 MB text", f"{long_status} in {long_s:.2f} s; normal meanwhile {normal_status} in {normal_s:.2f} s", ok


def case_bombs(server: Server) -> tuple[str, str, bool]:
    bomb = {"model": MODEL_NAME, "input": [{"image": png_uri((9_400, 9_400), mode="1")}]}
    before, peak, stop = server.rss_mb(), [0.0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], server.rss_mb())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with ThreadPoolExecutor(2) as pool:
        bombs = [pool.submit(post, server.url, bomb) for _ in range(2)]
        time.sleep(0.2)
        normal_status, normal_s = post(server.url, NORMAL)
        statuses = [future.result()[0] for future in bombs]
    stop.set()
    watcher.join()
    grown = peak[0] - before
    ok = grown < 1024 and normal_status == 200 and normal_s < 5
    result = f"{statuses}; RSS +{grown:.0f} MB; normal meanwhile {normal_status} in {normal_s:.2f} s"
    return "two 9400x9400 1-bit PNGs", result, ok


def case_ssrf(server: Server) -> tuple[str, str, bool]:
    hits = [0]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        statuses = []
        for url in (f"http://127.0.0.1:{port}/a.png", f"http://localhost:{port}/a.png", f"http://[::1]:{port}/a.png"):
            statuses.append(post(server.url, {"model": MODEL_NAME, "input": [{"image": url}]})[0])
        for _ in range(3):
            try:
                listener.accept()[0].close()
                hits[0] += 1
            except TimeoutError:
                pass
    ok = all(status == 400 for status in statuses) and hits[0] == 0
    return "loopback URLs (default)", f"{statuses}; connections received: {hits[0]}", ok


def case_auth(server: Server) -> tuple[str, str, bool]:
    import httpx
    import openai

    without = post(server.url, NORMAL, key=None)[0]
    wrong = post(server.url, NORMAL, key="wrong")[0]
    health = httpx.get(f"{server.url}/health").status_code
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY)
    rows = client.embeddings.create(model=MODEL_NAME, input=NORMAL["input"]).data
    ok = without == 401 and wrong == 401 and health == 200 and len(rows) == 2 and len(rows[0].embedding) > 0
    return "API key", f"no key {without}, wrong key {wrong}, /health {health}, openai client: {len(rows)} vectors", ok


def case_protocol(server: Server) -> tuple[str, str, bool]:
    cases = {
        "text/plain": (json.dumps(NORMAL).encode(), "text/plain"),
        "nested": (b'{"model": "probe", "input": "x", "user": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                   "application/json"),
        "5000 digits": (b'{"model": "probe", "input": "x", "dimensions": 1' + b"0" * 5000 + b"}", "application/json"),
        "NaN": (b'{"model": "probe", "input": [{"text": "x", "bbox": [NaN, 0, 1, 1]}]}', "application/json"),
    }
    statuses = {name: post(server.url, raw=raw, content_type=kind)[0] for name, (raw, kind) in cases.items()}
    ok = statuses["text/plain"] in (400, 415) and all(400 <= status < 500 for status in statuses.values())
    return "content type, nesting, numbers", ", ".join(f"{name} {status}" for name, status in statuses.items()), ok


def case_host(server: Server) -> tuple[str, str, bool]:
    import httpx

    rebound = httpx.post(f"{server.url}/v1/embeddings", json=NORMAL, timeout=30,
                         headers={"authorization": f"Bearer {KEY}", "host": "attacker.example"}).status_code
    return "foreign Host header (DNS rebinding)", f"{rebound}", rebound == 400


def case_half_sent(server: Server, connections: int, wait_s: float) -> tuple[str, str, bool]:
    sockets = []
    for _ in range(connections):
        half = socket.create_connection(("127.0.0.1", server.port), timeout=wait_s)
        half.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n")
        sockets.append(half)
    normal_status, normal_s = post(server.url, NORMAL)
    closed = 0
    deadline = time.monotonic() + wait_s
    for half in sockets:
        half.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            closed += half.recv(1) == b""
        except (TimeoutError, OSError):
            pass
        half.close()
    ok = closed == connections and normal_status == 200
    result = f"closed by the server within {wait_s:g} s: {closed}; normal meanwhile {normal_status} in {normal_s:.2f} s"
    return f"{connections} half-sent connections", result, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint (default: a tiny random one)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--normal-clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=10, help="requests per normal client (bounded)")
    parser.add_argument("--half-sent", type=int, default=100)
    parser.add_argument("--serve-args", default="", help="more `vis-embed serve` flags, space-separated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        model = args.model
        if model is None:
            from vis_embed.model.files.tiny import build_tiny_checkpoint

            model = str(build_tiny_checkpoint(f"{scratch}/tiny"))
        server = Server(model, ["--device", args.device, "--header-timeout", "5", *args.serve_args.split()])
        try:
            rows = [case_poison(server, args.normal_clients, args.requests), case_long_text(server),
                    case_bombs(server), case_ssrf(server), case_auth(server), case_protocol(server), case_host(server),
                    case_half_sent(server, args.half_sent, wait_s=15)]
        finally:
            server.stop()
    width = max(len(name) for name, _result, _ok in rows)
    print(f"{'case':<{width}}  ok    result")
    for name, result, ok in rows:
        print(f"{name:<{width}}  {'yes' if ok else 'NO ':<5} {result}")
    sys.exit(0 if all(ok for _name, _result, ok in rows) else 1)


if __name__ == "__main__":
    main()
