"""``vis-embed search``: encode a JSONL of queries and search a persistent index
(:mod:`vis_embed.gallery.store`) -- the library half; arguments in :mod:`vis_embed.gallery.cli`.

Output (written atomically): one JSON line per query, in input order:
``{"line": N, "id": QUERY_ID, "hits": [{"id": GALLERY_ID, "score": S}, ...]}`` best first.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vis_embed.errors import ConfigError
from vis_embed.gallery.store import GalleryIndex
from vis_embed.vectors.transforms import truncate
from vis_embed.io import write_jsonl

if TYPE_CHECKING:
    from vis_embed.model.runtime.embedder import Embedder


def hits_of(index: GalleryIndex, scores: np.ndarray, rows: np.ndarray) -> list[list[dict[str, Any]]]:
    """Each query's hits as ``{"id", "score"}`` (rows -1, fewer than k in the index, left out)."""
    return [[{"id": index.ids[int(row)], "score": float(score)} for score, row in zip(query_scores, query_rows)
             if row >= 0] for query_scores, query_rows in zip(scores, rows)]


def query_instruction(given: str | None, embedder: Embedder) -> str | None:
    """The instruction a search's queries are embedded with: ``given`` (``""``: none), else the
    model's recorded ``query_instruction``.  The one rule of ``vis-embed search`` and ``POST
    /v1/search``: the gallery was ranked against queries embedded so, and the two surfaces must
    return the same hits for the same query."""
    return given if given is not None else embedder.embedding_config.query_instruction


def search_jsonl(model: str | Path, index_dir: Path, input_path: Path, output: Path, *, k: int = 10,
                 adapter: str | Path | None = None, instruction: str | None = None, batch_size: int = 16,
                 rescore: int | None = None, allow_any_model: bool = False, device: str | None = None,
                 show_progress: bool = True, workers: int | str = "auto", **settings: Any) -> int:
    """Search ``index_dir`` with every query of ``input_path``; returns the number of queries.

    The index is opened and the queries read before the model loads (bad input fails fast);
    the model must be the one that made the gallery (its fingerprint); the instruction is
    :func:`query_instruction`'s.  A file of no query writes an empty output without loading it."""
    from vis_embed.model.runtime.embedder import Embedder
    from vis_embed.model.runtime.encode_file import anchor_error, read_items
    from vis_embed.errors import DataError

    if k < 1:
        raise ConfigError(f"--k must be >= 1, got {k}")
    index = GalleryIndex.load(index_dir, rescore=rescore)
    index.require_model(allow_any_model)
    items, ids, lines, _rejects = read_items(Path(input_path), on_error="raise")
    if not items:  # no query: an empty hits file, and no model loaded to embed nothing
        write_jsonl(output, [])
        return 0
    embedder = Embedder.from_pretrained(model, adapter=adapter, device=device, workers=workers, **settings)
    try:
        index.check_queries(embedder.fingerprint(), embedder.embedding_dim, allow_any_model)
        try:
            queries = embedder.encode(items, instruction=query_instruction(instruction, embedder),
                                      batch_size=batch_size, show_progress=show_progress,
                                      base_dir=Path(input_path).parent)
        except DataError as exc:
            raise anchor_error(exc, Path(input_path), lines) from None
    finally:
        embedder.close()
    scores, rows = index.search(truncate(queries, index.dim), k)  # k past the rows: every row
    write_jsonl(output, [{"line": line, "id": query_id, "hits": hits}
                         for line, query_id, hits in zip(lines, ids, hits_of(index, scores, rows))])
    return len(items)
