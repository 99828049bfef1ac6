"""uvicorn's h11 protocol with a deadline for a new connection's request headers.

uvicorn closes idle keep-alive connections (``timeout_keep_alive``) but waits forever for the
headers of a connection's first request: a client that opens connections and sends half a
request line holds them open (the probe kept 100 so), and with ``limit_concurrency`` set they
would soon lock everyone out.  This subclass closes a connection whose first request's headers
have not all arrived within ``header_timeout_s``.  The body's time is bounded by the app
(``--request-timeout``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


def header_timeout_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """An ``H11Protocol`` subclass (for ``uvicorn.Config(http=...)``) with the header deadline."""

    class HeaderTimeoutH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def handle_events(self) -> None:
            super().handle_events()
            if self.cycle is not None:  # a whole request head arrived
                self._stop_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_header_timer()
            super().connection_lost(exc)

        def _stop_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutH11Protocol
