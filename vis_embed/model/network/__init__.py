"""The network: the embedding model (torch modules, attention, pooling, heads, adaptations)."""
