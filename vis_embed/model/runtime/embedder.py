"""Embedder: the inference API (``from_pretrained`` / ``encode``) over an EmbeddingModel.

``encode`` is the fast path: items are sorted by their token count as the model will see it
(prompt template, text and visual tokens, from the image header only: ``model.inputs.lengths``) and
grouped so that no batch is more than 10% padding (``model.inputs.batching.chunk_order``, shared with
GradCache); batches run under ``torch.inference_mode`` (bf16 + sdpa/flash-attn on CUDA by
default) while the item feed (:mod:`.item_feed`: worker processes or a helper thread) prepares
the next batch, and rows are written back in input order; the fingerprint for caches is
:mod:`.fingerprint`'s.  Because pooling reads the last *real* token and text-only positions are counted from
the attention mask, a vector does not depend on its batch neighbours.  ``compile()`` fuses
the blocks' element-wise work (opt-in).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vis_embed.distributed import local_device
from vis_embed.errors import DataError
from vis_embed.model.inputs.batching import chunk_order, until_stopped
from vis_embed.model.network.aligned_mlp import align_mlps, alignment_for
from vis_embed.model.network.compile_blocks import compile_blocks, resolve_compile
from vis_embed.model.embedding_config import EmbeddingConfig
from vis_embed.model.network.embedding_model import EmbeddingModel
from vis_embed.model.files.fingerprint import model_fingerprint
from vis_embed.model.runtime.item_feed import ItemFeed, invalid_items
from vis_embed.model.inputs.lengths import estimated_lengths
from vis_embed.model.runtime.prepare_pool import resolve_workers
from vis_embed.model.runtime.readback import PendingRows

# A batch closes early once its padded-token fraction would exceed this (never below a quarter
# of batch_size items): padding is pure waste in the decoder, and on CPU several smaller
# batches cost little more than one big one.
MAX_PADDING = 0.1
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
        self.feed = ItemFeed(model, workers)  # items prepared one batch ahead (worker processes or a thread)

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, adapter: str | Path | None = None,
                        device: str | torch.device | None = None, dtype: Any = None,
                        compile: bool | None = None, workers: int | str = 0, **settings: Any) -> Embedder:
        """See :meth:`EmbeddingModel.from_pretrained` (``settings``: EmbeddingConfig fields, or
        ``config=`` one already resolved; those left at None: the values recorded in the
        adapter's / model's ``embedding_config.json``, else the defaults); eval mode.
        ``compile``: call :meth:`compile` (fused element-wise kernels; see there); None (the
        default): on CUDA yes, elsewhere no (:func:`~.compile_blocks.resolve_compile`).  The vision
        MLPs are swapped for their aligned, gate-and-up-stacked form (:mod:`.aligned_mlp`: exact).
        ``workers``: processes preparing items (0: in this process; ``"auto"``: the cores
        available, at most 8); ``decode`` (a setting): ``"exact"`` or ``"fast"`` (docs/model.md)."""
        embedder = cls(EmbeddingModel.from_pretrained(name_or_path, adapter=adapter, device=device, dtype=dtype,
                                                      **settings), workers=workers)
        # Exact (zero padding); for inference only, so done here and not in EmbeddingModel.
        align_mlps(embedder.model.base_model(), alignment_for(embedder.model.device))
        if resolve_compile(compile, embedder.model.device):
            embedder.compile()
        return embedder

    def compile(self) -> Embedder:
        """``torch.compile`` the transformer blocks in place (:mod:`vis_embed.model.network.compile_blocks`).

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
        and the item (``items[3].img``), a ``bbox`` crops the image, and a ``video`` (a folder of
        frames, a list of frames or a video file) is embedded as one clip of ``video_frames`` frames.
        """
        embeddings, _kept, _errors = self.encode_partial(
            items, instruction, batch_size, show_progress, base_dir, on_error="raise")
        return embeddings

    def encode_partial(self, items: Sequence[dict[str, Any]], instruction: str | None = None,
                       batch_size: int = 16, show_progress: bool = False,
                       base_dir: str | Path | None = None, on_error: str = "raise",
                       should_stop: Callable[[], bool] | None = None,
                       ) -> tuple[np.ndarray, list[int], dict[int, DataError]]:
        """Like :meth:`encode`, but with ``on_error="skip"`` bad items are left out.

        Returns ``(embeddings, kept, errors)``: ``embeddings[j]`` is item ``kept[j]`` (kept is
        increasing), and ``errors`` maps each skipped item's index to its DataError.
        ``should_stop()`` is asked before each forward batch (model.inputs.batching.until_stopped).
        """
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if isinstance(items, (str, bytes, dict)) or not (hasattr(items, "__len__") and hasattr(items, "__getitem__")):
            # a dict was read as its keys ("items[0]: ... got str"), a generator failed on len()
            raise TypeError(f"items must be a list of items, got {type(items).__name__}"
                            + ("; put one item in a list" if isinstance(items, dict) else ""))
        errors = invalid_items(items, on_error)  # before any model work: a typo fails at once
        batches = self.batch_plan(items, instruction, batch_size, base_dir)
        vectors: dict[int, np.ndarray] = {}
        progress = _progress(len(items), show_progress)
        prepared_batches = self.prepared_batches(items, batches, instruction, base_dir, on_error, errors)
        in_flight: PendingRows | None = None  # launched, not read back yet (model/runtime/readback.py)
        try:
            with torch.inference_mode():
                for indices, (batch, prepared_indices) in zip(batches, until_stopped(prepared_batches, should_stop)):
                    if batch is not None:
                        launched = PendingRows(prepared_indices, self.model(**batch).float())
                        if in_flight is not None:  # read behind the batch just launched: the device keeps busy
                            vectors.update(self._finite_rows(in_flight, on_error, errors))
                        in_flight = launched
                    progress(len(indices))
                if in_flight is not None:
                    vectors.update(self._finite_rows(in_flight, on_error, errors))
        finally:
            prepared_batches.close()
            progress(0, close=True)
        kept = sorted(vectors)
        dim = self.embedding_dim
        embeddings = np.stack([vectors[i] for i in kept]).astype(np.float32, copy=False) \
            if kept else np.zeros((0, dim), dtype=np.float32)
        return embeddings, kept, errors

    def batch_plan(self, items: Sequence[dict[str, Any]], instruction: str | None, batch_size: int,
                   base_dir: str | Path | None = None) -> list[list[int]]:
        """The batches ``encode`` runs ``items`` in (indices): sorted by the token count the model
        will see, none more than :data:`MAX_PADDING` padding (the dry run and the benchmarks ask here)."""
        return chunk_order(estimated_lengths(self.model, items, instruction, base_dir), batch_size,
                           max_padding=MAX_PADDING)

    def _finite_rows(self, rows: PendingRows, on_error: str,
                     errors: dict[int, DataError]) -> list[tuple[int, np.ndarray]]:
        """(index, vector) of a batch's finite rows; a non-finite one raises or joins ``errors``."""
        kept = []
        batch_vectors = rows.numpy()
        for index, vector, finite in zip(rows.indices, batch_vectors, np.isfinite(batch_vectors).all(axis=1)):
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

    # ------------------------------------------------------------------ preparation (model/runtime/item_feed.py)
    @property
    def workers(self) -> int | str:
        """Processes preparing items (0: this process; ``"auto"``: by cores and item count)."""
        return self.feed.workers

    @workers.setter
    def workers(self, workers: int | str) -> None:
        self.feed.workers = workers if workers == "auto" else resolve_workers(workers)

    def prepared_batches(self, items: Sequence[dict[str, Any]], batches: Sequence[Sequence[int]],
                         instruction: str | None, base_dir: str | Path | None, on_error: str,
                         errors: dict[int, DataError], collate: bool = True) -> Iterator[tuple[Any, list[int]]]:
        """:meth:`ItemFeed.prepared_batches` (the dry run and the server's batcher call it here)."""
        return self.feed.prepared_batches(items, batches, instruction, base_dir, on_error, errors, collate)

    def start_workers(self, background: bool = False) -> None:
        """:meth:`ItemFeed.start_workers`: a server starts them before its first request."""
        self.feed.start_workers(background)

    def close(self) -> None:
        """Stop the preparation worker processes (started again by the next encode)."""
        self.feed.close()

    # ------------------------------------------------------------------ identity
    def fingerprint(self) -> str:
        """Identifies weights + adapter + every embedding setting, for caches (model/files/fingerprint.py)."""
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.model, self.embedding_config)
        return self._fingerprint


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


def load_embedder(model: str | Path, adapter: str | Path | None = None, **overrides: Any) -> Embedder:
    """``Embedder.from_pretrained`` with the overrides that are not None (EmbeddingConfig fields such
    as prompt_format or max_length, device, compile); the others come from the model's recorded
    ``embedding_config.json``, else the defaults.

    Without a device, each rank of a torchrun launch on GPUs takes its own (``cuda:LOCAL_RANK``).
    """
    given = {key: value for key, value in overrides.items() if value is not None}
    if "device" not in given and local_device() is not None:
        given["device"] = local_device()
    return Embedder.from_pretrained(str(model), adapter=None if adapter is None else str(adapter), **given)
