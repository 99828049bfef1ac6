"""Soak of ``vis-embed serve`` (issue 39, finding 11): the server's RSS after each of several
runs of the same steady load, to see whether it levels off.

The red team saw the main process creep 1.1 -> 1.45 GB over six 1,000-request runs with a flat
Python heap (glibc's malloc arenas); ``vis-embed serve`` now caps them (``MALLOC_ARENA_MAX``,
default 2).  ``--arenas 8`` starts the server with the old behaviour's worth of arenas, for
comparison.  127.0.0.1 only; every loop is bounded (runs x requests).

    .venv/bin/python benchmarks/serve_soak.py --runs 6 --requests 1000              # the lead, alone
    .venv/bin/python benchmarks/serve_soak.py --runs 6 --requests 1000 --arenas 8   # glibc's default-ish
    .venv/bin/python benchmarks/serve_soak.py --runs 2 --requests 20                # smoke
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from serve_attacks import encoded, tree_rss_mb, uri
from serve_probe import MODEL_NAME, Server, post


def request_bodies(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """A fixed mix: texts, small images (sizes vary: the allocator sees many sizes), both."""
    from PIL import Image

    rng = random.Random(seed)
    images = [uri(encoded(Image.effect_noise((rng.randint(64, 640), rng.randint(64, 640)), 40).convert("RGB"),
                          format="JPEG", quality=85), "jpeg") for _ in range(16)]
    bodies = []
    for index in range(count):
        items: list[Any] = []
        for _ in range(rng.randint(1, 8)):
            kind = rng.random()
            if kind < 0.4:
                items.append(f"request {index}: " + " ".join(rng.choice(("red", "car", "dog", "park")) for _ in
                                                              range(rng.randint(3, 60))))
            elif kind < 0.8:
                items.append({"image": rng.choice(images)})
            else:
                items.append({"image": rng.choice(images), "text": "this one"})
        bodies.append({"model": MODEL_NAME, "input": items, "instruction": rng.choice((None, "Find the same."))})
    return bodies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint (default: a tiny random one)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--requests", type=int, default=1000, help="requests per run (bounded)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--arenas", type=int, default=None, help="MALLOC_ARENA_MAX for the server (default: serve's)")
    args = parser.parse_args()
    if args.arenas is not None:
        os.environ["MALLOC_ARENA_MAX"] = str(args.arenas)  # the server inherits it; serve respects a set value
    bodies = request_bodies(args.requests)
    with tempfile.TemporaryDirectory() as scratch:
        model = args.model
        if model is None:
            from vis_embed.model.files.tiny import build_tiny_checkpoint

            model = str(build_tiny_checkpoint(f"{scratch}/tiny"))
        server = Server(model, ["--device", args.device])
        try:
            print(f"run  seconds  statuses            main RSS MB  with workers MB   (start: {server.rss_mb():.0f} MB)")
            for run in range(1, args.runs + 1):
                started = time.monotonic()
                with ThreadPoolExecutor(args.clients) as pool:
                    statuses = Counter(status for status, _seconds in pool.map(lambda body: post(server.url, body),
                                                                               bodies))
                seconds = time.monotonic() - started
                print(f"{run:>3}  {seconds:>7.1f}  {dict(statuses)!s:<18}  {server.rss_mb():>11.0f}  "
                      f"{tree_rss_mb(server.process.pid):>15.0f}", flush=True)
        finally:
            server.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
