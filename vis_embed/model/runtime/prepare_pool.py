"""Worker processes that prepare items (decode, resize, tokenise) beside the model.

The one place where item preparation leaves the main process: ``Embedder.encode`` (so
``encode``, ``eval``, ``mine-negatives`` and ``serve``) and the trainer hand their items to a
:class:`PreparePool` of N processes (``--workers N``, recipe ``num_workers: N``; 0 = prepare in
the main process).  Decoding a photo and resizing it costs tens of milliseconds of one core
and holds the GIL for parts of it, so threads do not scale; processes do.

* **Lightweight workers.**  A worker gets a :class:`~vis_embed.model.inputs.preparer.Preparer` (the HF
  processor + pixel budget, prompt format, token limit, decode mode), never the model.
* **Order and errors as in one process.**  :meth:`PreparePool.imap` yields results in task
  order; a bad item comes back as its ``DataError`` (``item_index`` set) for the caller to
  raise or skip exactly as it would in-process.
* **A crash is an error, never a hang.**  The collector waits on each worker's pipe *and* its
  process sentinel; a worker that dies (segfault in a decoder, OOM kill) fails the item it was
  preparing with :class:`WorkerCrashedError` naming that item, once the items before it are out.
* **Tensors handed over once.**  A worker sends its arrays as pickle-5 out-of-band buffers
  straight from their memory; the parent reads each from the pipe straight into fresh memory
  that becomes the tensor's storage (``torch.from_numpy``): one copy, no pickling of tensor
  data (the message format: :mod:`.worker_pipe`).
* **Safe beside threads.**  Processes start with ``forkserver`` (``spawn`` where there is
  none): forking a process whose torch/OpenMP or asyncio threads are running is unsafe, so
  ``serve``'s event loop and torchrun ranks (one pool per rank) are fine.  Each worker runs
  torch on one thread: N workers use N cores.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import threading
import traceback
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from vis_embed.errors import DataError
from vis_embed.io import ignore_interrupts
from vis_embed.model.inputs.preparer import PreparedItem, Preparer
from vis_embed.model.runtime.worker_pipe import receive_message, send_message
from vis_embed.model.runtime.worker_start import default_start_method, start_forkserver  # how workers start

# The default number of workers for a model on the CPU, which itself needs the cores.
MAX_DEFAULT_WORKERS = 8
# For a model on a GPU, every core but the model's own prepares, up to this many (a worker holds
# ~200 MB of its own after full-size photos): one H200 ran Qwen2-VL-2B's compiled forward at 209
# photos/s, which 14 workers decoding a photo mix fed at 85% (fast decode, docs/benchmarks.md);
# 8 workers would have fed ~half of it.
MAX_DEFAULT_GPU_WORKERS = 32
_POLL_S = 0.05  # how often the collector looks for room or a stop request while waiting


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, not the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_workers(accelerated: bool = False) -> int:
    """The cores available to the process, shared by the torchrun ranks on this node: all but
    one (the model's process) for a model on a GPU (``accelerated``), capped at
    :data:`MAX_DEFAULT_GPU_WORKERS`; else capped at :data:`MAX_DEFAULT_WORKERS`; at least 1."""
    ranks_here = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    cores = available_cores() // ranks_here
    if accelerated:
        return max(1, min(MAX_DEFAULT_GPU_WORKERS, cores - 1))
    return max(1, min(MAX_DEFAULT_WORKERS, cores))


# With "auto", fewer image items than this are prepared in the main process: starting worker
# processes (each imports torch and the processor: seconds) would cost more than it saves.
AUTO_MIN_IMAGE_ITEMS = 32


def resolve_workers(workers: int | str | None, image_items: int | None = None, accelerated: bool = False) -> int:
    """``None`` or ``"auto"``: :func:`default_workers` for a model on a GPU (``accelerated``) or
    not (0 for fewer than AUTO_MIN_IMAGE_ITEMS ``image_items``, when that count is given); else a
    count >= 0 (0: in the main process)."""
    if workers is None or workers == "auto":
        if image_items is not None and image_items < AUTO_MIN_IMAGE_ITEMS:
            return 0
        return default_workers(accelerated)
    count = int(workers)
    if count < 0:
        raise ValueError(f"workers must be >= 0 or 'auto', got {workers!r}")
    return count


class WorkerCrashedError(DataError):
    """A preparation worker process died while preparing an item (``item_index``): a crash in a
    decoder or the processor, or the process was killed (out of memory).  Never skipped."""

    def __init__(self, index: int, exitcode: int | None) -> None:
        self.item_index = index
        self.exitcode = exitcode
        super().__init__(f"the preparation worker process died (exit code {exitcode}) while preparing "
                         f"this item: a crash in image decoding or the processor, or the process was "
                         f"killed (out of memory?)", path=f"items[{index}]")


@dataclass(frozen=True)
class PrepareTask:
    """One item to prepare: ``index`` is its position in the caller's list (for errors)."""

    index: int
    item: Any
    instruction: str | None = None
    base_dir: str | Path | None = None


@dataclass
class _Worker:
    process: Any
    conn: Connection
    task: tuple[int, int] | None = None  # (sequence number, item index) in flight


class PreparePool:
    """``workers`` processes preparing items with ``preparer``; see the module notes.

    Use as a context manager or call :meth:`close`.  One :meth:`imap` at a time."""

    def __init__(self, preparer: Preparer, workers: int, start_method: str | None = None) -> None:
        if workers < 1:
            raise ValueError(f"a pool needs at least one worker, got {workers}")
        self.preparer_signature = preparer.signature()
        self.broken = False
        context = mp.get_context(start_method or default_start_method())
        if context.get_start_method() == "forkserver":
            start_forkserver(preparer)
        self._workers: list[_Worker] = []
        for number in range(workers):
            parent_end, child_end = context.Pipe(duplex=True)
            process = context.Process(target=_serve, args=(child_end, preparer), daemon=True,
                                      name=f"vis-embed-prepare-{number}")
            process.start()
            child_end.close()
            self._workers.append(_Worker(process, parent_end))

    @property
    def size(self) -> int:
        return len(self._workers)

    def __enter__(self) -> PreparePool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def imap(self, tasks: Iterable[PrepareTask],
             ahead: int = 64) -> Iterator[tuple[PrepareTask, PreparedItem | DataError]]:
        """``(task, prepared item or its DataError)`` in task order, at most ``ahead`` items
        prepared or in flight beyond the one the caller is reading.  Raises
        :class:`WorkerCrashedError` at the item whose worker died."""
        if self.broken:
            raise RuntimeError("this preparation pool lost a worker; create a new one")
        collector = _Collector(self._workers, iter(tasks), max(ahead, self.size))
        thread = threading.Thread(target=collector.run, name="vis-embed-prepare-collector", daemon=True)
        thread.start()
        try:
            while True:
                entry = collector.next_result()
                if entry is None:
                    return
                task, result = entry
                if isinstance(result, WorkerCrashedError):
                    self.broken = True
                    raise result
                yield task, result
        finally:
            collector.stop()
            thread.join()
            if collector.failure is not None:
                self.broken = True
                if not isinstance(collector.failure, WorkerCrashedError):
                    raise collector.failure

    def prepare(self, tasks: Iterable[PrepareTask]) -> list[PreparedItem | DataError]:
        """Every task's result, in order (for a training step's items)."""
        tasks = list(tasks)
        return [result for _task, result in self.imap(tasks, ahead=len(tasks))]

    def close(self) -> None:
        """Stop the workers (ask, then terminate the ones that do not exit)."""
        for worker in self._workers:
            try:
                worker.conn.send(None)
            except (OSError, ValueError):
                pass
        for worker in self._workers:
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.terminate()
                worker.process.join(timeout=5)
            worker.conn.close()
        self._workers = []


class _Collector:
    """Runs in a parent thread: hands tasks to idle workers (one each, so a big task can never
    deadlock against a big result), receives results, notices dead workers."""

    def __init__(self, workers: list[_Worker], tasks: Iterator[PrepareTask], ahead: int) -> None:
        self.workers = workers
        self.tasks = tasks
        self.ahead = ahead
        self.sent: dict[int, PrepareTask] = {}
        self.results: dict[int, PreparedItem | DataError] = {}
        self.next_seq = 0  # the next task's sequence number
        self.read_seq = 0  # the next sequence number the consumer reads
        self.exhausted = False
        self.stopping = False
        self.failure: BaseException | None = None
        self.condition = threading.Condition()
        self.pending: deque[PrepareTask] = deque()

    def stop(self) -> None:
        with self.condition:
            self.stopping = True
            self.condition.notify_all()

    def next_result(self) -> tuple[PrepareTask, PreparedItem | DataError] | None:
        with self.condition:
            while self.read_seq not in self.results:
                if self.failure is not None and not isinstance(self.failure, WorkerCrashedError):
                    raise self.failure
                if self.exhausted and self.read_seq >= self.next_seq:
                    return None
                self.condition.wait()
            seq = self.read_seq
            self.read_seq += 1
            self.condition.notify_all()
            return self.sent.pop(seq), self.results.pop(seq)

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # surfaces in the consumer's thread
            with self.condition:
                self.failure = exc
                self.condition.notify_all()

    def _loop(self) -> None:
        while True:
            with self.condition:
                if self.stopping and not self._busy():
                    return
                self._dispatch()
                if self.exhausted and not self._busy():  # every result is in self.results
                    self.condition.notify_all()
                    return
            busy = self._busy()
            if not busy:  # nothing in flight: wait for the consumer to make room
                with self.condition:
                    if not self.stopping:
                        self.condition.wait(_POLL_S)
                continue
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout=_POLL_S)
            for worker in busy:
                if worker.conn in ready or (worker.process.sentinel in ready and worker.conn.poll()):
                    self._receive(worker)
                elif worker.process.sentinel in ready:
                    self._crashed(worker)

    def _busy(self) -> list[_Worker]:
        return [w for w in self.workers if w.task is not None]

    def _dispatch(self) -> None:
        """Give each idle worker the next task while fewer than ``ahead`` are unread."""
        if self.stopping or self.failure is not None:
            return
        for worker in self.workers:
            if worker.task is not None or not worker.process.is_alive():
                continue
            if self.next_seq - self.read_seq >= self.ahead:
                return
            task = next(self.tasks, None)
            if task is None:
                self.exhausted = True
                return
            seq = self.next_seq
            self.next_seq += 1
            self.sent[seq] = task
            worker.task = (seq, task.index)
            worker.conn.send((task.item, task.instruction, None if task.base_dir is None else str(task.base_dir)))

    def _receive(self, worker: _Worker) -> None:
        seq, index = worker.task
        try:
            kind, payload = receive_message(worker.conn)
        except (EOFError, OSError):
            self._crashed(worker)
            return
        if kind == "ok":
            result: PreparedItem | DataError = PreparedItem.from_numpy(payload)
        elif kind == "data_error":
            reason, path, line, field = payload
            result = DataError(reason, path=path, line=line, field=field)
            result.item_index = index  # type: ignore[attr-defined]  # callers map it to a line
        elif kind == "exception":  # not bad data (a ConfigError, a bug): raised in the caller's thread
            exc, worker_traceback = payload
            exc.add_note(f"raised preparing items[{index}] in a worker process:\n{worker_traceback}")
            raise exc
        else:
            raise RuntimeError(f"preparing items[{index}] failed in a worker process:\n{payload}")
        with self.condition:
            worker.task = None
            self.results[seq] = result
            self.condition.notify_all()

    def _crashed(self, worker: _Worker) -> None:
        seq, index = worker.task
        worker.process.join(timeout=5)
        with self.condition:
            worker.task = None
            self.results[seq] = WorkerCrashedError(index, worker.process.exitcode)
            self.failure = self.results[seq]
            self.condition.notify_all()


def _serve(conn: Connection, preparer: Preparer) -> None:
    """A worker's loop: prepare each task received, send back the result, until ``None``."""
    import torch

    ignore_interrupts()  # Ctrl-C: the parent stops the pool (its end of the pipe closes)
    torch.set_num_threads(1)  # one core per worker: N workers use N cores
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        item, instruction, base_dir = task
        try:
            message: tuple[str, Any] = ("ok", preparer.prepare_one(item, instruction, base_dir).to_numpy())
        except DataError as exc:
            message = ("data_error", (exc.reason, exc.path, exc.line, exc.field))
        except Exception as exc:  # noqa: BLE001 -- raised again in the parent
            message = _exception_message(exc)
        try:
            send_message(conn, message)
        except (BrokenPipeError, OSError):
            return


def _exception_message(exc: Exception) -> tuple[str, Any]:
    """The exception itself when it survives pickling (a ConfigError raises in the parent as it
    would in one process), else its traceback."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 -- any unpicklable exception
        return ("error", traceback.format_exc())
    return ("exception", (exc, traceback.format_exc()))
