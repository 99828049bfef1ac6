"""The ``Host`` header check (``--allowed-hosts``): a defence against DNS rebinding.

A web page can make a browser's name for *its own* site resolve to 127.0.0.1 a moment later;
the browser then treats a local server as same-origin and lets the page post JSON to it.  The
browser still sends the page's host name in ``Host``, so a server that only answers the names
it is reached by (for a loopback bind: ``localhost``, ``127.0.0.1``, ``::1``, the default) is
out of that page's reach.  A pure ASGI wrapper: every route, ``/health`` included, at the
cost of one header lookup.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


def host_name(header: str) -> str:
    """``Host`` without its port, lower case (``[::1]:8000`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def default_allowed_hosts(bind_host: str) -> tuple[str, ...] | None:
    """The loopback names for a loopback bind; None (any host) for another bind."""
    return LOOPBACK_HOSTS if bind_host.strip("[]").lower() in LOOPBACK_HOSTS else None


class AllowedHosts:
    """ASGI middleware answering 400 to an HTTP request whose ``Host`` is not allowed."""

    def __init__(self, app: Any, hosts: Iterable[str]) -> None:
        self.app = app
        self.hosts = frozenset(host_name(host) for host in hosts)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            header = next((value for name, value in scope.get("headers", ()) if name == b"host"), None)
            if header is not None and host_name(header.decode("latin-1")) not in self.hosts:
                await _refuse(send)
                return
        await self.app(scope, receive, send)


async def _refuse(send: Any) -> None:
    body = json.dumps({"error": {"message": "this server does not answer to that Host header (--allowed-hosts)",
                                 "type": "invalid_request_error", "param": None, "code": None}}).encode()
    await send({"type": "http.response.start", "status": 400,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
