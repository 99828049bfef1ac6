"""Bounded work of ``POST /v1/search``, like the pixel and token budgets of embedding.

A search's work is counted in floats: queries x k x rescore (1 for a flat index) x the
index's width -- what re-ranking a quantized index's shortlist gathers.  1,024 one-letter
queries at ``k=1000`` on a binary index added ~700 MB at width 128 (a 5 KB body), and the
searches ran in the event loop's default pool, so concurrent ones added up.  Here:

- a request over ``--max-search-floats`` alone, or over ``--max-search-floats-in-flight`` (set
  lower), is refused (413, ``param: "k"``) before any item is embedded;
- every search reserves its floats in one budget of all requests
  (``--max-search-floats-in-flight``: more wait, first come first served, within the
  request's deadline), held until its answer is encoded;
- the search, the hits and the answer's JSON run in the server's own pool of
  ``--search-workers`` threads (never on the event loop: a bystander's ``/health`` stays
  fast), a block of queries at a time (at most :data:`SEARCH_BLOCK_FLOATS` floats), and stop
  between blocks once the request is given up (timeout or disconnect).
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from starlette.requests import Request

from vis_embed.gallery.search_file import hits_of
from vis_embed.serving.budget import WorkBudget
from vis_embed.serving.errors import RequestError
from vis_embed.serving.waiting import answer_unless_abandoned

SEARCH_BLOCK_FLOATS = 2 ** 22  # one block of queries: at most this many floats of work (16 MB of float32)


class Abandoned(Exception):
    """The search's request was given up: its worker stopped between blocks."""


class SearchWork:
    """The index, its budget of floats in flight and its pool (see the module docstring)."""

    def __init__(self, index: Any, max_search_floats: int, max_in_flight: int, workers: int) -> None:
        self.index = index
        self.max_search_floats = max_search_floats
        self.budget = WorkBudget(max_in_flight, lambda floats, total: RequestError(
            413, f"the search holds {floats} floats of work, more than this server searches at once ({total}, "
                 f"--max-search-floats-in-flight); send fewer queries or a smaller k", param="k"))
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="vis-embed-search")

    def floats(self, queries: int, k: int) -> int:
        """The search work of ``queries`` queries at ``k``: queries x k x rescore x width."""
        return queries * min(k, self.index.ntotal) * max(1, self.index.rescore) * self.index.dim

    def check(self, queries: int, k: int) -> None:
        """413 (``param: "k"``) for a request over ``--max-search-floats`` on its own, or over
        ``--max-search-floats-in-flight`` (the budget's own rule): asked before any item is embedded."""
        floats = self.floats(queries, k)
        if floats > self.max_search_floats:
            raise RequestError(413, f"the search is over this server's limit of {self.max_search_floats} floats "
                                    f"per request (--max-search-floats): {queries} queries x k {k} x rescore "
                                    f"{max(1, self.index.rescore)} x width {self.index.dim} = {floats}; send fewer "
                                    f"queries or a smaller k", param="k")
        self.budget.check_fits(floats)  # a --max-search-floats-in-flight below --max-search-floats

    async def answer(self, request: Request, queries: np.ndarray, k: int, model: str, usage: dict[str, int]) -> bytes:
        """The answer's JSON bytes, searched and encoded in the pool within the budget."""
        stop = threading.Event()
        async with self.budget.reservation() as reservation:
            await reservation.acquire(self.floats(len(queries), k))
            future = self.pool.submit(self._answer, queries, k, model, usage, stop)
            return await answer_unless_abandoned(request, future, stop)

    def _answer(self, queries: np.ndarray, k: int, model: str, usage: dict[str, int], stop: threading.Event) -> bytes:
        block = max(1, SEARCH_BLOCK_FLOATS // max(1, self.floats(1, k)))
        data: list[dict[str, Any]] = []
        for start in range(0, len(queries), block):
            if stop.is_set():
                raise Abandoned
            scores, rows = self.index.search(queries[start:start + block], k)
            data += [{"object": "search_result", "index": start + offset, "hits": hits}
                     for offset, hits in enumerate(hits_of(self.index, scores, rows))]
        if stop.is_set():
            raise Abandoned
        # starlette's JSONResponse encoding, done here rather than on the event loop
        return json.dumps({"object": "list", "model": model, "data": data, "usage": usage}, ensure_ascii=False,
                          allow_nan=False, separators=(",", ":")).encode("utf-8")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
