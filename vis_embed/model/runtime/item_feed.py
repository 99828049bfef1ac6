"""ItemFeed: items prepared in batch order, one batch ahead of the model, by one bad-item rule.

The preparation side of :class:`~vis_embed.model.runtime.embedder.Embedder` (encode, the dry run and
the server's batcher all go through it): each batch of indices is prepared -- in the
``workers`` processes of a :class:`~vis_embed.model.runtime.prepare_pool.PreparePool`, or in this
process -- and collated one batch ahead of the caller in a helper thread
(:func:`one_batch_ahead`), so batch i+1 is made while the model runs batch i.  A bad item is
decided by :func:`accepted` wherever it was prepared: raised (``on_error="raise"``) or recorded
(``"skip"``).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vis_embed.data.items import check_item, decoded_items
from vis_embed.errors import DataError
from vis_embed.model.inputs.preparer import PreparedItem
from vis_embed.model.runtime.prepare_pool import PreparePool, PrepareTask, resolve_workers
from vis_embed.model.runtime.worker_start import start_forkserver

if TYPE_CHECKING:
    import torch

    from vis_embed.model.network.embedding_model import EmbeddingModel


class ItemFeed:
    """Prepared batches of one model's items (its preparer; worker processes kept between calls)."""

    def __init__(self, model: EmbeddingModel, workers: int | str = 0) -> None:
        self.model = model  # what prepares and collates: an EmbeddingModel or the dry run's stand-in
        # Processes preparing items (0: this process; "auto": the cores available, capped,
        # none for a handful of image items: model/runtime/prepare_pool.resolve_workers).
        self.workers: int | str = workers if workers == "auto" else resolve_workers(workers)
        self._pool: PreparePool | None = None
        self._pool_finalizer: weakref.finalize | None = None
        self._pool_starting: threading.Thread | None = None  # start_workers(background=True)

    def accelerated(self) -> bool:
        """Whether the model runs on an accelerator ("auto" then leaves the host's cores to the
        workers); the dry run's stand-in has no device: False."""
        device = getattr(self.model, "device", None)
        return device is not None and getattr(device, "type", "cpu") != "cpu"

    def prepared_batches(self, items: Sequence[dict[str, Any]], batches: Sequence[Sequence[int]],
                         instruction: str | None, base_dir: str | Path | None, on_error: str,
                         errors: dict[int, DataError], collate: bool = True) -> Iterator[tuple[Any, list[int]]]:
        """``(batch, indices)`` for each of ``batches``, prepared ahead of the caller: the
        collated batch (or the list of PreparedItems with ``collate=False``; None if every item
        failed) and the indices it holds.  A bad item raises or joins ``errors`` (on_error),
        in batch order, wherever it was prepared."""
        images = decoded_items(item for index, item in enumerate(items) if index not in errors)
        workers = resolve_workers(self.workers, images, self.accelerated())
        if self._pool_starting is not None and self._pool_starting.is_alive():
            workers = 0  # the workers are still starting (serve): this batch is prepared here
        if workers > 0 and batches:
            return one_batch_ahead(
                self._pool_batches(items, batches, instruction, base_dir, on_error, errors, collate, workers))
        return one_batch_ahead(self._in_process_batches(items, batches, instruction, base_dir, on_error, errors,
                                                         collate))

    def _in_process_batches(self, items: Sequence[dict[str, Any]], batches: Sequence[Sequence[int]],
                            instruction: str | None, base_dir: str | Path | None, on_error: str,
                            errors: dict[int, DataError], collate: bool) -> Iterator[tuple[Any, list[int]]]:
        for indices in batches:
            prepared, prepared_indices = self._prepare_batch(items, indices, instruction, base_dir, on_error, errors)
            yield self._batch_of(prepared, collate), prepared_indices

    def _pool_batches(self, items: Sequence[dict[str, Any]], batches: Sequence[Sequence[int]],
                      instruction: str | None, base_dir: str | Path | None, on_error: str,
                      errors: dict[int, DataError], collate: bool,
                      workers: int) -> Iterator[tuple[Any, list[int]]]:
        invalid = set(errors)  # rejected by the item contract: never sent to a worker
        pool = self._preparation_pool(workers)
        tasks = (PrepareTask(index, items[index], instruction, base_dir)
                 for indices in batches for index in indices if index not in invalid)
        # Room for the batch being read and the next one, so the workers never wait on the model.
        stream = pool.imap(tasks, ahead=2 * max(len(b) for b in batches) + pool.size if batches else 1)
        try:
            for indices in batches:
                prepared: list[PreparedItem] = []
                kept: list[int] = []
                for index in indices:
                    if index in invalid:
                        continue
                    _task, result = next(stream)
                    if accepted(index, result, on_error, errors):
                        prepared.append(self.model.count_truncated(result))
                        kept.append(index)
                yield self._batch_of(prepared, collate), kept
        finally:
            stream.close()

    def _batch_of(self, prepared: list[PreparedItem],
                  collate: bool) -> dict[str, torch.Tensor] | list[PreparedItem] | None:
        """What a prepared batch is handed on as: collated tensors, or the items (None if empty)."""
        if not prepared:
            return None
        if not collate:
            return prepared
        return self.model.collate(prepared, pin_memory=self.model.device.type == "cuda")

    def _preparation_pool(self, workers: int) -> PreparePool:
        """The worker processes, started on first use and kept (serve encodes many times);
        started again if the model's preparation settings changed or a worker died."""
        preparer = self.model.preparer()
        pool = self._pool
        if pool is not None and (pool.broken or pool.preparer_signature != preparer.signature()
                                 or pool.size != workers):
            self.close()
            pool = None
        if pool is None:
            pool = self._pool = PreparePool(preparer, workers)
            self._pool_finalizer = weakref.finalize(self, PreparePool.close, pool)
        return pool

    def start_workers(self, background: bool = False) -> None:
        """Start the preparation workers now rather than at the first encode (a server starts
        them before its first request).  ``background=True`` returns at once; encodes prepare
        in this process until the workers are up (the first start of a process's workers
        imports torch and the processor anew: seconds)."""
        workers = resolve_workers(self.workers, accelerated=self.accelerated())
        if workers < 1:
            return
        if not background:
            self._preparation_pool(workers)
            return
        start_forkserver(self.model.preparer())  # in this thread: it sets the environment the server starts with
        self._pool_starting = threading.Thread(target=self._preparation_pool, args=(workers,), daemon=True,
                                               name="vis-embed-start-workers")
        self._pool_starting.start()

    def close(self) -> None:
        """Stop the preparation worker processes (started again by the next encode)."""
        if self._pool_starting is not None:
            self._pool_starting.join()
            self._pool_starting = None
        if self._pool_finalizer is not None:
            self._pool_finalizer()  # closes the pool once
        self._pool, self._pool_finalizer = None, None

    def _prepare_batch(self, items: Sequence[dict[str, Any]], indices: Sequence[int],
                       instruction: str | None, base_dir: str | Path | None, on_error: str,
                       errors: dict[int, DataError]) -> tuple[list[PreparedItem], list[int]]:
        prepared: list[PreparedItem] = []
        kept: list[int] = []
        for index in indices:
            if index in errors:  # rejected by the item contract (on_error="skip")
                continue
            try:
                result: PreparedItem | DataError = self.model.prepare_one(items[index], instruction, base_dir)
            except DataError as exc:
                exc.item_index = index  # type: ignore[attr-defined]  # callers map it to a line
                result = exc
            if accepted(index, result, on_error, errors):
                prepared.append(result)
                kept.append(index)
        return prepared, kept


def one_batch_ahead(batches: Iterator[tuple[Any, list[int]]]) -> Iterator[tuple[Any, list[int]]]:
    """``batches`` made one ahead in a thread: batch i+1 is prepared (or received from the
    workers) and collated while batch i runs through the model; order and errors unchanged."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="vis-embed-prepare") as worker:
        upcoming = worker.submit(next, batches, None)
        try:
            while (ready := upcoming.result()) is not None:
                upcoming = worker.submit(next, batches, None)
                yield ready
        finally:
            # Let the batch in hand finish (a generator cannot be closed while it runs), then
            # close the source in its own thread: the worker pool's stream stops there.
            if not upcoming.cancel():
                with contextlib.suppress(Exception):  # the caller is leaving with its own outcome
                    upcoming.result()
            worker.submit(batches.close).result()


def invalid_items(items: Sequence[Any], on_error: str) -> dict[int, DataError]:
    """Items that break the item contract, by index (the first one raises with ``on_error="raise"``)."""
    errors: dict[int, DataError] = {}
    for index, item in enumerate(items):
        try:
            check_item(item, f"items[{index}]")
        except DataError as exc:
            exc.item_index = index  # type: ignore[attr-defined]  # callers map it to a line
            if on_error == "raise":
                raise exc from None
            errors[index] = exc
    return errors


def accepted(index: int, result: PreparedItem | DataError, on_error: str, errors: dict[int, DataError]) -> bool:
    """True for a prepared item; a bad one (its DataError) is raised (``on_error="raise"``) or
    recorded in ``errors`` -- the one rule, wherever the item was prepared."""
    if not isinstance(result, DataError):
        return True
    if on_error == "raise":
        raise result
    errors[index] = result
    return False
