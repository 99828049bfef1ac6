"""Embedder: the inference API (``from_pretrained`` / ``encode``) over an EmbeddingModel.

``encode`` is the fast path: items are sorted by their token count as the model will see it
(prompt template, text and visual tokens, from the image header only: ``model.lengths``) and
grouped so that no batch is more than 10% padding (``model.batching.chunk_order``, shared with
GradCache); batches run under ``torch.inference_mode`` (bf16 + sdpa/flash-attn on CUDA by
default) while a worker thread prepares the next batch, and rows are written back in input
order.  Because pooling reads the last *real* token and text-only positions are counted from
the attention mask, a vector does not depend on its batch neighbours.  ``compile()`` fuses
the blocks' element-wise work (opt-in).
"""

from __future__ import annotations

import contextlib
import json
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vis_embed.data.items import check_item
from vis_embed.errors import DataError
from vis_embed.io import fingerprint_files, fingerprint_json
from vis_embed.model.batching import chunk_order
from vis_embed.model.compile_blocks import compile_blocks
from vis_embed.model.embedding_config import EmbeddingConfig
from vis_embed.model.embedding_model import EmbeddingModel, PreparedItem
from vis_embed.model.lengths import estimated_lengths
from vis_embed.model.prepare_pool import PreparePool, PrepareTask, resolve_workers
from vis_embed.model.references import ADAPTER_CONFIG

# Keys that record how a file was loaded or written, not what the model computes.
# A batch closes early once its padded-token fraction would exceed this (never below a quarter
# of batch_size items): padding is pure waste in the decoder, and on CPU several smaller
# batches cost little more than one big one.
MAX_PADDING = 0.1
_VOLATILE_JSON_KEYS = {"is_local", "local_files_only", "name_or_path", "_name_or_path",
                       "transformers_version", "_commit_hash"}
# Files whose contents define a checkpoint's behaviour (for fingerprints).
_CHECKPOINT_FILES = ("*.safetensors", "*.bin", "config.json", "tokenizer.json",
                     "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
                     "processor_config.json", "preprocessor_config.json",
                     "video_preprocessor_config.json", ADAPTER_CONFIG,
                     "head_config.json")


class NonFiniteEmbeddingError(DataError):
    """The model embedded an item as NaN or infinity: its weights are broken (e.g. a diverged
    adapter).  Names the model, the adapter and the item (``item_index``)."""

    def __init__(self, index: int, source: str) -> None:
        self.item_index = index
        self.source = source
        super().__init__(f"the model embedded this item as NaN or infinite values ({source}); "
                         f"its weights are broken, e.g. a diverged adapter", path=f"items[{index}]")


class Embedder:
    """Encode items (image and/or text, plus an optional instruction) into unit vectors."""

    def __init__(self, model: EmbeddingModel, workers: int | str = 0) -> None:
        self.model = model
        self.model.eval()
        self._fingerprint: str | None = None
        # Processes preparing items (0: this process; "auto": the cores available, capped,
        # none for a handful of image items: model/prepare_pool.resolve_workers).
        self.workers: int | str = workers if workers == "auto" else resolve_workers(workers)
        self._pool: PreparePool | None = None
        self._pool_finalizer: weakref.finalize | None = None
        self._pool_starting: threading.Thread | None = None  # start_workers(background=True)

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, adapter: str | Path | None = None,
                        device: str | torch.device | None = None, dtype: Any = None,
                        attn_implementation: str | None = None,
                        min_pixels: int | None = None, max_pixels: int | None = None,
                        prompt_format: str | None = None, max_length: int | None = None,
                        compile: bool = False, workers: int | str = 0, **settings: Any) -> Embedder:
        """See :meth:`EmbeddingModel.from_pretrained` (settings left at None: the values recorded
        in the adapter's / model's ``embedding_config.json``, else the defaults); eval mode.
        ``compile=True`` calls :meth:`compile` (fused element-wise kernels; see there).
        ``workers``: processes preparing items (0: in this process; ``"auto"``: the cores
        available, at most 8); ``decode`` (a setting): ``"exact"`` or ``"fast"`` (docs/model.md)."""
        embedder = cls(EmbeddingModel.from_pretrained(
            name_or_path, adapter=adapter, device=device, dtype=dtype,
            attn_implementation=attn_implementation, min_pixels=min_pixels,
            max_pixels=max_pixels, prompt_format=prompt_format, max_length=max_length, **settings),
            workers=workers)
        if compile:
            embedder.compile()
        return embedder

    def compile(self) -> Embedder:
        """``torch.compile`` the transformer blocks in place (:mod:`vis_embed.model.compile_blocks`).

        Worth it for long encodes: on a 2-core CPU it cut encode time by about 5%, after about
        18 s of compilation in the first batches (3 s once Inductor's disk cache has it;
        docs/benchmarks.md); the vectors equal the eager ones up to float rounding.  Returns self.
        """
        compile_blocks(self.model.base_model(), self.model.device)
        return self

    @property
    def embedding_dim(self) -> int:
        return self.model.embedding_dim

    @property
    def embedding_config(self) -> EmbeddingConfig:
        """The effective settings (dtype and attention as resolved here): what outputs record."""
        return self.model.current_config(effective=True)

    # ------------------------------------------------------------------ encoding
    def encode(self, items: Sequence[dict[str, Any]], instruction: str | None = None,
               batch_size: int = 16, show_progress: bool = False,
               base_dir: str | Path | None = None) -> np.ndarray:
        """(N, D) float32, L2-normalised; row i is item i.

        A bad item raises :class:`DataError` (its ``field``, ``path`` for image files, and
        ``item_index``: the position in ``items``).  Items follow the one item contract
        (:mod:`vis_embed.data.items`): an unknown key such as ``"img"`` is an error naming it
        and the item (``items[3].img``), and a ``bbox`` crops the image.
        """
        embeddings, _kept, _errors = self.encode_partial(
            items, instruction, batch_size, show_progress, base_dir, on_error="raise")
        return embeddings

    def encode_partial(self, items: Sequence[dict[str, Any]], instruction: str | None = None,
                       batch_size: int = 16, show_progress: bool = False,
                       base_dir: str | Path | None = None, on_error: str = "raise",
                       ) -> tuple[np.ndarray, list[int], dict[int, DataError]]:
        """Like :meth:`encode`, but with ``on_error="skip"`` bad items are left out.

        Returns ``(embeddings, kept, errors)``: ``embeddings[j]`` is item ``kept[j]`` (kept is
        increasing), and ``errors`` maps each skipped item's index to its DataError.
        """
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        errors = _invalid_items(items, on_error)  # before any model work: a typo fails at once
        batches = chunk_order(estimated_lengths(self.model, items, instruction, base_dir), batch_size,
                              max_padding=MAX_PADDING)
        vectors: dict[int, np.ndarray] = {}
        progress = _progress(len(items), show_progress)
        prepared_batches = self.prepared_batches(items, batches, instruction, base_dir, on_error, errors,
                                                 collate=True)
        try:
            with torch.inference_mode():
                for indices, (batch, prepared_indices) in zip(batches, prepared_batches):
                    if batch is not None:
                        batch_vectors = self.model(**batch).float().cpu().numpy()
                        vectors.update(self._finite_rows(prepared_indices, batch_vectors, on_error, errors))
                    progress(len(indices))
        finally:
            prepared_batches.close()
            progress(0, close=True)
        kept = sorted(vectors)
        dim = self.embedding_dim
        embeddings = np.stack([vectors[i] for i in kept]).astype(np.float32, copy=False) \
            if kept else np.zeros((0, dim), dtype=np.float32)
        return embeddings, kept, errors

    def prepared_batches(self, items: Sequence[dict[str, Any]], batches: Sequence[Sequence[int]],
                         instruction: str | None, base_dir: str | Path | None, on_error: str,
                         errors: dict[int, DataError], collate: bool = True) -> Iterator[tuple[Any, list[int]]]:
        """``(batch, indices)`` for each of ``batches``, prepared ahead of the caller: the
        collated batch (or the list of PreparedItems with ``collate=False``; None if every item
        failed) and the indices it holds.  A bad item raises or joins ``errors`` (on_error),
        in batch order, wherever it was prepared."""
        images = sum(1 for index, item in enumerate(items) if index not in errors and item.get("image") is not None)
        workers = resolve_workers(self.workers, images)
        if self._pool_starting is not None and self._pool_starting.is_alive():
            workers = 0  # the workers are still starting (serve): this batch is prepared here
        if workers > 0 and batches:
            return _one_batch_ahead(
                self._pool_batches(items, batches, instruction, base_dir, on_error, errors, collate, workers))
        return _one_batch_ahead(self._in_process_batches(items, batches, instruction, base_dir, on_error, errors,
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
                    if _accepted(index, result, on_error, errors):
                        prepared.append(self.model.count_truncated(result))
                        kept.append(index)
                yield self._batch_of(prepared, collate), kept
        finally:
            stream.close()

    def _batch_of(self, prepared: list[PreparedItem], collate: bool) -> Any:
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
        workers = resolve_workers(self.workers)
        if workers < 1:
            return
        if not background:
            self._preparation_pool(workers)
            return
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

    def _finite_rows(self, indices: list[int], batch_vectors: np.ndarray, on_error: str,
                     errors: dict[int, DataError]) -> list[tuple[int, np.ndarray]]:
        """(index, vector) of the finite rows; a non-finite one raises or joins ``errors``."""
        kept = []
        for index, vector, finite in zip(indices, batch_vectors, np.isfinite(batch_vectors).all(axis=1)):
            if finite:
                kept.append((index, vector))
                continue
            error = NonFiniteEmbeddingError(index, self.describe())
            if on_error == "raise":
                raise error
            errors[index] = error
        return kept

    def describe(self) -> str:
        """``model M, adapter A`` (or ``no adapter``): what produced the vectors."""
        adapter = getattr(self.model, "adapter", None)
        name = getattr(self.model, "name_or_path", None) or "?"
        return f"model {name}, " + (f"adapter {adapter}" if adapter else "no adapter")

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
            if _accepted(index, result, on_error, errors):
                prepared.append(result)
                kept.append(index)
        return prepared, kept

    # ------------------------------------------------------------------ identity
    def fingerprint(self) -> str:
        """Identifies weights + adapter + every embedding setting (for caches): the settings are
        the hash of the effective EmbeddingConfig's dump (dtype as loaded), not a list of fields,
        so a field added to the config changes every key made from it."""
        if self._fingerprint is None:
            model = self.model
            self._fingerprint = fingerprint_json({
                "weights": _checkpoint_fingerprint(model.name_or_path, model.backbone),
                "adapter": _checkpoint_fingerprint(model.adapter, None) if model.adapter else None,
                "settings": self.embedding_config.fingerprint(),
            })
        return self._fingerprint


def _one_batch_ahead(batches: Iterator[tuple[Any, list[int]]]) -> Iterator[tuple[Any, list[int]]]:
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


def _invalid_items(items: Sequence[Any], on_error: str) -> dict[int, DataError]:
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


def _checkpoint_fingerprint(name_or_path: str | None, backbone: Any) -> str:
    """Content hash of a local checkpoint's files, or hub id + resolved commit.

    JSON files are hashed after parsing, without keys that only record how a file was loaded
    (``is_local``, ...), so a checkpoint re-saved unchanged keeps its fingerprint.
    """
    if name_or_path is None:
        return "in-memory"
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        commit = getattr(getattr(backbone, "config", None), "_commit_hash", None)
        return f"{name_or_path}@{commit}"
    files = sorted({f for pattern in _CHECKPOINT_FILES for f in path.glob(pattern)})
    parts = {}
    for file in files:
        if file.suffix == ".json":
            content = json.loads(file.read_text(encoding="utf-8"))
            if isinstance(content, dict):
                content = {k: v for k, v in content.items() if k not in _VOLATILE_JSON_KEYS}
            parts[file.name] = fingerprint_json(content)
        else:
            parts[file.name] = fingerprint_files([file])
    return fingerprint_json(parts)


def _accepted(index: int, result: PreparedItem | DataError, on_error: str, errors: dict[int, DataError]) -> bool:
    """True for a prepared item; a bad one (its DataError) is raised (``on_error="raise"``) or
    recorded in ``errors`` -- the one rule, wherever the item was prepared."""
    if not isinstance(result, DataError):
        return True
    if on_error == "raise":
        raise result
    errors[index] = result
    return False


def _progress(total: int, enabled: bool) -> Callable[..., None]:
    if not enabled:
        return lambda n, close=False: None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, unit="item", desc="encoding")

    def update(n: int, close: bool = False) -> None:
        bar.update(n)
        if close:
            bar.close()

    return update
