"""Old import path of Embedder (now :mod:`vis_embed.model.runtime.embedder`), kept for users' code."""

from vis_embed.model.runtime.embedder import Embedder as Embedder  # noqa: F401
