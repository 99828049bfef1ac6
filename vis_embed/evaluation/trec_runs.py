"""TREC run and qrels files of a retrieval dataset (``--save-runs``): what ir_measures,
pytrec_eval, trec_eval and ranx read.

``OUT/runs/<dataset>.trec``: one line per ranked result, ``qid Q0 docid rank score tag``, ranks
from 1 in the order the metrics saw (the run's tie policy); ``OUT/runs/<dataset>.qrels``: the
judgements the metrics used, ``qid 0 docid grade`` (qrels layout: its graded qrels, queries
without a relevant document left out as in the scores; candidates: the positive, grade 1;
gallery: the query's identity, grade 1).  Document ids: a candidates query's own list is
``c0``, ``c1``, ... (its candidates in the row's order, ``c0`` the positive; a positive listed
again is dropped as in the scores); gallery and qrels rows keep their ids.  A query's first
RUN_DEPTH (1000) results are written, TREC's custom, whatever the gallery's size.

TREC files separate fields by whitespace, so an id must hold none: ids are written with
whitespace, ``%`` and control characters percent-encoded (``a b`` -> ``a%20b``; other ids are
written unchanged, and ``urllib.parse.unquote`` gives the id back).  Evaluators order results
of equal score by document id, not by rank: with tied scores they may score a run differently
from results.json, which applies its tie policy.  Files are written atomically.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vis_embed.io import atomic_path, safe_name

RUN_TAG = "vis_embed"
RUNS_DIR = "runs"
# results written per query: TREC's customary 1000 (hit@k, ndcg_linear@k need the top 10);
# bounds a run file at 1000 lines per query whatever the gallery's size
RUN_DEPTH = 1000


def _needs_escape(ch: str) -> bool:
    return ch.isspace() or ch == "%" or not ch.isprintable()


def trec_id(value: str) -> str:
    """``value`` with whitespace, ``%`` and control characters percent-encoded as UTF-8 bytes
    (reversible with ``urllib.parse.unquote``); any other id is returned unchanged."""
    return "".join("".join(f"%{byte:02X}" for byte in ch.encode("utf-8")) if _needs_escape(ch) else ch
                   for ch in value)


@dataclass
class TrecRun:
    """A dataset's rankings and judgements, as the metrics saw them.  ``documents`` is the table
    the rankings index (gallery or corpus ids; a candidates run's ``c0``, ``c1``, ...); a query's
    ranking is kept as two arrays (document numbers, scores), the ids written only at the end."""

    documents: Sequence[str]
    rankings: list[tuple[str, np.ndarray, np.ndarray]] = field(default_factory=list)  # (qid, numbers, scores)
    qrels: list[tuple[str, str, int]] = field(default_factory=list)                     # (qid, docid, grade)

    def add(self, query_id: str, numbers: np.ndarray, scores: np.ndarray, judged: Iterable[tuple[str, int]]) -> None:
        """Query ``query_id``'s ranking (document numbers and scores, best first; the first
        RUN_DEPTH kept) and its judgements ``(document id, grade)``."""
        self.rankings.append((query_id, np.asarray(numbers)[:RUN_DEPTH],
                              np.asarray(scores, dtype=np.float64)[:RUN_DEPTH]))
        self.qrels.extend((query_id, doc, grade) for doc, grade in judged)

    def run_lines(self, tag: str = RUN_TAG) -> Iterator[str]:
        # repr: the shortest text that reads back as the same float, so no tie appears in the file that was not one
        for qid, numbers, scores in self.rankings:
            query = trec_id(qid)
            for rank, (number, score) in enumerate(zip(numbers.tolist(), scores.tolist()), start=1):
                yield f"{query} Q0 {trec_id(self.documents[number])} {rank} {score!r} {tag}\n"

    def qrels_lines(self) -> Iterator[str]:
        for qid, doc, grade in self.qrels:
            yield f"{trec_id(qid)} 0 {trec_id(doc)} {grade}\n"


def _write_lines(path: Path, lines: Iterable[str]) -> Path:
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as handle:
        handle.writelines(lines)  # streamed: a large run is never one string in memory
    return path


def write_run_files(run: TrecRun, out_dir: str | Path, dataset: str, tag: str = RUN_TAG) -> tuple[Path, Path]:
    """``OUT/runs/<dataset>.trec`` and ``OUT/runs/<dataset>.qrels``, each written atomically."""
    folder = Path(out_dir) / RUNS_DIR
    stem = safe_name(dataset)
    return _write_lines(folder / f"{stem}.trec", run.run_lines(tag)), _write_lines(folder / f"{stem}.qrels",
                                                                                   run.qrels_lines())
