"""Answers waiting for their clients to read them: a send deadline and bounds on unsent bytes.

An answer is written to the connection whole; what the client does not read stays in the
transport's write buffer.  Six clients that asked for a 55 MB search answer and never read it
held +330 MB for 77 s, past ``--request-timeout`` and keep-alive (512 such would hold ~28 GB).
The h11 protocol (:mod:`.protocol`) reports here when a connection's buffer passes its
high-water mark (asyncio's ``pause_writing``) and when it drains (``resume_writing``).  A
connection is cut (``transport.abort()``: its buffer is dropped at once) when

- its answer waited longer than ``--send-timeout`` for the client to read it;
- its unsent bytes pass ``--max-unsent-bytes``;
- the unsent bytes of all waiting connections pass ``--max-unsent-bytes-total``: the
  longest-waiting are cut first, until the rest fit.

Every cut is counted by reason (``vis_embed_connections_cut_total{reason}``) and the unsent
bytes are a gauge (``vis_embed_unsent_bytes``), both in ``/metrics``.  All of it runs on the
event loop (protocol callbacks and timers): no lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SEND_TIMEOUT, UNSENT_BYTES, UNSENT_BYTES_TOTAL = "send_timeout", "unsent_bytes", "unsent_bytes_total"
CUT_REASONS = (SEND_TIMEOUT, UNSENT_BYTES, UNSENT_BYTES_TOTAL)


class SendGuard:
    """The connections whose answers wait for their clients (see the module docstring)."""

    def __init__(self, send_timeout_s: float, max_unsent_bytes: int, max_unsent_bytes_total: int) -> None:
        self.send_timeout_s = send_timeout_s
        self.max_unsent_bytes = max_unsent_bytes
        self.max_unsent_bytes_total = max_unsent_bytes_total
        self._waiting: dict[Any, Any] = {}  # protocol -> its deadline timer, longest-waiting first
        self.cuts = dict.fromkeys(CUT_REASONS, 0)
        self.on_cut: Callable[[str], None] = lambda _reason: None

    def unsent_bytes(self) -> int:
        return sum(protocol.transport.get_write_buffer_size() for protocol in self._waiting)

    def paused(self, protocol: Any) -> None:
        """``protocol``'s write buffer passed its high-water mark: its client is not reading."""
        if protocol not in self._waiting:
            self._waiting[protocol] = protocol.loop.call_later(self.send_timeout_s, self._cut, protocol, SEND_TIMEOUT)
        if protocol.transport.get_write_buffer_size() > self.max_unsent_bytes:
            self._cut(protocol, UNSENT_BYTES)
        while self._waiting and self.unsent_bytes() > self.max_unsent_bytes_total:
            self._cut(next(iter(self._waiting)), UNSENT_BYTES_TOTAL)

    def resumed(self, protocol: Any) -> None:
        """``protocol``'s buffer drained (or its connection is gone): it waits no more."""
        timer = self._waiting.pop(protocol, None)
        if timer is not None:
            timer.cancel()

    def _cut(self, protocol: Any, reason: str) -> None:
        self.resumed(protocol)
        if not protocol.transport.is_closing() or protocol.transport.get_write_buffer_size():
            protocol.transport.abort()  # drops the unsent bytes now (close() would wait to send them)
            self.cuts[reason] += 1
            self.on_cut(reason)
