"""Waiting for work done outside the event loop, and giving it up with its request.

A request that times out (``--request-timeout`` cancels its coroutine) or whose client goes
away (looked at every :data:`DISCONNECT_POLL_S`) must not leave its work running: a job still
queued is dropped (its future cancelled) and one already running is told to stop (its
``stop`` event, which the work checks between bounded blocks: the batcher between forward
batches, a search between query blocks).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

from starlette.requests import Request

from vis_embed.serving.errors import RequestError

DISCONNECT_POLL_S = 0.25  # how often a waiting request looks whether its client is still there


async def answer_unless_abandoned(request: Request, future: Future, stop: threading.Event | None = None) -> Any:
    """The job's result; if the client goes away (or the request's deadline cancels this
    wait), the job is cancelled: dropped if queued, and ``stop`` set for one already running."""
    waiter = asyncio.wrap_future(future)
    try:
        while True:
            done, _pending = await asyncio.wait({waiter}, timeout=DISCONNECT_POLL_S)
            if done:
                return waiter.result()
            if await request.is_disconnected():
                raise RequestError(400, "the client closed the connection")
    finally:
        waiter.cancel()  # cancels the job's future too (wrap_future), unless it was answered
        if stop is not None:
            stop.set()
