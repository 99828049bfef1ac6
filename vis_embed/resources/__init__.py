"""Data shipped inside the package, so an installed vis_embed needs no source checkout.

- ``reference/visme_table1.csv``: the published Precision@1 rows of the VisME paper's Table 1;
- ``reference/mmeb_scores/*.json``: peer models' MMEB score files (VLM2Vec format);
- ``recipes/tiny_cpu.yaml``: the quickstart's training recipe (a copy of the top-level
  ``recipes/tiny_cpu.yaml`` that users edit; a test keeps the two identical).

Read through :mod:`importlib.resources`, never through ``__file__`` paths, so the files are
found in any installation layout.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import as_file, files
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+; annotations only
    from importlib.resources.abc import Traversable

REFERENCE_TABLE = "visme_table1.csv"
TINY_RECIPE = "tiny_cpu.yaml"


def _root() -> Traversable:
    return files(__name__)


def reference_table() -> Traversable:
    """The paper's Table 1 (CSV, ``#`` lines are comments)."""
    return _root() / "reference" / REFERENCE_TABLE


def mmeb_score_files() -> list[Traversable]:
    """The peer MMEB score files, sorted by name."""
    folder = _root() / "reference" / "mmeb_scores"
    return sorted((entry for entry in folder.iterdir() if entry.name.endswith(".json")), key=lambda e: e.name)


@contextmanager
def tiny_recipe_path() -> Iterator[Path]:
    """A file-system path of the packaged tiny recipe, valid inside the ``with`` block."""
    with as_file(_root() / "recipes" / TINY_RECIPE) as path:
        yield path
