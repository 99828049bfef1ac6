"""Command-line vocabulary of stored vectors (no numpy, torch or faiss: ``--help`` reads it).

``--dim`` (Matryoshka width) is one flag on encode, eval, mteb and serve, declared here once;
``--precision``'s names are :data:`PRECISIONS`.
"""

from __future__ import annotations

import argparse

PRECISIONS: tuple[str, ...] = ("float32", "float16", "int8", "uint8", "binary", "ubinary")
RANGED_PRECISIONS = ("int8", "uint8")   # need per-dimension calibration ranges
BIT_PRECISIONS = ("binary", "ubinary")  # one bit per dimension, packed 8 to a byte

DIM_HELP = ("keep the first N dimensions of every vector, renormalised (Matryoshka); meant for models "
            "trained with loss.matryoshka_dims (default: the full width)")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (exit 2 naming the flag otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_dim_argument(parser: argparse.ArgumentParser, help_text: str = DIM_HELP) -> None:
    parser.add_argument("--dim", type=positive_int, default=None, metavar="N", help=help_text)
