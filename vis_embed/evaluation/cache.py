"""Embedding cache for evaluation, keyed so that a stale entry can never be reused.

A cache key is the SHA-256 of everything that determines an embedding: the encoder
fingerprint (weights, adapter, prompt format, pixel settings -- ``Embedder.fingerprint()``),
the instruction, and the *content* of the dataset (its data files and every referenced image
file, hashed byte by byte).  Change any of them and the key changes, so old shards are
simply not found.

Items are encoded in shards of ``shard_size``; each shard is written atomically as soon as
it is done, so an interrupted run resumes at the first missing shard and never re-encodes
a finished one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vis_embed.io import atomic_path, atomic_write_json, fingerprint_files, fingerprint_json

EncodeFn = Callable[[Sequence[dict[str, Any]]], np.ndarray]


class ContentHasher:
    """SHA-256 of files by content, memoised for one run (images are shared across datasets)."""

    def __init__(self) -> None:
        self._digests: dict[Path, str] = {}

    def file(self, path: str | Path) -> str:
        path = Path(path).resolve()
        if path not in self._digests:
            self._digests[path] = fingerprint_files([path])
        return self._digests[path]

    def files(self, paths: Sequence[str | Path]) -> str:
        return fingerprint_json([self.file(p) for p in paths])


class EmbeddingCache:
    """Sharded ``.npy`` embeddings under ``root/<key>/``; one key per (encoder, data, side)."""

    def __init__(self, root: str | Path, shard_size: int = 1024) -> None:
        self.root = Path(root)
        self.shard_size = int(shard_size)

    @staticmethod
    def key(**parts: Any) -> str:
        return fingerprint_json(parts)

    def _shard_path(self, key: str, shard: int) -> Path:
        return self.root / key / f"shard-{shard:05d}.npy"

    def get_or_encode(self, key: str, items: Sequence[dict[str, Any]], encode: EncodeFn,
                      on_shard: Callable[[int, int], None] | None = None) -> np.ndarray:
        """Embeddings of ``items`` (N, D): cached shards are loaded, missing ones encoded."""
        directory = self.root / key
        directory.mkdir(parents=True, exist_ok=True)
        meta_path = directory / "meta.json"
        if not meta_path.exists():
            atomic_write_json(meta_path, {"key": key, "n_items": len(items), "shard_size": self.shard_size})
        meta = json.loads(meta_path.read_text())
        shard_size = int(meta["shard_size"])  # keep the layout of a run being resumed
        if int(meta["n_items"]) != len(items):
            raise RuntimeError(f"cache {directory} holds {meta['n_items']} items, expected {len(items)}")
        blocks = []
        n_shards = max(1, -(-len(items) // shard_size))
        for shard in range(n_shards):
            path = self._shard_path(key, shard)
            chunk = items[shard * shard_size:(shard + 1) * shard_size]
            if path.exists():
                block = np.load(path)
            else:
                block = np.asarray(encode(chunk), dtype=np.float32) if chunk else np.zeros((0, 0), np.float32)
                with atomic_path(path) as tmp:
                    np.save(tmp, block)
            if on_shard is not None:
                on_shard(shard, n_shards)
            blocks.append(block)
        blocks = [b for b in blocks if b.size] or blocks[:1]
        return np.concatenate(blocks, axis=0)
