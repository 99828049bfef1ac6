"""``vis-embed encode`` across the ranks of a torchrun launch: resumable shards, merged on rank 0.

The items are cut into one shard per rank (at most ``SHARD_SIZE`` items each); every rank
encodes its share with :meth:`Embedder.encode_partial` and writes each finished shard
atomically under ``<output>.shards/<key>/`` (:class:`~vis_embed.embedding_cache.EmbeddingCache`).
The key covers the encoder fingerprint, the instruction, ``on_error`` and the items with the
*content* of their local image files, so a rerun of the same command reuses exactly the
shards that were finished -- a rank killed mid-run loses only the shard it was encoding --
and a changed image or model is never served from a stale shard.  Rank 0 gathers the shards
and gets ``encode_partial``'s answer for the whole list; the caller writes the output and
then removes the shards (:func:`remove_shards`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from vis_embed.data.items import ResolvedItem
from vis_embed.embedding_cache import CacheStats, ContentHasher, EmbeddingCache, Shard
from vis_embed.errors import DataError
from vis_embed.model.runtime.embedder import Embedder

SHARD_SIZE = 4096  # items per shard at most: what a killed rank can lose


def shards_dir(output: Path) -> Path:
    """Where the shards of ``output`` (e.g. ``emb.npy``) live while it is being encoded."""
    return Path(f"{output.with_suffix('') if output.suffix == '.npy' else output}.shards")


def encode_across_ranks(embedder: Embedder, items: list[dict[str, Any]], *, work_dir: Path,
                        instruction: str | None, batch_size: int, show_progress: bool, base_dir: Path,
                        on_error: str, stats: CacheStats | None = None,
                        ) -> tuple[np.ndarray, list[int], dict[int, DataError]] | None:
    """``encode_partial(items, ...)`` shared out across the ranks: rank 0 gets
    ``(embeddings, kept, errors)``, the other ranks None.  Every rank calls it alike."""
    cache = EmbeddingCache(work_dir, SHARD_SIZE, stats)
    key = EmbeddingCache.key(encoder=embedder.fingerprint(), instruction=instruction, on_error=on_error,
                             items=_signatures(items, base_dir))

    def encode_shard(start: int, stop: int) -> Shard:
        try:
            vectors, kept, errors = embedder.encode_partial(
                items[start:stop], instruction=instruction, batch_size=batch_size,
                show_progress=show_progress, base_dir=base_dir, on_error=on_error)
        except DataError as error:  # on_error="raise": name the item by its place in the whole list
            if getattr(error, "item_index", None) is not None:
                error.item_index += start  # type: ignore[attr-defined]
            raise
        return vectors, {"start": start, "kept": kept,
                         "errors": [_error_note(index, error) for index, error in errors.items()]}

    shards = cache.encode_shards(key, len(items), encode_shard)
    return None if shards is None else _merge(shards, embedder.embedding_dim)


def remove_shards(work_dir: Path) -> None:
    """Drop the shards once the output is written (every rank: each may hold its own)."""
    shutil.rmtree(work_dir, ignore_errors=True)


def _signatures(items: list[dict[str, Any]], base_dir: Path) -> list[str]:
    """Each item's content signature (:meth:`ResolvedItem.signature`): a readable local image
    by its SHA-256; a missing one by its location (encoding it fails, or is skipped, anyway)."""
    hasher = ContentHasher()

    def digest(path: str) -> str | None:
        return hasher.file(path) if Path(path).is_file() else None

    return [ResolvedItem.of(item, base_dir).signature(digest) for item in items]


def _error_note(index: int, error: DataError) -> dict[str, Any]:
    return {"index": index, "reason": error.reason, "path": error.path, "field": error.field}


def _merge(shards: list[Shard], dim: int) -> tuple[np.ndarray, list[int], dict[int, DataError]]:
    """One ``(embeddings, kept, errors)`` from the shards, indices counted over the whole list."""
    blocks, kept, errors = [], [], {}
    for vectors, note in shards:
        start = int(note.get("start", 0))
        blocks.append(vectors.reshape(-1, dim) if vectors.size else np.zeros((0, dim), np.float32))
        kept.extend(start + index for index in note.get("kept", []))
        for failed in note.get("errors", []):
            error = DataError(failed["reason"], path=failed["path"], field=failed["field"])
            error.item_index = start + failed["index"]  # type: ignore[attr-defined]
            errors[error.item_index] = error  # type: ignore[attr-defined]
    return np.concatenate(blocks, axis=0).astype(np.float32, copy=False), kept, errors
