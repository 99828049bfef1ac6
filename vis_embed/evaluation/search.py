"""The earlier import path of :mod:`vis_embed.gallery.search` (the one index factory and batched
search), kept for code written against it; the index stack lives in the gallery package, below the evaluation."""

from __future__ import annotations

from vis_embed.gallery.search import (  # noqa: F401  (re-exported)
    Bf16ShortlistIndex, INDEX_KINDS, TorchExactIndex, build_index, check_bf16_products,
    numpy_topk, resolve_index, search)
