"""Embedding cache, keyed so that a stale entry can never be reused, and sharded across ranks.

A cache key is the SHA-256 of everything that determines an embedding: the encoder
fingerprint (weights, adapter, prompt format, pixel settings -- ``Embedder.fingerprint()``),
the instruction, and the *content* of the items (data files and every referenced image
file, hashed byte by byte).  Change any of them and the key changes, so old shards are
simply not found.

Items are encoded in shards of ``shard_size``; each shard is written atomically as soon as
it is done, so an interrupted run resumes at the first missing shard and never re-encodes
a finished one.  Under ``torchrun`` (:mod:`vis_embed.distributed`) the missing shards are
dealt out across the ranks, each rank writes the shards it encodes into its own cache folder
(the same folder on a shared file system), and rank 0 gathers the shards it cannot see on
its disk (other nodes') -- only rank 0 gets the embeddings back.  A killed rank loses only
the shard it was encoding.  Used by the evaluation harness and ``vis-embed encode``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vis_embed import distributed
from vis_embed.io import atomic_path, atomic_write_json, fingerprint_files, fingerprint_json, read_json_value

EncodeFn = Callable[[Sequence[dict[str, Any]]], np.ndarray]
# A shard: its vectors and a JSON-able note (e.g. which of its items were kept); {} for none.
Shard = tuple[np.ndarray, dict[str, Any]]
ShardEncodeFn = Callable[[int, int], Shard]  # (start, stop) of the items -> shard


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


@dataclass
class CacheStats:
    """What this process did: shards (and items) it encoded, finished shards the run reused."""

    encoded_shards: int = 0
    encoded_items: int = 0
    reused_shards: int = 0  # found finished by any rank at the start of an encode; the same on every rank

    def summary(self) -> str:
        return (f"rank {distributed.get_rank()} of {distributed.get_world_size()}: encoded "
                f"{self.encoded_items} items in {self.encoded_shards} shards; reused {self.reused_shards} "
                f"finished shards")


class EmbeddingCache:
    """Sharded ``.npy`` embeddings under ``root/<key>/``; one key per (encoder, items, instruction)."""

    def __init__(self, root: str | Path, shard_size: int = 1024, stats: CacheStats | None = None) -> None:
        self.root = Path(root)
        self.shard_size = int(shard_size)
        self.stats = CacheStats() if stats is None else stats  # the caller's, to read after a run

    @staticmethod
    def key(**parts: Any) -> str:
        return fingerprint_json(parts)

    def _shard_path(self, key: str, shard: int) -> Path:
        return self.root / key / f"shard-{shard:05d}.npy"

    def get_or_encode(self, key: str, items: Sequence[dict[str, Any]], encode: EncodeFn) -> np.ndarray | None:
        """Embeddings of ``items`` (N, D): cached shards are loaded, missing ones encoded.

        Under torchrun every rank must call this with the same arguments; rank 0 gets the
        embeddings, the other ranks None.
        """
        def encode_shard(start: int, stop: int) -> Shard:
            return np.asarray(encode(items[start:stop]), dtype=np.float32), {}

        shards = self.encode_shards(key, len(items), encode_shard)
        if shards is None:
            return None
        blocks = [vectors for vectors, _note in shards if vectors.size] or [shards[0][0]]
        return np.concatenate(blocks, axis=0)

    def encode_shards(self, key: str, n_items: int, encode_shard: ShardEncodeFn) -> list[Shard] | None:
        """Every shard of ``n_items`` items in order (rank 0; None on other ranks), encoding the
        missing ones with ``encode_shard`` -- dealt out across ranks under torchrun."""
        shard_size = self._layout(key, n_items)
        n_shards = max(1, -(-n_items // shard_size))
        finished = set().union(*distributed.all_gather_object(self._finished(key, n_shards)))
        missing = [shard for shard in range(n_shards) if shard not in finished]
        self.stats.reused_shards += n_shards - len(missing)
        for shard in missing[distributed.get_rank()::distributed.get_world_size()]:
            start, stop = shard * shard_size, min((shard + 1) * shard_size, n_items)
            vectors, note = encode_shard(start, stop) if stop > start else (np.zeros((0, 0), np.float32), {})
            self._save(key, shard, vectors, note)
            self.stats.encoded_shards += 1
            self.stats.encoded_items += stop - start
        return self._gather_on_rank0(key, n_shards)

    def _layout(self, key: str, n_items: int) -> int:
        """The shard size of ``key``: kept from a run being resumed (rank 0's), else chosen so
        that every rank gets work; a rank whose own folder has another layout drops it."""
        directory = self.root / key
        meta_path = directory / "meta.json"
        meta = read_json_value(meta_path) if meta_path.exists() else None
        if meta is not None and int(meta["n_items"]) != n_items:
            raise RuntimeError(f"cache {directory} holds {meta['n_items']} items, expected {n_items}")
        world = distributed.get_world_size()
        fresh = self.shard_size if world == 1 else max(1, min(self.shard_size, -(-n_items // world)))
        shard_size = int(distributed.broadcast_object(fresh if meta is None else int(meta["shard_size"])))
        if meta is None or int(meta["shard_size"]) != shard_size:
            for stale in directory.glob("shard-*"):  # another layout (another node's first run): only a cache
                stale.unlink(missing_ok=True)
            atomic_write_json(meta_path, {"key": key, "n_items": n_items, "shard_size": shard_size})
        return shard_size

    def _finished(self, key: str, n_shards: int) -> set[int]:
        return {shard for shard in range(n_shards) if self._shard_path(key, shard).exists()}

    def _save(self, key: str, shard: int, vectors: np.ndarray, note: dict[str, Any]) -> None:
        # the note first: the .npy's arrival is what marks the shard finished
        path = self._shard_path(key, shard)
        if note:
            atomic_write_json(path.with_suffix(".json"), note)
        with atomic_path(path) as tmp:
            np.save(tmp, vectors)

    def _load(self, key: str, shard: int) -> Shard:
        path = self._shard_path(key, shard)
        note_path = path.with_suffix(".json")
        return np.load(path), read_json_value(note_path) if note_path.exists() else {}

    def _gather_on_rank0(self, key: str, n_shards: int) -> list[Shard] | None:
        """Rank 0 loads every shard; the shards its disk lacks come from the lowest rank holding them."""
        distributed.barrier()  # every rank's writes are done: on a shared disk rank 0 now sees them all
        holdings = distributed.all_gather_object(self._finished(key, n_shards))
        rank = distributed.get_rank()
        sent = {shard: self._load(key, shard) for shard in range(n_shards)
                if shard not in holdings[0] and rank == min(r for r, held in enumerate(holdings) if shard in held)}
        received = distributed.gather_object(sent)
        if rank != 0:
            return None
        for shards in received[1:]:
            for shard, (vectors, note) in shards.items():
                self._save(key, shard, vectors, note)  # so a later run on this node reuses it
        return [self._load(key, shard) for shard in range(n_shards)]
