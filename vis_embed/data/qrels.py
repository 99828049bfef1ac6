"""The ``qrels`` layout (BEIR): a queries file, a corpus file and graded relevance judgements.

- ``queries`` / ``corpus``: rows ``{"id", "text"?, "image"?, ...}`` (an item plus a unique id;
  JSONL or Parquet), every item checked by :func:`vis_embed.data.items.check_item`.
- ``qrels``: rows ``{"query_id", "corpus_id", "score"}`` (JSONL), or BEIR's TSV with the
  header ``query-id<TAB>corpus-id<TAB>score``; ``score`` is an integer grade.

A judgement with a grade above 0 makes the document relevant (grade = its gain in
``ndcg_linear``); a grade of 0 or below is a judged non-relevant document, as in trec_eval.  An
id in the qrels that the queries or corpus file lacks, a duplicate id, a repeated (query,
document) pair or a non-integer grade is an error naming file, line and field.  A query with no
relevant document is kept out of the scores (BEIR and trec_eval drop it from the mean) and
counted (:attr:`QrelsData.n_unjudged`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vis_embed.data.eval_rows import resolved_item, unique_id
from vis_embed.data.items import Item
from vis_embed.data.records import ImageChecker, RowContext
from vis_embed.data.tables import read_table
from vis_embed.errors import DataError
from vis_embed.io import read_text_lines

QRELS_TSV_HEADER: tuple[str, ...] = ("query-id", "corpus-id", "score")
QRELS_KEYS: tuple[str, ...] = ("query_id", "corpus_id", "score")


@dataclass(frozen=True)
class QrelsRow:
    """One query or corpus document: its id, its item, and where it was written."""

    id: str
    item: Item
    line: int


@dataclass(frozen=True)
class QrelsData:
    queries: list[QrelsRow]            # the queries with at least one relevant document, in file order
    corpus: list[QrelsRow]
    judgements: dict[str, dict[str, int]]  # query id -> {corpus id: grade} (every grade, 0 included)
    n_unjudged: int                    # queries left out: no document with a grade above 0


def _read_items(path: Path, image_root: Path, checker: ImageChecker) -> list[QrelsRow]:
    rows: list[QrelsRow] = []
    seen: dict[str, int] = {}
    for line, row in read_table(path):
        ctx = RowContext(path, line)
        row_id = unique_id(row, ctx, seen)
        fields = {key: value for key, value in row.items() if key != "id"}
        rows.append(QrelsRow(row_id, resolved_item(fields, image_root, None, ctx, checker), line))
    if not rows:
        raise DataError("data file has no rows", path=path)
    return rows


def _grade(value: Any, ctx: RowContext) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ctx.error("score", f"expected an integer grade, got {value!r:.40}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.error("score", f"expected an integer grade, got {value!r:.40}")
    return value


def read_qrels(path: str | Path) -> list[tuple[int, str, str, int]]:
    """``(line, query id, corpus id, grade)`` of a qrels file (.jsonl, or .tsv with BEIR's header)."""
    path = Path(path)
    rows: list[tuple[int, str, str, int]] = []
    if path.suffix.lower() == ".tsv":
        lines = iter(read_text_lines(path))
        header = next(lines, None)
        if header is None or tuple(header[1].rstrip("\r\n").split("\t")) != QRELS_TSV_HEADER:
            raise DataError(f"expected the header {chr(9).join(QRELS_TSV_HEADER)!r}", path=path, line=1)
        for line, text in lines:
            if not text.strip():
                continue
            parts = text.rstrip("\r\n").split("\t")
            ctx = RowContext(path, line)
            if len(parts) != 3:
                raise ctx.error(None, f"expected 3 tab-separated columns ({', '.join(QRELS_TSV_HEADER)}), "
                                      f"got {len(parts)}")
            rows.append((line, parts[0], parts[1], _grade(parts[2], ctx)))
    else:
        for line, row in read_table(path):
            ctx = RowContext(path, line)
            for key in QRELS_KEYS:
                if key not in row:
                    raise ctx.error(key, "missing required field")
            for key in QRELS_KEYS[:2]:
                if not isinstance(row[key], str) or not row[key]:
                    raise ctx.error(key, f"expected a non-empty id string, got {row[key]!r:.40}")
            rows.append((line, row["query_id"], row["corpus_id"], _grade(row["score"], ctx)))
    if not rows:
        raise DataError("qrels file has no judgements", path=path)
    return rows


def load_qrels_dataset(queries_path: str | Path, corpus_path: str | Path, qrels_path: str | Path,
                       image_root: str | Path | None = None, *, check_images: bool = True) -> QrelsData:
    """Queries, corpus and judgements of a ``qrels`` dataset, cross-checked (errors name file:line:field)."""
    queries_path, corpus_path, qrels_path = Path(queries_path), Path(corpus_path), Path(qrels_path)
    root = Path(image_root) if image_root is not None else queries_path.parent
    checker = ImageChecker(check_images)
    queries = _read_items(queries_path, root, checker)
    corpus = _read_items(corpus_path, root, checker)
    query_ids, corpus_ids = {row.id for row in queries}, {row.id for row in corpus}
    judgements: dict[str, dict[str, int]] = {}
    first_line: dict[tuple[str, str], int] = {}
    for line, query_id, corpus_id, grade in read_qrels(qrels_path):
        ctx = RowContext(qrels_path, line)
        if query_id not in query_ids:
            raise ctx.error("query_id", f"unknown query id {query_id!r:.60} (not in {queries_path.name})")
        if corpus_id not in corpus_ids:
            raise ctx.error("corpus_id", f"unknown corpus id {corpus_id!r:.60} (not in {corpus_path.name})")
        if (query_id, corpus_id) in first_line:
            raise ctx.error("corpus_id", f"({query_id!r:.40}, {corpus_id!r:.40}) judged twice "
                                         f"(first on line {first_line[query_id, corpus_id]})")
        first_line[query_id, corpus_id] = line
        judgements.setdefault(query_id, {})[corpus_id] = grade
    answerable = [row for row in queries if any(g > 0 for g in judgements.get(row.id, {}).values())]
    if not answerable:
        raise DataError("no query has a relevant document (a grade above 0)", path=qrels_path)
    return QrelsData(queries=answerable, corpus=corpus, judgements=judgements,
                     n_unjudged=len(queries) - len(answerable))
