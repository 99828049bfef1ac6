"""Settings of an evaluation run and the vocabulary they draw on.

Kept free of heavy imports (no torch, numpy or faiss) because the command line builds its
``--help`` from them before anything is loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# The vocabularies (and their one check) live beside the manifest's schema, which uses them too.
from vis_embed.gallery.options import check_rescore
from vis_embed.data.eval_options import (  # noqa: F401  (re-exported)
    DEFAULT_INDEX,
    DEFAULT_TIE_POLICY,
    INDEX_KINDS,
    TIE_POLICIES,
    check_index_kind,
    check_tie_policy,
)


@dataclass
class EvalSettings:
    batch_size: int = 16
    max_queries: int | None = None
    datasets: Sequence[str] | None = None     # names to run (default: all)
    index: str = DEFAULT_INDEX                # gallery layouts: one of INDEX_KINDS
    rescore: int = 0                          # binary / int8: shortlist rescore x depth, float re-rank
    dim: int | None = None                    # Matryoshka width the vectors are cut to (None: full)
    depth: int | None = None                  # gallery ranking depth (default: see layouts)
    n_examples: int = 3                       # queries shown per retrieval grid
    tie_policy: str = DEFAULT_TIE_POLICY      # candidates / gallery rankings: one of TIE_POLICIES
    cache_dir: Path | None = None             # default OUT/cache
    shard_size: int = 1024
    show_progress: bool = True
    pictures: bool = True
    reference: Path | None = None             # published table CSV (default: the packaged copy)

    def __post_init__(self) -> None:  # checked once, before any model is loaded
        check_index_kind(self.index)
        check_tie_policy(self.tie_policy)
        check_rescore(self.rescore, self.index)
