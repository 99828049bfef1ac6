"""Loopback-only helpers for the server and fetcher tests: a tiny HTTP server with scripted
answers, and a port nothing listens on.  Everything binds 127.0.0.0/8; every loop is bounded."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Callable


def closed_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]  # nothing listens once closed


class ScriptedServer:
    """``http.server`` on ``host``:free port; ``answer(handler)`` writes each response; ``hits``
    counts the requests that reached it (a refused URL must leave it at 0)."""

    def __init__(self, answer: Callable[[http.server.BaseHTTPRequestHandler], None],
                 host: str = "127.0.0.1") -> None:
        self.hits = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                outer.hits += 1
                answer(self)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def send(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes = b"",
         headers: dict[str, str] | None = None) -> None:
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def drip(handler: http.server.BaseHTTPRequestHandler, seconds: float = 0.3, count: int = 40) -> None:
    """A 200 whose body comes one byte every ``seconds`` (bounded: ``count`` bytes)."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(count))
    handler.end_headers()
    try:
        for _ in range(count):
            handler.wfile.write(b"x")
            handler.wfile.flush()
            time.sleep(seconds)
    except OSError:
        pass  # the fetcher gave up and closed: what is being tested
