"""Server throughput: 16 concurrent HTTP clients vs calling ``Embedder.encode`` directly.

Builds (or takes) a checkpoint, makes a mixed workload (text, image, text+image items; images
as base64 data URIs, as clients send them), then

1. direct: ``Embedder.encode`` over all items in one call (the ceiling: no HTTP, no JSON;
   best of ``--repeats``);
2. served: ``vis-embed serve``'s app in this process (uvicorn on 127.0.0.1, a free port),
   ``--clients`` threads each sending requests of ``--items-per-request`` items.  The clients
   run in a separate process, as real clients do: in the server's process their JSON and
   base64 work would hold the server's GIL and be counted as server cost;

and prints items/s of both, their ratio (goal >= 0.8: HTTP, JSON and base64 cost little) and
the per-request latency p50/p99.  Both runs see the same items and instruction, and the served
vectors are checked against the direct ones (cos >= 0.99999).

    .venv/bin/python benchmarks/serve_throughput.py                       # tiny random model
    .venv/bin/python benchmarks/serve_throughput.py --model Qwen/Qwen2-VL-2B-Instruct --device cuda
"""

from __future__ import annotations

import argparse
import base64
import io
import random
import socket
import tempfile
import threading
import time
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import numpy as np


def _data_uri(rng: random.Random) -> str:
    from PIL import Image

    size = (rng.choice((56, 84, 112, 224)), rng.choice((56, 84, 112, 224)))
    pixels = np.random.default_rng(rng.randrange(1 << 30)).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def make_items(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """A third text, a third image, a third text+image; texts of 3 to 30 words."""
    rng = random.Random(seed)
    words = "a red blue person car dog walking street park the same woman man seen from side".split()
    items = []
    for index in range(count):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(3, 30)))
        kind = index % 3
        items.append({"text": text} if kind == 0 else {"image": _data_uri(rng)} if kind == 1
                     else {"image": _data_uri(rng), "text": text})
    return items


def start_server(app: Any) -> tuple[str, Any, threading.Thread]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread


def run_clients(url: str, model_name: str, items: list[dict[str, Any]], instruction: str | None,
                clients: int, per_request: int) -> tuple[float, list[float], np.ndarray]:
    """(seconds, per-request latencies, vectors in item order) for ``items`` split over requests."""
    import httpx

    requests = [list(range(start, min(start + per_request, len(items))))
                for start in range(0, len(items), per_request)]
    rows: dict[int, list[float]] = {}
    latencies: list[float] = []
    lock = threading.Lock()

    def session(mine: list[list[int]]) -> None:
        with httpx.Client(timeout=300) as client:
            for indices in mine:
                body = {"model": model_name, "input": [items[i] for i in indices], "encoding_format": "base64"}
                if instruction:
                    body["instruction"] = instruction
                started = time.perf_counter()
                response = client.post(f"{url}/v1/embeddings", json=body)
                elapsed = time.perf_counter() - started
                response.raise_for_status()
                decoded = {indices[row["index"]]: np.frombuffer(base64.b64decode(row["embedding"]), "<f4")
                           for row in response.json()["data"]}
                with lock:
                    latencies.append(elapsed)
                    rows.update(decoded)

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(session, [requests[c::clients] for c in range(clients)]))
    seconds = time.perf_counter() - started
    vectors = np.stack([rows[i] for i in range(len(items))])
    return seconds, latencies, vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint (default: a tiny random one)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--items", type=int, default=384)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--items-per-request", type=int, default=4)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--instruction", default="Represent the given image.")
    parser.add_argument("--repeats", type=int, default=2, help="timed direct encodes and served runs; the best counts")
    args = parser.parse_args()

    from vis_embed.model.runtime.embedder import Embedder
    from vis_embed.serving.app import create_app
    from vis_embed.serving.settings import ServerSettings

    with tempfile.TemporaryDirectory() as scratch:
        model = args.model
        if model is None:
            from vis_embed.model.files.tiny import build_tiny_checkpoint

            model = str(build_tiny_checkpoint(f"{scratch}/tiny"))
        embedder = Embedder.from_pretrained(model, device=args.device)
        items = make_items(args.items)
        embedder.encode(items[:8], args.instruction, batch_size=args.max_batch_size)  # warm-up

        direct_s = float("inf")
        for _ in range(args.repeats):
            started = time.perf_counter()
            direct = embedder.encode(items, args.instruction, batch_size=args.max_batch_size)
            direct_s = min(direct_s, time.perf_counter() - started)

        settings = ServerSettings(model_name="bench", max_batch_size=args.max_batch_size,
                                  max_wait_ms=args.max_wait_ms, max_queue=4 * args.clients,
                                  max_items=max(args.items_per_request, 1))
        url, server, thread = start_server(create_app(embedder, settings))
        clients = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        try:
            served_s = float("inf")
            for _ in range(args.repeats):
                seconds, run_latencies, served = clients.submit(
                    run_clients, url, "bench", items, args.instruction, args.clients,
                    args.items_per_request).result()
                if seconds < served_s:
                    served_s, latencies = seconds, run_latencies
        finally:
            clients.shutdown()
            server.should_exit = True
            thread.join(30)

    cosines = np.sum(direct * served, axis=1) / (np.linalg.norm(direct, axis=1) * np.linalg.norm(served, axis=1))
    p50, p99 = np.percentile(np.array(latencies) * 1000, [50, 99])
    print(f"model {args.model or 'tiny random Qwen2-VL'}; items: {len(items)} (text / image / text+image), "
          f"{args.clients} clients x {args.items_per_request} items per request (client process), "
          f"max batch {args.max_batch_size}, device {args.device}, best of {args.repeats}")
    print(f"direct Embedder.encode   {direct_s:8.2f} s   {len(items) / direct_s:8.1f} items/s")
    print(f"served (HTTP, base64)    {served_s:8.2f} s   {len(items) / served_s:8.1f} items/s")
    print(f"served / direct          {direct_s / served_s:8.2f}x   (goal >= 0.8x)")
    print(f"request latency          p50 {p50:.1f} ms   p99 {p99:.1f} ms   ({len(latencies)} requests)")
    print(f"min cos(served, direct)  {cosines.min():.6f}   (must be >= 0.99999)")


if __name__ == "__main__":
    main()
