"""The earlier import path of :mod:`vis_embed.gallery.search_bf16` (the bf16 shortlist search), kept for code written
against it; the index stack lives in the gallery package, below the evaluation."""

from __future__ import annotations

from vis_embed.gallery.search_bf16 import (  # noqa: F401  (re-exported)
    Bf16ShortlistIndex, check_bf16_products)
