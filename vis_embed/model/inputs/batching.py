"""Length-aware batching shared by encoding (Embedder) and training (GradCache chunks).

A transformer batch is padded to its longest sequence, so every padded slot is compute spent
on nothing.  Grouping items of similar length, and closing a group early when the next item
would push its padded fraction too high, keeps that waste small.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def chunk_order(lengths: Sequence[int], chunk_size: int, max_padding: float = 1.0) -> list[list[int]]:
    """Indices grouped into chunks of at most ``chunk_size``, longest members first.

    Sorting by length keeps members of similar length together, so padding each chunk to its
    own longest member wastes few tokens.  ``max_padding`` < 1 also closes a chunk early when
    the next member would push the chunk's padded-token fraction above it -- but never below
    a quarter of ``chunk_size`` members, so a very spread batch cannot degrade into
    one-member forwards.  Memory stays bounded: a chunk never holds more than ``chunk_size``
    members, each no longer than the chunk's first.  The sort is stable (ties keep batch order).
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    size = chunk_size if chunk_size > 0 else max(1, len(order))
    minimum = max(1, size // 4)
    chunks: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for index in order:
        if current:
            width = lengths[current[0]]
            padding = 1.0 - (tokens + lengths[index]) / (width * (len(current) + 1)) if width else 0.0
            if len(current) >= size or (padding > max_padding and len(current) >= minimum):
                chunks.append(current)
                current, tokens = [], 0
        current.append(index)
        tokens += lengths[index]
    if current:
        chunks.append(current)
    return chunks


class EncodeStopped(Exception):
    """The caller's ``should_stop`` said so between two batches (a server's client gave up)."""


def until_stopped(batches: Iterable[T], should_stop: Callable[[], bool] | None) -> Iterator[T]:
    """``batches``, asking ``should_stop()`` before each one: True raises :class:`EncodeStopped`
    (the rest of the work is dropped; a batch already launched on a GPU may still finish there,
    unread: Embedder.encode reads each batch back behind the next)."""
    for batch in batches:
        if should_stop is not None and should_stop():
            raise EncodeStopped
        yield batch
