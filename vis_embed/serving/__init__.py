"""``vis-embed serve``: an OpenAI-compatible embeddings server (FastAPI + uvicorn).

:mod:`~vis_embed.serving.schemas` parses and checks requests, :mod:`~vis_embed.serving.images`
turns item images into decoded pictures, :mod:`~vis_embed.serving.batcher` merges concurrent
requests into micro-batches run by one worker thread through ``Embedder``, and
:mod:`~vis_embed.serving.app` wires them into the HTTP API.  See docs/serving.md.
"""
