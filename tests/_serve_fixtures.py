"""A real uvicorn server in a thread on a free loopback port (tests of ``vis-embed serve``)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn


class RunningServer:
    """uvicorn serving ``app`` in a thread, on a socket bound to a free loopback port
    (``options``: more ``uvicorn.Config`` settings)."""

    def __init__(self, app: Any, **options: Any) -> None:
        self.app = app
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on", **options)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.socket.close()


def wait_until_healthy(process: Any, url: str, output: Any, seconds: float = 60) -> None:
    """Poll ``url``/health until the ``vis-embed serve`` subprocess answers 200; fail with its
    ``output`` (a pipe) if it exits first, or after ``seconds``."""
    import httpx

    deadline = time.monotonic() + seconds
    while True:
        assert process.poll() is None, output.read()
        assert time.monotonic() < deadline, f"vis-embed serve did not come up in {seconds:g} s"
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)


def binary_text_index(embedder: Any, texts: list[str], work: Any, rescore: int) -> Any:
    """A binary ``GalleryIndex`` of ``texts`` embedded by ``embedder`` (ids ``doc0`` ...), built in
    ``work`` as `vis-embed encode` + `vis-embed index` write it, loaded with ``rescore``."""
    import json

    import numpy as np

    from vis_embed.gallery.store import GalleryIndex, write_index

    np.save(work / "g.npy", embedder.encode([{"text": text} for text in texts]))
    (work / "g.ids.json").write_text(json.dumps({
        "lines": list(range(1, len(texts) + 1)), "ids": [f"doc{i}" for i in range(len(texts))],
        "model": {"name": "tiny", "adapter": None, "fingerprint": embedder.fingerprint()}}))
    write_index(work / "g.npy", work / "idx", kind="binary")
    return GalleryIndex.load(work / "idx", rescore=rescore)
