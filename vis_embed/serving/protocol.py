"""uvicorn's h11 protocol with a deadline and a hard size cap for *every* request head.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but any byte
cancels that timer, and it waits forever for a request's headers: a client that sends half a
request line (on a new connection, or after reading a reply on a kept-alive one) holds the
connection open, and with ``limit_concurrency`` a few such sockets lock everyone out.  This
subclass arms a deadline whenever the connection waits for a request head -- when it opens
and again after every response -- and closes it if the whole head has not arrived within
``header_timeout_s``.  So every connection counted by ``--max-connections`` is either running
a request or within its header deadline.  The body's time is bounded by the app
(``--request-timeout``).

h11's ``max_incomplete_event_size`` only applies while a head is *incomplete*: a 70 KB head in
one write passed.  Here the head's bytes are counted as they arrive, complete or not; a head
over ``max_header_bytes`` gets **431** (in the API's error shape) and the connection closes.

A request h11 cannot parse gets **400** in the API's error shape too (uvicorn's own answer is
plain text), and the transport's write-buffer callbacks feed the send deadline and unsent-byte
bounds of :mod:`.sends`.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from vis_embed.serving.sends import SendGuard

_HEAD_END = re.compile(rb"\n\r?\n")  # h11 ends a head at a blank line, CRLF or bare LF
_TOO_LARGE_BODY = json.dumps({"error": {"message": "the request head (request line and headers) is too large "
                                                   "(--max-header-bytes)", "type": "invalid_request_error",
                                        "param": None, "code": None}}).encode()
TOO_LARGE_RESPONSE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                      b"connection: close\r\ncontent-length: " + str(len(_TOO_LARGE_BODY)).encode() + b"\r\n\r\n"
                      + _TOO_LARGE_BODY)


def header_timeout_protocol(header_timeout_s: float, max_header_bytes: int | None = None,
                            send_guard: SendGuard | None = None) -> type[asyncio.Protocol]:
    """An ``H11Protocol`` subclass (for ``uvicorn.Config(http=...)``) with the head deadline
    and, with ``max_header_bytes``, the head cap; with ``send_guard`` (the app's
    ``app.state.send_guard``), its send deadline and unsent-byte bounds (:mod:`.sends`)."""

    class HeaderTimeoutH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _awaiting_head = False
        _head_bytes = 0  # bytes of the awaited head received so far
        _tail = b""  # the last bytes received, so a blank line split across writes is found

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._await_head()

        def data_received(self, data: bytes) -> None:
            if self.transport.is_closing():
                return
            if self._awaiting_head and not self._count_head(data):
                self.transport.write(TOO_LARGE_RESPONSE)
                self.transport.close()
                return
            super().data_received(data)

        def on_response_complete(self) -> None:
            cycle = self.cycle
            super().on_response_complete()
            if not self.transport.is_closing() and self.cycle is cycle:  # no pipelined request started
                self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_header_timer()
            if send_guard is not None:
                send_guard.resumed(self)
            super().connection_lost(exc)

        def pause_writing(self) -> None:
            super().pause_writing()
            if send_guard is not None:
                send_guard.paused(self)

        def resume_writing(self) -> None:
            super().resume_writing()
            if send_guard is not None:
                send_guard.resumed(self)

        def send_400_response(self, msg: str) -> None:
            """A malformed request (h11 could not parse it) answered in the API's error shape."""
            body = json.dumps({"error": {"message": "malformed HTTP request", "type": "invalid_request_error",
                                         "param": None, "code": None}}).encode()
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close"
                                 b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            self.transport.close()

        def _await_head(self) -> None:
            self._awaiting_head, self._head_bytes, self._tail = True, 0, b""
            self._stop_header_timer()
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _count_head(self, data: bytes) -> bool:
            """Count ``data`` into the awaited head; False once the head is over the cap."""
            seen = self._tail + data
            end = _HEAD_END.search(seen)
            size = self._head_bytes + (len(data) if end is None else end.end() - len(self._tail))
            if max_header_bytes is not None and size > max_header_bytes:
                return False
            if end is None:
                self._head_bytes, self._tail = size, seen[-2:]
            else:  # the whole head is here: the app's deadline takes over
                self._awaiting_head = False
                self._stop_header_timer()
            return True

        def _stop_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self._awaiting_head and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutH11Protocol
