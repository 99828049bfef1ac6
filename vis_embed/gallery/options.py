"""Command-line vocabulary of galleries (no numpy, torch or faiss: ``--help`` reads it).

The precision names and ``--dim`` belong to the stored vectors (:mod:`vis_embed.vectors.options`),
re-exported here.
"""

from __future__ import annotations

import argparse
from typing import Any

from vis_embed.errors import ConfigError
from vis_embed.vectors.options import (BIT_PRECISIONS, DIM_HELP, PRECISIONS, RANGED_PRECISIONS,  # noqa: F401
                                       add_dim_argument, positive_int)  # (re-exported)

# persistent index kinds of `vis-embed index` (gallery/store.py)
STORE_KINDS: tuple[str, ...] = ("auto", "flat", "binary", "int8", "ivf-pq")

ALLOW_ANY_MODEL_HELP = ("search an index whose index.json records no model fingerprint (an older one) with this "
                        "model's queries all the same (default: refused, the vectors' model is unknown)")

MAX_SEED = 2 ** 31 - 1  # faiss' clustering seed is a C int


def seed_int(text: str) -> int:
    """argparse type: an integer from 0 to :data:`MAX_SEED` (faiss' seed; exit 2 naming the flag otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_SEED}, got {value}")
    return value


def check_rescore(rescore: Any, index: str, flag: str = "--rescore") -> int:
    """``rescore`` (an int >= 0) when it fits the index kind: only binary / int8 codes are re-ranked."""
    if isinstance(rescore, bool) or not isinstance(rescore, int) or rescore < 0:
        raise ConfigError(f"{flag} must be an integer >= 0, got {rescore!r}")
    if rescore and index not in ("binary", "int8"):
        raise ConfigError(f"{flag} re-ranks a binary or int8 index's shortlist; --index {index} is searched "
                          f"exactly or with floats already")
    return rescore

