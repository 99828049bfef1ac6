"""The inference runtime: Embedder, worker pools, batching of items, encoding files."""
