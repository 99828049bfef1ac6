"""MMEB-V2's 24 visual-document tasks (ViDoRe v1/v2, VisRAG, ViDoSeek / MMLongBench) -> ``qrels``.

Every source is a BEIR-style hub dataset with three configs: ``queries`` (``query-id``,
``query``[, ``language``]), ``corpus`` (``corpus-id``, ``image``) and ``qrels`` (``query-id``,
``corpus-id``, ``score``).  Written as ``queries.jsonl`` (``{"id", "text"}``), ``corpus.jsonl``
(``{"id", "image": "media/<page>"}``, the page bytes written as they are) and ``qrels.jsonl``
(``{"query_id", "corpus_id", "score"}``), as the reference reads them:

* qrels keep the grade; a grade <= 0 is not relevant and dropped; a pair listed twice keeps its
  higher grade;
* a query with no relevant page is dropped (counted in the manifest: it cannot be scored);
* a multilingual ViDoRe v2 set is pooled: every language's queries form one task over one
  corpus.  Where a query id is shared by its translations, each row becomes its own query
  ``<id>-<language>`` with the same qrels (the reference scores every row as a query).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from vis_embed.prep.mmeb_v2_media import image_bytes, page_file_name
from vis_embed.errors import DataError

Rows = list[dict[str, Any]]
COLUMNS: dict[str, tuple[str, ...]] = {"queries": ("query-id", "query"), "corpus": ("corpus-id", "image"),
                                       "qrels": ("query-id", "corpus-id", "score")}


def check_columns(table: Any, config: str, where: str) -> None:
    missing = [c for c in COLUMNS[config] if c not in table.column_names]
    if missing:
        raise DataError(f"missing column {missing[0]!r} (has: {', '.join(table.column_names)})",
                        path=f"{where} [{config}]", field=missing[0])


def graded_qrels(table: Any, where: str) -> dict[str, dict[str, int | float]]:
    """query id -> {corpus id: grade}, relevant pairs only (grade > 0), a repeated pair at its max."""
    qrels: dict[str, dict[str, int | float]] = {}
    for line, row in enumerate(table, start=1):
        score = row["score"]
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise DataError(f"expected a numeric grade, got {score!r}", path=f"{where} [qrels]", line=line,
                            field="score")
        if score > 0:
            pairs = qrels.setdefault(str(row["query-id"]), {})
            corpus_id = str(row["corpus-id"])
            pairs[corpus_id] = max(pairs.get(corpus_id, 0), score)
    return qrels


def _query_rows(table: Any, where: str) -> list[tuple[str, str, str]]:
    """(our id, source id, text) per query row; ids shared by translations get ``-<language>``."""
    rows = [(str(r["query-id"]), str(r["query"]), str(r.get("language") or "")) for r in table]
    counts: dict[str, int] = {}
    for source_id, _, _ in rows:
        counts[source_id] = counts.get(source_id, 0) + 1
    out, seen = [], set()
    for line, (source_id, text, language) in enumerate(rows, start=1):
        ours = f"{source_id}-{language}" if counts[source_id] > 1 and language else source_id
        if ours in seen:
            raise DataError(f"query id {ours!r} repeats", path=f"{where} [queries]", line=line, field="query-id")
        seen.add(ours)
        out.append((ours, source_id, text))
    return out


def _corpus_rows(table: Any, media: Path, where: str) -> Rows:
    rows: Rows = []
    seen: set[str] = set()
    for line, row in enumerate(table, start=1):
        corpus_id = str(row["corpus-id"])
        if corpus_id in seen:
            raise DataError(f"corpus id {corpus_id!r} repeats", path=f"{where} [corpus]", line=line,
                            field="corpus-id")
        seen.add(corpus_id)
        data = image_bytes(row["image"], corpus_id, f"{where} [corpus]")
        name = page_file_name(corpus_id, data, f"{where} [corpus]")
        (media / name).write_bytes(data)  # media/ is inside the task's temporary folder
        rows.append({"id": corpus_id, "image": f"media/{name}"})
    return rows


def beir_task(load: Callable[[str], Any], task_dir: Path, where: str) -> tuple[dict[str, Rows], dict[str, Any]]:
    """The three files of one BEIR source, and the counts for the manifest."""
    tables = {config: load(config) for config in COLUMNS}
    for config, table in tables.items():
        check_columns(table, config, where)
    qrels = graded_qrels(tables["qrels"], where)
    media = task_dir / "media"
    media.mkdir(parents=True, exist_ok=True)
    corpus = _corpus_rows(tables["corpus"], media, where)
    known = {row["id"] for row in corpus}
    queries: Rows = []
    pairs: Rows = []
    dropped = 0
    for ours, source_id, text in _query_rows(tables["queries"], where):
        relevant = qrels.get(source_id)
        if not relevant:
            dropped += 1
            continue
        for corpus_id, grade in relevant.items():
            if corpus_id not in known:
                raise DataError(f"qrels name corpus id {corpus_id!r}, which the corpus does not hold",
                                path=f"{where} [qrels]", field="corpus-id")
            pairs.append({"query_id": ours, "corpus_id": corpus_id, "score": grade})
        queries.append({"id": ours, "text": text})
    if not queries:
        raise DataError("no query has a relevant page", path=f"{where} [qrels]")
    report = {"queries_without_relevant_pages": dropped, "languages": sorted(
        {str(r.get("language")) for r in tables["queries"] if r.get("language")})}
    return {"queries.jsonl": queries, "corpus.jsonl": corpus, "qrels.jsonl": pairs}, report
