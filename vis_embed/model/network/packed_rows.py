"""The CPU path of the packed vision attention (:mod:`vis_embed.model.network.attention`'s
"varlen" off CUDA): torch has no variable-length attention there, so the packed segments are
laid into rows of ``max_len`` slots -- short segments sharing a row (first fit, longest first) --
and attended in ONE batched ``scaled_dot_product_attention`` call with a block-diagonal mask.

:func:`padded_attention` runs it; :class:`RowPlan` is where each token goes (built once per
batch and kept while its boundary tensor lives); :func:`remember_segment_lengths` lets the
collation hand the host lengths over, so the plan needs no read-back from the device.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch
import torch.nn.functional as F


def padded_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_len: int,
            scaling: float | None) -> torch.Tensor:
    """One SDPA call over the segments packed into rows of ``max_len`` tokens (see
    :class:`RowPlan`; each query attends to its own segment only).  Written by hand because
    torch has no variable-length attention off CUDA."""
    tokens, heads, dim = q.shape
    segments = cu_seqlens.numel() - 1
    if tokens == segments * max_len:  # every segment is max_len long (no segment exceeds it): no padding
        def split(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.view(segments, max_len, heads, dim).transpose(1, 2)

        out = F.scaled_dot_product_attention(split(q), split(k), split(v), scale=scaling)
        return out.transpose(1, 2).reshape(tokens, heads, dim)
    plan = RowPlan.of(cu_seqlens, max_len, q.device)

    def pad(tensor: torch.Tensor) -> torch.Tensor:
        padded = tensor.new_zeros(plan.rows * max_len, heads, dim).index_copy(0, plan.slot, tensor)
        return padded.view(plan.rows, max_len, heads, dim).transpose(1, 2)

    out = F.scaled_dot_product_attention(pad(q), pad(k), pad(v), attn_mask=plan.mask, scale=scaling)
    return out.transpose(1, 2).reshape(plan.rows * max_len, heads, dim).index_select(0, plan.slot)


class RowPlan:
    """Where the CPU path puts each token: segments packed first-fit-decreasing into rows of
    ``max_len`` slots, so that short segments (Qwen2.5-VL's edge windows, small images beside
    large ones) share a row instead of each being padded to the longest.  ``slot``: each token's
    place in the flattened rows; ``mask``: which keys each query sees -- its own segment's
    (block-diagonal, ``(rows, 1, max_len, max_len)``), or a key mask ``(rows, 1, 1, max_len)``
    when no row holds two segments.  Padding slots attend among themselves (never an all-masked
    row, whose softmax would be NaN); their outputs are dropped.

    Built once per batch: the lengths are read to the host once (a sync on a GPU) and the plan is
    kept for every block that gets the same ``cu_seqlens`` tensor (transformers passes one object
    to all blocks of a forward; Qwen2.5-VL two, windows and full).  Packing trades padded score
    work (rows x max_len^2) for a mask: measured in docs/benchmarks.md (attention_compare.py)."""

    _cache: dict[int, tuple[Any, int, int, torch.device, RowPlan]] = {}
    _CACHE_SIZE = 8
    _lock = threading.Lock()

    def __init__(self, lengths: list[int], max_len: int, device: torch.device) -> None:
        row_of, offset_of, rows = first_fit_decreasing(lengths, max_len)
        self.rows = max(rows, 1)
        starts = [row_of[i] * max_len + offset_of[i] for i in range(len(lengths))]
        self.slot = torch.cat([torch.arange(start, start + length) for start, length in zip(starts, lengths)]
                              or [torch.zeros(0, dtype=torch.long)]).to(device)
        owner = torch.full((self.rows * max_len,), -1, dtype=torch.long)  # -1: padding
        for segment, (start, length) in enumerate(zip(starts, lengths)):
            owner[start:start + length] = segment
        owner = owner.view(self.rows, max_len).to(device)
        if all(count <= 1 for count in _segments_per_row(row_of, lengths, self.rows)):
            self.mask = (owner >= 0)[:, None, None, :]
        else:
            self.mask = (owner[:, :, None] == owner[:, None, :])[:, None]

    @classmethod
    def of(cls, cu_seqlens: torch.Tensor, max_len: int, device: torch.device) -> RowPlan:
        """The plan for this batch's ``cu_seqlens`` (cached while that very tensor lives)."""
        entry = cls._cache.get(id(cu_seqlens))
        if entry is not None:
            ref, version, cached_len, cached_device, plan = entry
            if ref() is cu_seqlens and version == _version(cu_seqlens) and cached_len == max_len \
                    and cached_device == device:
                return plan
        lengths = known_segment_lengths(cu_seqlens)  # given by the collation (model/network/vision_metadata.py)
        if lengths is None:
            lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()  # the batch's one host read
        plan = cls(lengths, max_len, device)
        with cls._lock:  # threads encoding side by side (the server) share the cache
            if len(cls._cache) >= cls._CACHE_SIZE:
                cls._cache.pop(next(iter(cls._cache)))
            cls._cache[id(cu_seqlens)] = (weakref.ref(cu_seqlens), _version(cu_seqlens), max_len, device, plan)
        return plan


# Host lengths of boundary tensors the collation computed (model/network/vision_metadata.py), by tensor
# identity while the tensor lives: the row plan then needs no read-back at all.
_SEGMENT_LENGTHS: dict[int, tuple[Any, list[int]]] = {}
_SEGMENT_LENGTHS_SIZE = 16


def remember_segment_lengths(cu_seqlens: torch.Tensor, lengths: list[int]) -> None:
    """Record that ``cu_seqlens`` (on its device) bounds segments of ``lengths`` tokens."""
    with RowPlan._lock:
        if len(_SEGMENT_LENGTHS) >= _SEGMENT_LENGTHS_SIZE:
            _SEGMENT_LENGTHS.pop(next(iter(_SEGMENT_LENGTHS)))
        _SEGMENT_LENGTHS[id(cu_seqlens)] = (weakref.ref(cu_seqlens), lengths)


def known_segment_lengths(cu_seqlens: torch.Tensor) -> list[int] | None:
    """The lengths :func:`remember_segment_lengths` recorded for this very tensor, else None."""
    entry = _SEGMENT_LENGTHS.get(id(cu_seqlens))
    return entry[1] if entry is not None and entry[0]() is cu_seqlens else None


def _version(tensor: torch.Tensor) -> int | None:
    """The in-place write counter; None for an inference tensor (it has none, and can be written
    in place only inside inference mode, where transformers computes fresh boundaries anyway)."""
    try:
        return tensor._version
    except RuntimeError:
        return None


def first_fit_decreasing(lengths: list[int], capacity: int) -> tuple[list[int], list[int], int]:
    """Each segment's row and offset in it, and the number of rows: longest first, each into the
    first row with room (empty segments take no room)."""
    row_of, offset_of = [0] * len(lengths), [0] * len(lengths)
    used: list[int] = []  # tokens placed in each row
    for segment in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        length = lengths[segment]
        row = next((r for r, filled in enumerate(used) if filled + length <= capacity), len(used)) \
            if length < capacity else len(used)
        if row == len(used):
            used.append(0)
        row_of[segment], offset_of[segment] = row, used[row]
        used[row] += length
    return row_of, offset_of, len(used)


def _segments_per_row(row_of: list[int], lengths: list[int], rows: int) -> list[int]:
    counts = [0] * rows
    for row, length in zip(row_of, lengths):
        counts[row] += length > 0
    return counts
