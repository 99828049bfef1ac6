"""Round 3's attacks (issue 44) for ``benchmarks/serve_attacks.py``: the search surface, unread
answers, index files and the command line.  127.0.0.1 only; every loop bounded.

Each attack returns ``(name, result, ok)``; ``ok`` is issue 44's "done when": a fast 4xx/413 or
an answer within budget, RSS growth <= 1 GB for one request (3 GB for concurrent ones), a
bystander ``/health`` under 1 s, no index file crashing, hanging or allocating beyond its size,
no mixed build, the CLI with a 20 MB text line done in seconds.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from serve_probe import KEY, MODEL_NAME, Server

SEARCH_SCALES = {"full": {"rows": 20_000, "unread": 6, "loads": 10_000, "cli_mb": 20, "slow_urls": 6},
                 "small": {"rows": 2_000, "unread": 3, "loads": 500, "cli_mb": 2, "slow_urls": 6}}
Row = tuple[str, str, bool]


def gallery(model: str, out: Path, rows: int, kind: str) -> Path:
    """An index of ``rows`` random unit vectors at the model's width, recorded as the model's own."""
    import numpy as np

    from vis_embed.gallery.store import write_index
    from vis_embed.model.runtime.embedder import Embedder

    embedder = Embedder.from_pretrained(model, device="cpu", workers=0)
    vectors = np.random.default_rng(0).standard_normal((rows, embedder.embedding_dim)).astype(np.float32)
    np.save(out / f"g-{kind}.npy", vectors)
    (out / f"g-{kind}.ids.json").write_text(json.dumps({"lines": list(range(1, rows + 1)), "model": {
        "name": model, "adapter": None, "fingerprint": embedder.fingerprint()}}))
    write_index(out / f"g-{kind}.npy", out / f"idx-{kind}", kind=kind)
    return out / f"idx-{kind}"


def search(url: str, queries: int, k: int, timeout: float = 120) -> tuple[int, float]:
    import httpx

    started = time.monotonic()
    try:
        response = httpx.post(f"{url}/v1/search", json={"model": MODEL_NAME, "input": ["a"] * queries, "k": k},
                              headers={"authorization": f"Bearer {KEY}"}, timeout=timeout)
        return response.status_code, time.monotonic() - started
    except httpx.TransportError:
        return 0, time.monotonic() - started


def peak_rss_during(server: Server, action: Callable[[], Any]) -> tuple[Any, float]:
    """``(action's result, the server's peak RSS growth in MB meanwhile)``."""
    before, peak, stop = server.rss_mb(), [0.0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], server.rss_mb())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        return action(), peak[0] - before
    finally:
        stop.set()
        watcher.join()


def health_latencies(url: str, seconds: float) -> list[float]:
    import httpx

    latencies, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        httpx.get(f"{url}/health", timeout=30)
        latencies.append(time.monotonic() - started)
        time.sleep(0.1)
    return latencies


def rescore_flood(server: Server, dim: int, rescore: int) -> list[Row]:
    """11: 1,024 one-letter queries at k=1000 (alone and 3 at once: a 413 where over
    --max-search-floats, else answered within the RSS bound), and the largest search within the
    budget with a bystander /health meanwhile."""
    from concurrent.futures import ThreadPoolExecutor

    expected = 413 if 1024 * 1000 * rescore * dim > 2 ** 26 else 200
    (status, seconds), grown = peak_rss_during(server, lambda: search(server.url, 1024, 1000))
    with ThreadPoolExecutor(3) as pool:
        (three, grown3) = peak_rss_during(server, lambda: [f.result()[0] for f in [
            pool.submit(search, server.url, 1024, 1000) for _ in range(3)]])
    fitting = max(1, 2 ** 26 // (1000 * rescore * dim))
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(peak_rss_during, server, lambda: search(server.url, fitting, 1000))
        latencies = health_latencies(server.url, 2.0)
        (fit_status, fit_seconds), fit_grown = answer.result()
    return [
        ("11 1,024 queries x k 1000", f"{status} in {seconds:.2f} s; 3 at once {three}; RSS "
         f"+{grown:.0f} / +{grown3:.0f} MB", status == expected and set(three) <= {expected, 504} and grown < 1024
         and grown3 < 3072),
        (f"11 {fitting} queries x k 1000 (within the budget)", f"{fit_status} in {fit_seconds:.1f} s; RSS "
         f"+{fit_grown:.0f} MB; /health max {max(latencies):.2f} s", fit_status == 200 and fit_grown < 1024
         and max(latencies) < 1),
    ]


def unread_answers(server: Server, dim: int, clients: int, send_timeout_s: float) -> Row:
    """12: clients asking for the largest answer the budget allows and never reading it."""
    body = json.dumps({"model": MODEL_NAME, "input": ["a"] * max(1, 2 ** 26 // (1000 * 4 * dim)),
                       "k": 1000}).encode()
    request = (f"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nauthorization: Bearer {KEY}\r\ncontent-type: "
               f"application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body
    before, sockets = server.rss_mb(), []
    for _ in range(clients):
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(("127.0.0.1", server.port))
        client.sendall(request)
        sockets.append(client)
    peak, started, closed = 0.0, time.monotonic(), 0
    while time.monotonic() - started < send_timeout_s + 60 and closed < clients:
        peak = max(peak, server.rss_mb() - before)
        time.sleep(0.2)
        closed = sum(_closed(client) for client in sockets)
    seconds = time.monotonic() - started
    for client in sockets:
        client.close()
    return (f"12 {clients} clients never reading their answers", f"closed {closed}/{clients} after {seconds:.1f} s "
            f"(--send-timeout {send_timeout_s:g}); RSS peak +{peak:.0f} MB, after +{server.rss_mb() - before:.0f} MB",
            closed == clients and peak < 1024)


def _closed(client: socket.socket) -> bool:
    """True once the server closed or reset the connection (reading a little to find out)."""
    client.setblocking(False)
    try:
        while True:
            chunk = client.recv(65536)
            if not chunk:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def cli_long_line(model: str, scratch: Path, megabytes: int) -> Row:
    """14: `vis-embed encode` of a JSONL whose one text line is ``megabytes`` MB."""
    queries = scratch / "long.jsonl"
    queries.write_text(json.dumps({"text": "word " * (megabytes * 2 ** 20 // 5)}) + "\n")
    result = _run_cli(["encode", "--model", model, "--input", str(queries), "--output", str(scratch / "long.npy"),
                       "--device", "cpu", "--no-progress"], timeout_s=300)
    # The text is cut to the model's own budget (the tiny model's: its 32,768 positions), then
    # embedded at that length: the forward pass of a text at the limit is most of the time.
    return (f"14 vis-embed encode, one {megabytes} MB text line", f"exit {result['code']} in {result['seconds']:.1f} s;"
            f" peak RSS {result['peak_mb']:.0f} MB", result["code"] == 0 and result["seconds"] < 60)


def _run_cli(arguments: list[str], timeout_s: float) -> dict[str, Any]:
    from serve_attacks import tree_rss_mb

    started, peak = time.monotonic(), 0.0
    process = subprocess.Popen([sys.executable, "-m", "vis_embed", *arguments], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    while process.poll() is None and time.monotonic() - started < timeout_s:
        peak = max(peak, tree_rss_mb(process.pid))
        time.sleep(0.05)
    if process.poll() is None:
        process.kill()
    err = process.communicate()[1].strip().splitlines()
    return {"code": process.returncode, "seconds": time.monotonic() - started, "peak_mb": peak,
            "error": err[-1] if err else "", "lines": len(err)}


def crafted_indexes(model: str, index: Path, scratch: Path) -> list[Row]:
    """16: `vis-embed search` on crafted copies of a binary index."""
    import shutil

    def claim_2gib(d: Path) -> None:
        data = bytearray((d / "index.faiss").read_bytes())
        data[25:33] = struct.pack("<Q", 2 ** 31)
        (d / "index.faiss").write_bytes(bytes(data))

    def fifo(d: Path) -> None:
        (d / "ids.json").unlink()
        os.mkfifo(d / "ids.json")

    def dev_zero(d: Path) -> None:
        (d / "ids.json").unlink()
        (d / "ids.json").symlink_to("/dev/zero")

    def settings(**changes: Any) -> Callable[[Path], None]:
        def change(d: Path) -> None:
            (d / "index.json").write_text(json.dumps({**json.loads((d / "index.json").read_text()), **changes}))
        return change

    cases = {"faiss claiming 2 GiB": claim_2gib, "ids.json a FIFO": fifo, "ids.json -> /dev/zero": dev_zero,
             "truncated faiss": lambda d: (d / "index.faiss").write_bytes((d / "index.faiss").read_bytes()[:-9]),
             'dim "abc"': settings(dim="abc"), 'rescore "4"': settings(rescore="4"), "no model": settings(model=None),
             "NaN ids": lambda d: (d / "ids.json").write_text("[NaN]"),
             "100k-deep index.json": lambda d: (d / "index.json").write_text("[" * 100_000 + "]" * 100_000)}
    queries = scratch / "q.jsonl"
    queries.write_text('{"text": "a"}\n')
    rows = []
    for name, damage in cases.items():
        copy = scratch / "crafted"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(index, copy, symlinks=True)
        damage(copy)
        result = _run_cli(["search", "--model", model, "--index", str(copy), "--input", str(queries), "--output",
                           str(scratch / "hits.jsonl"), "--device", "cpu", "--no-progress"], timeout_s=60)
        ok = result["code"] == 2 and result["lines"] == 1 and result["error"].startswith("error:") \
            and result["seconds"] < 30 and result["peak_mb"] < 1024
        rows.append((f"16 crafted index: {name}", f"exit {result['code']} in {result['seconds']:.1f} s, peak "
                     f"{result['peak_mb']:.0f} MB: {result['error'][:90]}", ok))
    return rows


RACE_WRITER = """
import sys
from pathlib import Path
from vis_embed.gallery.store import write_index
a, b, out, stop = map(Path, sys.argv[1:5])
while not stop.exists():
    write_index(a, out, kind="binary")
    write_index(b, out, kind="binary")
    Path(str(stop) + ".started").write_text("")
"""


def index_race(scratch: Path, loads: int) -> Row:
    """15: `vis-embed index --out SAME` in a loop against GalleryIndex.load in a loop."""
    import numpy as np

    from vis_embed.gallery.store import GalleryIndex, write_index

    for letter, column in (("A", 0), ("B", 1)):
        vectors = np.zeros((64, 8), np.float32)
        vectors[:, column] = 1
        np.save(scratch / f"{letter}.npy", vectors)
        (scratch / f"{letter}.ids.json").write_text(json.dumps({"lines": list(range(1, 65)), "ids": [
            f"{letter}{i}" for i in range(64)], "model": {"name": "m", "fingerprint": "f"}}))
    out, stop = scratch / "race", scratch / "race.stop"
    write_index(scratch / "A.npy", out, kind="binary")
    writer = subprocess.Popen([sys.executable, "-c", RACE_WRITER, str(scratch / "A.npy"), str(scratch / "B.npy"),
                               str(out), str(stop)])
    mixed, errors, seen = 0, 0, set()
    try:
        while not Path(f"{stop}.started").exists() and writer.poll() is None:
            time.sleep(0.05)  # the writer's first builds (its imports) done
        started = time.monotonic()
        for _ in range(loads):
            try:
                index = GalleryIndex.load(out)
            except Exception:  # noqa: BLE001  (any refusal or crash is counted, not raised)
                errors += 1
                continue
            by_ids, by_vectors = index.ids[0][0], "AB"[int(np.argmax(index.searcher.vectors[0]))]
            by_record = Path(index.settings.embeddings).stem
            mixed += len({by_ids, by_vectors, by_record}) != 1
            seen.add(by_ids)
    finally:
        stop.write_text("")
        writer.wait(60)
    return (f"15 index rebuilt under {loads} loads", f"mixed {mixed}, errors {errors}, builds seen {sorted(seen)} "
            f"in {time.monotonic() - started:.1f} s", mixed == 0 and errors == 0 and seen == {"A", "B"})


def paths_and_malformed(server: Server) -> Row:
    """17: `POST /v1/embeddings%0a` and a header without a colon."""
    import httpx

    body = json.dumps({"model": MODEL_NAME, "input": ["a"]}).encode()
    raw = (f"POST /v1/embeddings%0a HTTP/1.1\r\nHost: 127.0.0.1\r\nauthorization: Bearer {KEY}\r\ncontent-type: "
           f"application/json\r\nconnection: close\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body
    newline, malformed = _exchange(server.port, raw), _exchange(server.port, b"GET /health HTTP/1.1\r\nBad\r\n\r\n")
    metrics = httpx.get(f"{server.url}/metrics", headers={"authorization": f"Bearer {KEY}"}, timeout=10).text
    raw_label = "%0a" in metrics or "\\n" in metrics
    ok = newline.startswith(b"HTTP/1.1 404") and malformed.startswith(b"HTTP/1.1 400") and b'"error"' in malformed \
        and not raw_label
    return ("17 %0a path; malformed request", f"{newline[:12].decode()} / {malformed[:12].decode()} "
            f"(JSON error: {b'error' in malformed}); raw path in /metrics: {raw_label}", ok)


def _exchange(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        client.sendall(raw)
        reply = b""
        while chunk := client.recv(65536):
            reply += chunk
    return reply


def slow_urls_within_timeout(model: str, slow_url: str, count: int) -> Row:
    """18: ``count`` slow-drip URLs under --url-timeout 3: answered by ~3 s, queue wait included."""
    server = Server(model, ["--device", "cpu", "--allow-urls", "--allow-private-urls", "--url-timeout", "3"])
    try:
        from serve_probe import post

        status, seconds = post(server.url, {"model": MODEL_NAME, "input": [{"image": f"{slow_url}/{i}.png"}
                                                                          for i in range(count)]}, timeout=60)
    finally:
        server.stop()
    return (f"18 {count} slow URLs, --url-timeout 3", f"{status} in {seconds:.1f} s", status == 400 and seconds < 4.5)


def round3_rows(model: str, scale: dict[str, int], scratch: Path, slow_url: str) -> list[Row]:
    """Every round-3 attack (servers of their own)."""
    from vis_embed.model.runtime.embedder import Embedder

    dim = Embedder.from_pretrained(model, device="cpu", workers=0).embedding_dim
    binary = gallery(model, scratch, scale["rows"], "binary")
    flat = gallery(model, scratch, scale["rows"], "flat")
    rows: list[Row] = []
    for index, kind, rescore in ((binary, "binary", 4), (flat, "flat", 1)):
        server = Server(model, ["--device", "cpu", "--index", str(index), "--send-timeout", "3"])
        try:
            found = rescore_flood(server, dim, rescore)
            rows += [(f"{name} ({kind})", result, ok) for name, result, ok in found]
            if kind == "binary":
                rows.append(unread_answers(server, dim, scale["unread"], 3.0))
                rows.append(paths_and_malformed(server))
        finally:
            server.stop()
    rows.append(cli_long_line(model, scratch, scale["cli_mb"]))
    rows.append(index_race(scratch, scale["loads"]))
    rows += crafted_indexes(model, binary, scratch)
    rows.append(slow_urls_within_timeout(model, slow_url, scale["slow_urls"]))
    return rows
