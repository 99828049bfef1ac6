"""Dynamic micro-batching: concurrent requests merged into one forward, in one worker thread.

Requests join a bounded queue (:class:`QueueFullError` when it holds ``max_queue`` requests:
the server answers 429 instead of growing memory).  One worker thread takes the oldest
request, then keeps taking whole requests until the batch holds ``max_batch_size`` items or
``max_wait_ms`` has passed since it started collecting; while a forward runs, new requests
wait, so a busy server batches without waiting at all.  Items are grouped by instruction
(the instruction is part of every item's prompt) and each group goes through
``Embedder.encode_partial`` -- the same length-bucketed batching, worker-thread preparation
and per-item error reporting as ``Embedder.encode``; there is no second batching algorithm.
An item that fails inside the model fails its own request only (``on_error="skip"``), and if
a shared run raises anyway, its requests are run again one by one, so only the one that fails
alone gets an error.  A request whose deadline passed while it waited is dropped unrun, its
decoded images let go at once; one that gives up while it runs (deadline, client gone) stops
before the next forward batch once every request of its group gave up (``should_stop``), so
the next request waits at most one batch of ``--max-batch-size`` items.

The model runs in that one thread only: torch modules and fast tokenizers are not meant to be
driven from several threads at once, and one thread keeps the event loop free for HTTP.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from vis_embed.errors import DataError
from vis_embed.model.inputs.batching import EncodeStopped
from vis_embed.serving.errors import RequestError
from vis_embed.serving.settings import ServerSettings

if TYPE_CHECKING:
    from vis_embed.model.runtime.embedder import Embedder

log = logging.getLogger(__name__)


class QueueFullError(Exception):
    """The request queue holds ``max_queue`` requests; the caller should retry later (429)."""


@dataclass
class EmbeddingResult:
    embeddings: np.ndarray  # (n_items, dim) float32, row i = the request's item i
    prompt_tokens: int


@dataclass
class _Job:
    items: list[dict[str, Any]]  # emptied once answered: decoded images are not held longer
    instruction: str | None
    prompt_tokens: int = 0  # counted before the job was queued (serving.limits)
    future: Future = field(default_factory=Future)

    def answer(self, result: EmbeddingResult | None = None, error: Exception | None = None) -> None:
        """Settle the future unless the request gave up (its deadline passed: cancelled)."""
        self.items = []
        try:
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)
        except InvalidStateError:  # cancelled (the request's deadline passed): nobody waits
            pass


class MicroBatcher:
    """Owns the worker thread that runs ``embedder``; :meth:`submit` is thread-safe."""

    def __init__(self, embedder: Embedder, settings: ServerSettings) -> None:
        # max_batch_size, max_wait_ms, max_queue: bounds checked where the settings were built
        self.embedder = embedder
        self.max_batch_size = settings.max_batch_size
        self.max_wait_s = settings.max_wait_ms / 1000.0
        self.max_queue = settings.max_queue
        self._queue: deque[_Job] = deque()
        self._ready = threading.Condition()
        self._stopping = False
        self._busy = False
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="vis-embed-serve-worker", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Finish the batch in flight, fail the queued requests (503), stop the thread."""
        with self._ready:
            self._stopping = True
            self._ready.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._ready:
            while self._queue:
                self._queue.popleft().answer(error=RequestError(503, "the server is shutting down",
                                                                error_type="server_error"))

    # ------------------------------------------------------------------ requests
    def submit(self, items: list[dict[str, Any]], instruction: str | None, prompt_tokens: int = 0) -> Future:
        """A future of :class:`EmbeddingResult` (or a RequestError); QueueFullError when full.
        Cancelling the future (the request's deadline passed) drops the job if not yet run."""
        job = _Job(items, instruction, prompt_tokens)
        job.future.add_done_callback(_let_go_if_cancelled(job, self._queue, self._ready))
        with self._ready:
            if self._stopping:
                raise RequestError(503, "the server is shutting down", error_type="server_error")
            if len(self._queue) >= self.max_queue:
                raise QueueFullError(f"{len(self._queue)} requests are waiting (--max-queue {self.max_queue})")
            self._queue.append(job)
            self._ready.notify()
        return job.future

    def stats(self) -> dict[str, Any]:
        with self._ready:
            return {"queued_requests": len(self._queue), "busy": self._busy, "max_queue": self.max_queue}

    @property
    def alive(self) -> bool:
        """Whether the worker thread runs: a server whose model thread is gone answers nothing
        but timeouts, and /health must say so."""
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------------------------ worker
    def _run(self) -> None:
        while True:
            jobs = self._collect()
            if jobs is None:
                return
            try:
                self._process(jobs)
            except Exception as exc:  # noqa: BLE001  (a bug here must cost these requests, not the server)
                log.exception("serving worker: a batch of %d requests failed", len(jobs))
                for job in jobs:  # answered ones are settled already: answer() leaves them be
                    job.answer(error=RequestError(500, f"the server failed on this batch ({type(exc).__name__})",
                                                  error_type="server_error"))
            finally:
                with self._ready:
                    self._busy = False

    def _collect(self) -> list[_Job] | None:
        """The next batch of whole requests (None when stopping)."""
        with self._ready:
            while not self._queue and not self._stopping:
                self._ready.wait()
            if self._stopping:
                return None
            self._drop_cancelled()
            if not self._queue:
                return []
            jobs = [self._queue.popleft()]
            self._busy = True
            size = len(jobs[0].items)
            deadline = time.monotonic() + self.max_wait_s
            while size < self.max_batch_size and not self._stopping:
                self._drop_cancelled()
                if self._queue:
                    if size + len(self._queue[0].items) > self.max_batch_size:
                        break  # whole requests only: the next one goes first in the next batch
                    jobs.append(self._queue.popleft())
                    size += len(jobs[-1].items)
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._ready.wait(remaining)
            return jobs

    def _drop_cancelled(self) -> None:
        """Requests that gave up while queued cost no model time (caller holds the lock)."""
        while self._queue and self._queue[0].future.cancelled():
            self._queue.popleft().items = []

    def _process(self, jobs: list[_Job]) -> None:
        """Run ``jobs`` together; if the shared run fails, run each job apart, so that only a
        job that fails alone gets an error (4xx: its input is what the model could not take)."""
        results, failed = self._run_together(jobs)
        if failed is not None and len(jobs) > 1:
            for job in jobs:
                self._process([job])
            return
        for j, job in enumerate(jobs):
            if failed is not None:
                job.answer(error=RequestError(400, f"this request's input could not be embedded "
                                                   f"({type(failed).__name__})"))
            elif isinstance(results[j], RequestError):
                job.answer(error=results[j])
            else:
                job.answer(EmbeddingResult(results[j], job.prompt_tokens))

    def _run_together(self, jobs: list[_Job]) -> tuple[dict[int, Any], Exception | None]:
        """job position -> (n_items, dim) rows or its RequestError; or the exception of a failed run."""
        rows: dict[int, np.ndarray] = {}
        failed: dict[int, RequestError] = {}
        job_items = [job.items for job in jobs]  # a request that gives up now lets go of its own list only
        for instruction, members in _group_by_instruction(job_items, jobs).items():
            items = [job_items[j][k] for j, k in members]
            group = [jobs[j].future for j in sorted({j for j, _k in members})]
            try:
                embeddings, kept, errors = self.embedder.encode_partial(
                    items, instruction, batch_size=self.max_batch_size, on_error="skip",
                    should_stop=lambda group=group: all(future.cancelled() for future in group))
            except EncodeStopped:  # every request of the group gave up: nobody waits for its rows
                continue
            except Exception as exc:  # noqa: BLE001  (any failure: the caller retries apart)
                return {}, exc
            for position, index in enumerate(kept):
                j, k = members[index]
                if j not in rows:
                    # job_items: a request that gave up during the run has emptied jobs[j].items
                    rows[j] = np.zeros((len(job_items[j]), embeddings.shape[1]), dtype=np.float32)
                rows[j][k] = embeddings[position]
            for index, exc in errors.items():
                j, k = members[index]
                failed.setdefault(j, _item_error(k, exc))
        return {j: failed.get(j, rows.get(j)) for j in range(len(jobs))}, None


def _group_by_instruction(job_items: Sequence[list[dict[str, Any]]],
                          jobs: Sequence[_Job]) -> dict[str | None, list[tuple[int, int]]]:
    """instruction -> [(job position, item position)], in arrival order."""
    groups: dict[str | None, list[tuple[int, int]]] = {}
    for j, (items, job) in enumerate(zip(job_items, jobs)):
        groups.setdefault(job.instruction, []).extend((j, k) for k in range(len(items)))
    return groups


def _let_go_if_cancelled(job: _Job, queue: deque[_Job], lock: threading.Condition):
    """A done-callback: a request that gave up lets go of its decoded images at once, queued or
    not, and of its place in the queue (it counted against --max-queue until the worker reached
    it: 429s behind a long forward while the queue held only abandoned requests)."""
    def let_go(future: Future) -> None:
        if future.cancelled():
            job.items = []
            with lock:
                for position, queued in enumerate(queue):
                    if queued is job:
                        del queue[position]
                        break
    return let_go


def _item_error(position: int, exc: DataError) -> RequestError:
    from vis_embed.model.runtime.embedder import NonFiniteEmbeddingError  # torch: already loaded by now

    if isinstance(exc, NonFiniteEmbeddingError):
        return RequestError(500, exc.reason, error_type="server_error")
    param = f"input[{position}]" + (f".{exc.field}" if exc.field else "")
    return RequestError(400, f"{param}: {exc.reason}", param=param)


