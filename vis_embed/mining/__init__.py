"""Hard-negative mining with an auxiliary embedding model (:mod:`.hard_negatives`; the command
``vis-embed mine-negatives``: :mod:`.cli`).  Above the index stack (gallery/): its nearest
neighbours come from the one index factory, like every other search."""
