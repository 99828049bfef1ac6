"""Reruns issue 39's red-team attacks on ``vis-embed serve`` (127.0.0.1 only), printing per attack
the statuses, the attack's seconds, a bystander text request's status and latency meanwhile,
and the growth of the server's RSS (its preparation workers included) at the peak.

Done when (issue 39): every attack gets a fast 4xx or is served within its budget, the
bystander is answered in under 5 s, and the server grows by at most 1 GB for one request or
3 GB for 16 concurrent ones.  Every loop is bounded; ``--scale small`` is a smoke run.

    .venv/bin/python benchmarks/serve_attacks.py                  # full size, tiny model (the lead, alone)
    .venv/bin/python benchmarks/serve_attacks.py --scale small    # smoke
    .venv/bin/python benchmarks/serve_attacks.py --rounds 3        # issue 44's attacks only (11-18)

Attacks 11-18 (issue 44: search work, unread answers, a flat search beside /health, the CLI
with a 20 MB line, an index rebuilt under its readers, crafted index files, a %0a path and a
malformed request, slow URLs queued past --url-timeout) are in serve_attacks_search.py.  The
tiny model is 128 wide (the report's binary-index width); ``--model`` a checkpoint of
``vis-embed tiny-model OUT --preset qwen2-vl-2b-shallow`` measures them at width 1,536.
"""

from __future__ import annotations

import argparse
import base64
import http.server
import io
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from serve_attacks_search import SEARCH_SCALES, round3_rows
from serve_probe import KEY, MODEL_NAME, NORMAL, Server, post

SCALES = {  # full: the sizes of the red team's report
    "full": {"sliver": 300_000, "bomb": 7_999, "bombs": 16, "jpeg": 7_999, "jpegs": 6, "scans": 700,
             "idle": 7, "url_clients": 24, "urls": 40, "items": 40},
    "small": {"sliver": 30_000, "bomb": 2_000, "bombs": 4, "jpeg": 1_000, "jpegs": 2, "scans": 150,
              "idle": 3, "url_clients": 3, "urls": 6, "items": 8},
}


def tree_rss_mb(pid: int) -> float:
    """RSS of ``pid`` and its direct children (the preparation workers), in MB."""
    total = 0.0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            lines = (proc / "status").read_text().splitlines()
        except OSError:
            continue
        fields = {line.split(":", 1)[0]: line.split(":", 1)[1] for line in lines if ":" in line}
        if int(proc.name) == pid or fields.get("PPid", "").strip() == str(pid):
            total += int(fields.get("VmRSS", "0 kB").split()[0]) / 1024
    return total


def warmed_up(server: Server, seconds: float = 3.0) -> Server:
    """``server`` after a few image requests and ``seconds``: its preparation workers are up, so
    their start is not counted as an attack's growth."""
    from PIL import Image

    small = uri(encoded(Image.new("RGB", (64, 64)), format="PNG"))
    for _ in range(3):
        post(server.url, images_body(small, small))
    time.sleep(seconds)
    return server


def measured(server: Server, attack: Callable[[], list[int]], bystander_delay_s: float = 0.5) -> dict[str, Any]:
    """Run ``attack`` (returns statuses) in a thread; a bystander text request meanwhile; the peak RSS."""
    before, peak, stop = tree_rss_mb(server.process.pid), [0.0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss_mb(server.process.pid))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(attack)
        time.sleep(bystander_delay_s)
        bystander = post(server.url, NORMAL, timeout=30)
        statuses = future.result()
    seconds = time.monotonic() - started
    stop.set()
    watcher.join()
    return {"statuses": statuses, "seconds": seconds, "bystander": bystander, "grown_mb": peak[0] - before}


def concurrently(count: int, send: Callable[[], int]) -> Callable[[], list[int]]:
    def attack() -> list[int]:
        with ThreadPoolExecutor(count) as pool:
            return [future.result() for future in [pool.submit(send) for _ in range(count)]]
    return attack


def uri(data: bytes, kind: str = "png") -> str:
    return f"data:image/{kind};base64," + base64.b64encode(data).decode("ascii")


def encoded(image: Any, **save: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, **save)
    return buffer.getvalue()


def images_body(*data_uris: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL_NAME, "input": [{"image": value} for value in data_uris], **extra}


def many_scans_jpeg(side: int, scans: int) -> bytes:
    """A progressive JPEG whose last refinement scan is repeated up to ``scans`` scans."""
    from PIL import Image

    # A flat picture: its refinement scans are a few bytes each (the report's was 257 KB with 700 scans).
    data = encoded(Image.new("RGB", (side, side), (120, 80, 40)), format="JPEG", progressive=True, quality=90)
    last = data.rindex(b"\xff\xda")
    repeats = max(0, scans - data.count(b"\xff\xda"))
    return data[:-2] + data[last:-2] * repeats + data[-2:]


def attack_rows(server: Server, scale: dict[str, int]) -> list[tuple[str, dict[str, Any], int]]:
    """(attack, measurement, the RSS limit in MB) for each attack on the default server."""
    from PIL import Image

    sliver = uri(encoded(Image.new("1", (scale["sliver"], 1), 1), format="PNG"))
    bomb = uri(encoded(Image.new("1", (scale["bomb"], scale["bomb"])), format="PNG", optimize=True))
    jpeg = uri(many_scans_jpeg(scale["jpeg"], scale["scans"]), "jpeg")
    eps = uri(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n%%EOF\n")
    ico = uri(encoded(Image.new("RGB", (256, 256)), format="ICO", sizes=[(256, 256)]))
    emoji = "\U0001F600" * 4096
    return [
        ("1 sliver PNG (mode 1, N x 1)", measured(server, lambda: [post(server.url, images_body(sliver))[0]]), 1024),
        ("2 token flood (4,096-emoji instruction)", measured(server, lambda: [post(
            server.url, {"model": MODEL_NAME, "input": ["x"] * scale["items"], "instruction": emoji})[0]]), 1024),
        ("4 progressive JPEGs, many scans", measured(server, concurrently(
            scale["jpegs"], lambda: post(server.url, images_body(jpeg))[0])), 1024),
        ("5 concurrent 1-bit PNG bombs", measured(server, concurrently(
            scale["bombs"], lambda: post(server.url, images_body(bomb))[0])), 3072),
        ("6 EPS and ICO in data URIs", measured(server, lambda: [post(server.url, images_body(eps))[0],
                                                                 post(server.url, images_body(ico))[0]]), 1024),
    ]


def idle_connections(server: Server, count: int, header_timeout_s: float) -> tuple[str, str, bool]:
    """Attack 3: kept-alive connections that send one byte of a next request and hold."""
    import httpx

    held = []
    for _ in range(count):
        connection = socket.create_connection(("127.0.0.1", server.port), timeout=header_timeout_s + 5)
        connection.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        reply = b""
        while b'{"status":"ok"}' not in reply:
            reply += connection.recv(1000)
        connection.sendall(b"G")
        held.append(connection)
    time.sleep(header_timeout_s + 1)
    bystander = post(server.url, NORMAL, timeout=30)
    closed = 0
    for connection in held:
        try:
            closed += connection.recv(1) == b""
        except OSError:
            pass
        connection.close()
    health = httpx.get(f"{server.url}/health").json()
    ok = closed == count and bystander[0] == 200 and health == {"status": "ok"}
    return (f"3 {count} idle kept-alive connections", f"closed by the server: {closed}/{count}; bystander "
            f"{bystander[0]} in {bystander[1]:.2f} s", ok)


def big_head(server: Server) -> tuple[str, str, bool]:
    """Attack 9: a 70 KB request head in one write."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
        connection.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 70_000 + b"\r\n\r\n")
        status = connection.recv(100).split(b"\r\n", 1)[0].decode()
    return "9 70 KB head in one write", status, " 431 " in status


def leaks(server: Server) -> tuple[str, str, bool]:
    """Attack 10: what errors and /health show."""
    import httpx

    garbage = post(server.url, images_body(uri(b"not an image")))[0]
    text = httpx.post(f"{server.url}/v1/embeddings", json=images_body(uri(b"not an image")),
                      headers={"authorization": f"Bearer {KEY}"}).text
    health = httpx.get(f"{server.url}/health").json()
    missing, docs = httpx.get(f"{server.url}/nowhere"), httpx.get(f"{server.url}/docs").status_code
    ok = garbage == 400 and "0x" not in text and health == {"status": "ok"} and set(missing.json()) == {"error"} \
        and docs == 404
    return "10 leaks", f"garbage {garbage} ('0x' in text: {'0x' in text}); /health {health}; 404 shape " \
                       f"{sorted(missing.json())}; /docs {docs}", ok


class SlowImages:
    """A loopback HTTP server answering every GET with a small PNG after ``delay_s``; counts hits."""

    def __init__(self, delay_s: float) -> None:
        from PIL import Image

        body, self.hits = encoded(Image.new("RGB", (16, 16)), format="PNG"), 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                outer.hits += 1
                time.sleep(delay_s)
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "image/png")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def url_attacks(model: str, device: str, scale: dict[str, int],
                request_timeout_s: float) -> list[tuple[str, str, bool]]:
    """Attacks 7 and 8 on a server started with --allow-urls (--allow-private-urls for 7)."""
    slow = SlowImages(delay_s=3.0)
    server = warmed_up(Server(model, ["--device", device, "--allow-urls", "--allow-private-urls",
                                      "--request-timeout", str(request_timeout_s), "--url-timeout", "5"]))
    try:
        body = images_body(*[f"{slow.url}/{i}.png" for i in range(scale["urls"])])
        result = measured(server, concurrently(scale["url_clients"], lambda: post(server.url, body)[0]))
        hits_at_answer = slow.hits
        time.sleep(4)
        ok = _bystander_ok(result) and slow.hits == hits_at_answer
        rows = [(f"7 {scale['url_clients']} clients x {scale['urls']} slow URLs", _describe(result) +
                 f"; fetches started {hits_at_answer}, after the answers {slow.hits - hits_at_answer}", ok)]
    finally:
        server.stop()
    server = Server(model, ["--device", device, "--allow-urls"])
    try:
        port = slow.server.server_address[1]
        hosts = ("[64:ff9b::7f00:1]", "[2002:7f00:1::1]", "[::127.0.0.1]", "127.0.0.1", "localhost")
        answers = [_post_text(server.url, images_body(f"http://{host}:{port}/a.png")) for host in hosts]
        before = slow.hits
        ok = all(status == 400 for status, _text in answers) and len({text for _s, text in answers}) == 1 \
            and slow.hits == before
        rows.append(("8 NAT64 / 6to4 / ::a.b.c.d / 127.0.0.1 / localhost", f"{[s for s, _t in answers]}; distinct "
                     f"texts {len({text for _s, text in answers})}", ok))
    finally:
        server.stop()
        slow.server.shutdown()
    return rows


def _post_text(url: str, body: dict[str, Any]) -> tuple[int, str]:
    import httpx

    response = httpx.post(f"{url}/v1/embeddings", json=body, timeout=60, headers={"authorization": f"Bearer {KEY}"})
    return response.status_code, response.json()["error"]["message"] if response.status_code != 200 else ""


def _bystander_ok(result: dict[str, Any]) -> bool:
    return result["bystander"][0] == 200 and result["bystander"][1] < 5


def _describe(result: dict[str, Any]) -> str:
    statuses = ", ".join(f"{status} x{count}" for status, count in sorted(Counter(result["statuses"]).items()))
    return (f"{statuses} in {result['seconds']:.1f} s; bystander {result['bystander'][0]} in "
            f"{result['bystander'][1]:.2f} s; RSS +{result['grown_mb']:.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint (default: a tiny random one)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--header-timeout", type=float, default=3.0)
    parser.add_argument("--request-timeout", type=float, default=10.0)
    parser.add_argument("--rounds", choices=("all", "3"), default="all", help="3: issue 44's attacks only")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    with tempfile.TemporaryDirectory() as scratch:
        model = args.model
        if model is None:
            from vis_embed.model.files.tiny import build_tiny_checkpoint

            model = str(build_tiny_checkpoint(f"{scratch}/tiny"))
        slow = SlowImages(delay_s=10.0)
        rows = round3_rows(model, SEARCH_SCALES[args.scale], Path(scratch), slow.url)
        slow.server.shutdown()
        if args.rounds == "3":
            _print(rows)
            return
        flags = ["--device", args.device, "--header-timeout", str(args.header_timeout),
                 "--request-timeout", str(args.request_timeout)]
        # The default connection limit for the request attacks: 16 concurrent attackers under
        # --max-connections 8 would turn the bystander away at the door (503), which measures the
        # limit, not the bounded work.  Attack 3 is about that limit, so it gets its own server.
        server = warmed_up(Server(model, flags))
        try:
            rows += [(name, _describe(result), _bystander_ok(result) and result["grown_mb"] < limit
                     and all(status == 200 or 400 <= status < 500 or status in (503, 504)
                             for status in result["statuses"]))
                    for name, result, limit in attack_rows(server, scale)]
            rows += [big_head(server), leaks(server)]
        finally:
            server.stop()
        server = warmed_up(Server(model, [*flags, "--max-connections", "8"]))
        try:
            rows.append(idle_connections(server, scale["idle"], args.header_timeout))
        finally:
            server.stop()
        rows += url_attacks(model, args.device, scale, args.request_timeout)
    _print(rows)


def _print(rows: list[tuple[str, str, bool]]) -> None:
    rows.sort(key=lambda row: int(row[0].split()[0]))
    width = max(len(name) for name, _result, _ok in rows)
    print(f"{'attack':<{width}}  ok    result")
    for name, result, ok in rows:
        print(f"{name:<{width}}  {'yes' if ok else 'NO ':<5} {result}")
    sys.exit(0 if all(ok for _name, _result, ok in rows) else 1)


if __name__ == "__main__":
    main()
