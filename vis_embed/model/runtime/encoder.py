"""The encoder contract: what evaluation and hard-negative mining need from a model.

:class:`vis_embed.model.runtime.embedder.Embedder` implements it; so can any stand-in (tests, other
backbones) without importing torch.  One declaration, so the two users agree on ``encode``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class Encoder(Protocol):
    def encode(self, items: Sequence[dict[str, Any]], instruction: str | None = None, batch_size: int = 16,
               show_progress: bool = False, base_dir: str | Path | None = None) -> np.ndarray:
        """(N, D) float32, L2-normalised; row i embeds ``items[i]``."""

    def fingerprint(self) -> str:
        """Identifies weights, adapter, prompt format and pixel budget (cache keys, results)."""
