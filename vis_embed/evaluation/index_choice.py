"""The earlier import path of :mod:`vis_embed.gallery.index_choice` (the one index chooser), kept for code written
against it; the index stack lives in the gallery package, below the evaluation."""

from __future__ import annotations

from vis_embed.gallery.index_choice import (  # noqa: F401  (re-exported)
    IndexChoice, bf16_faster_than_faiss, bf16_shortlist_usable, choose_index, gpu_available,
    resolve_index)
