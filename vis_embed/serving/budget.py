"""Budgets of work across all requests: decoded pixels (``--max-pixels-in-flight``) and search
floats (``--max-search-floats-in-flight``), one FIFO waiting rule for both.

``--max-request-pixels`` bounds one request; sixteen concurrent requests each inside it (a 10 KB
7999 x 7999 1-bit PNG apiece) still grew the server by 6.5 GB.  Every request reserves its
images' pixels (from their headers) here *before* decoding them and gives them back when it
is answered or abandoned; a request that does not fit waits for others to finish (within its
own deadline), so the decoded images held at once never exceed the budget.  All of it runs on
the event loop: no lock, and a cancelled request's reservation is returned in its ``finally``.
A search reserves its floats (queries x k x rescore x width) the same way before it runs.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from vis_embed.serving.errors import RequestError


class WorkBudget:
    """Units of work (pixels, floats) reserved by requests in flight, at most ``total`` (FIFO
    waiting); ``too_large(amount, total)`` is the 413 of a request that can never fit."""

    def __init__(self, total: int, too_large: Callable[[int, int], RequestError]) -> None:
        if total < 1:
            raise ValueError(f"a work budget must be >= 1, got {total}")
        self.total = total
        self.too_large = too_large
        self.used = 0
        self._waiters: deque[_Turn] = deque()

    @asynccontextmanager
    async def reservation(self) -> AsyncIterator[Reservation]:
        """A request's reservation: whatever it acquired is given back on leaving the block."""
        reservation = Reservation(self)
        try:
            yield reservation
        finally:
            self._release(reservation.pixels)
            reservation.pixels = 0

    def check_fits(self, amount: int) -> None:
        """``too_large``'s 413 for ``amount`` that can never fit ``total``: asked before a request's
        work starts (a search's, before its queries are embedded), and again when it is acquired."""
        if amount > self.total:
            raise self.too_large(amount, self.total)

    async def _acquire(self, pixels: int) -> None:
        self.check_fits(pixels)
        turn = _Turn()
        self._waiters.append(turn)
        try:
            while self._waiters[0] is not turn or self.used + pixels > self.total:
                turn.wake = asyncio.get_running_loop().create_future()
                await turn.wake
        finally:
            self._waiters.remove(turn)
            self._wake()  # the next in line may fit too (it looks once this one has taken its share)
        self.used += pixels

    def _release(self, pixels: int) -> None:
        self.used -= pixels
        self._wake()

    def _wake(self) -> None:
        """Let the first in line look again (only it may take: first come, first served)."""
        if self._waiters and self._waiters[0].wake is not None and not self._waiters[0].wake.done():
            self._waiters[0].wake.set_result(None)


class PixelBudget(WorkBudget):
    """Decoded pixels of all requests at once (``--max-pixels-in-flight``)."""

    def __init__(self, total: int) -> None:
        super().__init__(total, lambda pixels, total: RequestError(
            413, f"the request's images hold {pixels} pixels, more than this server decodes at once ({total}, "
                 f"--max-pixels-in-flight); send fewer or smaller images"))


class _Turn:
    wake: asyncio.Future | None = None


class Reservation:
    """What one request holds of a :class:`WorkBudget` (``pixels``: its units, whatever they count)."""

    def __init__(self, budget: WorkBudget) -> None:
        self.budget = budget
        self.pixels = 0

    async def acquire(self, pixels: int) -> None:
        """Wait until ``pixels`` more fit the budget (413 if they never can), then hold them."""
        await self.budget._acquire(pixels)
        self.pixels += pixels
