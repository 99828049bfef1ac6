"""vis_embed: instruction-conditioned multimodal embeddings that know visual identity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Embedder", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from vis_embed.model.runtime.embedder import Embedder


def __getattr__(name: str) -> Any:
    # Lazy so that `import vis_embed` (and the CLI's --help) does not import torch.
    if name == "Embedder":
        from vis_embed.model.runtime.embedder import Embedder

        return Embedder
    raise AttributeError(f"module 'vis_embed' has no attribute {name!r}")
