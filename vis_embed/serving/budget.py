"""One budget of decoded pixels across all requests (``--max-pixels-in-flight``).

``--max-request-pixels`` bounds one request; sixteen concurrent requests each inside it (a 10 KB
7999 x 7999 1-bit PNG apiece) still grew the server by 6.5 GB.  Every request reserves its
images' pixels (from their headers) here *before* decoding them and gives them back when it
is answered or abandoned; a request that does not fit waits for others to finish (within its
own deadline), so the decoded images held at once never exceed the budget.  All of it runs on
the event loop: no lock, and a cancelled request's reservation is returned in its ``finally``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from vis_embed.serving.errors import RequestError


class PixelBudget:
    """Decoded pixels reserved by requests in flight, at most ``total`` (FIFO waiting)."""

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"the pixel budget must be >= 1, got {total}")
        self.total = total
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

    async def _acquire(self, pixels: int) -> None:
        if pixels > self.total:
            raise RequestError(413, f"the request's images hold {pixels} pixels, more than this server decodes "
                                    f"at once ({self.total}, --max-pixels-in-flight); send fewer or smaller images")
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


class _Turn:
    wake: asyncio.Future | None = None


class Reservation:
    """What one request holds of a :class:`PixelBudget`."""

    def __init__(self, budget: PixelBudget) -> None:
        self.budget = budget
        self.pixels = 0

    async def acquire(self, pixels: int) -> None:
        """Wait until ``pixels`` more fit the budget (413 if they never can), then hold them."""
        await self.budget._acquire(pixels)
        self.pixels += pixels
