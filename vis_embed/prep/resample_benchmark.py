"""The ``gallery`` benchmark ``prep resample`` writes for an eval split of ``identity`` rows.

It must test what training trains (``TrainDataset.query_item`` / ``positive_item``): the query
is the row as an item (image + text), the candidate the row's image *without* its text.  A
gallery whose items kept the text would be solvable by matching the identity's own caption.
So the queries file holds the eval rows as they are, the gallery file the same rows without
``text`` (self-matches are excluded by id).  Not everything can be such a benchmark:

* rows with a ``bbox``: training crops the query, and the gallery layout cannot crop, so an
  uncropped query would test another task: no benchmark at all (said in the report);
* an identity whose eval instances all show one image file: the gallery excludes the query's
  own file, so its queries could never be answered: left out, counted.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from vis_embed.data.images import resolve_image
from vis_embed.data.video import resolve_video

QUERIES_STEM = "eval_queries"
GALLERY_STEM = "eval_gallery"


def _visual(row: dict[str, Any], image_root: Path) -> Any:
    """The row's resolved image (or video): what the gallery loader compares as "the same file"."""
    if row.get("video") is not None:
        return resolve_video(row["video"], image_root)
    return resolve_image(row["image"], image_root)


def _not_written(reason: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    return [], [], {"written": False, "reason": reason}


def gallery_benchmark(eval_rows: list[dict[str, Any]], kind: str, image_root: Path
                      ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """``(query_rows, gallery_rows, summary)``; no rows when no benchmark can be written
    (``summary["reason"]`` says why)."""
    if kind != "identity":
        return _not_written("pairs rows: only identity rows get a gallery benchmark")
    if not eval_rows:
        return _not_written("no eval split")
    boxed = sum("bbox" in row for row in eval_rows)
    if boxed:
        return _not_written(f"{boxed} eval rows carry a bbox: training queries are crops and the gallery "
                            "layout cannot crop, so a gallery benchmark would test another task")
    visuals: dict[str, set[Any]] = defaultdict(set)
    for row in eval_rows:
        visuals[row["identity"]].add(_visual(row, image_root))
    one_image = {identity for identity, files in visuals.items() if len(files) < 2}
    queries = [row for row in eval_rows if row["identity"] not in one_image]
    gallery = [{key: value for key, value in row.items() if key != "text"} for row in queries]
    summary = {"written": bool(queries), "reason": None if queries else "every eval identity shows one image file",
               "queries": len(queries), "identities": len(visuals) - len(one_image),
               "identities_left_out_one_image": len(one_image), "rows_left_out": len(eval_rows) - len(queries)}
    return queries, gallery, summary
