"""Command-line vocabulary of ``vis-embed index`` / ``search`` / ``serve --index`` (no numpy, torch
or faiss: ``--help`` reads it).  The index kinds and their rules are
:mod:`vis_embed.vectors.index_spec`'s; the precision names and ``--dim`` the stored vectors'
(:mod:`vis_embed.vectors.options`).
"""

from __future__ import annotations

import argparse

ALLOW_ANY_MODEL_HELP = ("search an index whose index.json records no model fingerprint (an older one) with this "
                        "model's queries all the same (default: refused, the vectors' model is unknown)")

def add_rescore_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--rescore K`` of a stored index (``vis-embed search`` and ``serve --index``: one
    declaration); checked by the one rescore rule when the index loads (``GalleryIndex.load``)."""
    parser.add_argument("--rescore", type=int, default=None, metavar="K",
                        help="quantized index: re-rank a K x k shortlist with the float vectors (default: the "
                             "index's, 4; 0: the codes' own scores)")


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


