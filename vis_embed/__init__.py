"""vis_embed: instruction-conditioned multimodal embeddings that know visual identity.

The public API, importable from the package root (each loaded on first use, so that ``import
vis_embed`` and the command line's ``--help`` do not import torch):

- ``Embedder``: items -> L2-normalised vectors (``Embedder.from_pretrained(model, adapter=...)``);
- ``EmbeddingModel``, ``EmbeddingConfig``: the network and the settings that define its vectors;
- ``load_recipe``, ``Trainer``: a recipe and the training loop (``Trainer(recipe).train()``);
- ``build_schedule``, ``ScheduleSettings``: the offline identity-aware batch schedule;
- ``evaluate_model``: ``vis-embed eval`` as a function;
- ``IndexSpec``, ``build_index``, ``GalleryIndex``: the index stack (a spec, the factory, a stored index).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it (the one place each lives; docs/architecture.md)
_PUBLIC = {
    "Embedder": "vis_embed.model.runtime.embedder",
    "EmbeddingModel": "vis_embed.model.network.embedding_model",
    "EmbeddingConfig": "vis_embed.model.embedding_config",
    "load_recipe": "vis_embed.training.recipe",
    "Trainer": "vis_embed.training.trainer",
    "build_schedule": "vis_embed.sampling.build",
    "ScheduleSettings": "vis_embed.sampling.settings",
    "evaluate_model": "vis_embed.evaluation.api",
    "IndexSpec": "vis_embed.vectors.index_spec",
    "build_index": "vis_embed.gallery.search",
    "GalleryIndex": "vis_embed.gallery.store",
}
__all__ = [*_PUBLIC, "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from vis_embed.evaluation.api import evaluate_model as evaluate_model
    from vis_embed.gallery.search import build_index as build_index
    from vis_embed.gallery.store import GalleryIndex as GalleryIndex
    from vis_embed.model.embedding_config import EmbeddingConfig as EmbeddingConfig
    from vis_embed.model.network.embedding_model import EmbeddingModel as EmbeddingModel
    from vis_embed.model.runtime.embedder import Embedder as Embedder
    from vis_embed.sampling.build import build_schedule as build_schedule
    from vis_embed.sampling.settings import ScheduleSettings as ScheduleSettings
    from vis_embed.training.recipe import load_recipe as load_recipe
    from vis_embed.training.trainer import Trainer as Trainer
    from vis_embed.vectors.index_spec import IndexSpec as IndexSpec


def __getattr__(name: str) -> Any:
    # Lazy (PEP 562) so that `import vis_embed` and the CLI's --help do not import torch.
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'vis_embed' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
