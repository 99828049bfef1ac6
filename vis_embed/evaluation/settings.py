"""Settings of an evaluation run and the vocabulary they draw on.

Kept free of heavy imports (no torch, numpy or faiss) because the command line builds its
``--help`` from them before anything is loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Gallery search backends of :mod:`vis_embed.evaluation.search`.
# "auto" picks the fastest exact kind for the machine (evaluation.index_choice).
INDEX_KINDS: tuple[str, ...] = ("auto", "exact", "exact-bf16", "exact-gpu", "ivf")
DEFAULT_INDEX = "auto"
# How tied scores are ordered in candidates / gallery rankings (see evaluation.metrics):
# pessimistic = negatives before positives; first = listed order, as VLM2Vec's argmax.
TIE_POLICIES: tuple[str, ...] = ("pessimistic", "first")
DEFAULT_TIE_POLICY = "pessimistic"


@dataclass
class EvalSettings:
    batch_size: int = 16
    max_queries: int | None = None
    datasets: Sequence[str] | None = None     # names to run (default: all)
    index: str = DEFAULT_INDEX                # gallery layouts: one of INDEX_KINDS
    depth: int | None = None                  # gallery ranking depth (default: see layouts)
    n_examples: int = 3                       # queries shown per retrieval grid
    tie_policy: str = DEFAULT_TIE_POLICY      # candidates / gallery rankings: one of TIE_POLICIES
    cache_dir: Path | None = None             # default OUT/cache
    shard_size: int = 1024
    show_progress: bool = True
    pictures: bool = True
    reference: Path | None = None             # published table CSV (default: the packaged copy)
