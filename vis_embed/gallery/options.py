"""Command-line vocabulary of ``vis-embed index`` / ``search`` / ``serve --index`` (no numpy, torch
or faiss: ``--help`` reads it).  The index kinds and their rules are
:mod:`vis_embed.vectors.index_spec`'s; the precision names and ``--dim`` the stored vectors'
(:mod:`vis_embed.vectors.options`).
"""

from __future__ import annotations

import argparse

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


