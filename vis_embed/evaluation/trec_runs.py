"""TREC run and qrels files of a retrieval dataset (``--save-runs``): what ir_measures,
pytrec_eval, trec_eval and ranx read.

``OUT/runs/<dataset>.trec``: one line per ranked result, ``qid Q0 docid rank score tag``, ranks
from 1 in the order the metrics saw (the run's tie policy); ``OUT/runs/<dataset>.qrels``: the
judgements the metrics used, ``qid 0 docid grade`` (qrels layout: its graded qrels, queries
without a relevant document left out as in the scores; candidates: the positive, grade 1;
gallery: the query's identity, grade 1).  Document ids: a candidates query's own list is
``c0``, ``c1``, ... (its candidates in the row's order, ``c0`` the positive; a positive listed
again is dropped as in the scores); gallery and qrels rows keep their ids.

TREC files separate fields by whitespace, so an id must hold none: ids are written with
whitespace, ``%`` and control characters percent-encoded (``a b`` -> ``a%20b``; other ids are
written unchanged, and ``urllib.parse.unquote`` gives the id back).  Evaluators order results
of equal score by document id, not by rank: with tied scores they may score a run differently
from results.json, which applies its tie policy.  Files are written atomically.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vis_embed.io import atomic_write_text, safe_name

RUN_TAG = "vis_embed"
RUNS_DIR = "runs"


def _needs_escape(ch: str) -> bool:
    return ch.isspace() or ch == "%" or not ch.isprintable()


def trec_id(value: str) -> str:
    """``value`` with whitespace, ``%`` and control characters percent-encoded as UTF-8 bytes
    (reversible with ``urllib.parse.unquote``); any other id is returned unchanged."""
    return "".join("".join(f"%{byte:02X}" for byte in ch.encode("utf-8")) if _needs_escape(ch) else ch
                   for ch in value)


@dataclass
class TrecRun:
    """A dataset's rankings and judgements, as the metrics saw them."""

    rankings: list[tuple[str, list[tuple[str, float]]]] = field(default_factory=list)  # qid -> [(docid, score)]
    qrels: list[tuple[str, str, int]] = field(default_factory=list)                    # (qid, docid, grade)

    def add(self, query_id: str, ranked: Sequence[tuple[str, float]], judged: Iterable[tuple[str, int]]) -> None:
        self.rankings.append((query_id, list(ranked)))
        self.qrels.extend((query_id, doc, grade) for doc, grade in judged)


def run_text(run: TrecRun, tag: str = RUN_TAG) -> str:
    # repr: the shortest text that reads back as the same float, so no tie appears in the file that was not one
    return "".join(f"{trec_id(qid)} Q0 {trec_id(doc)} {rank} {float(score)!r} {tag}\n"
                   for qid, ranked in run.rankings for rank, (doc, score) in enumerate(ranked, start=1))


def qrels_text(run: TrecRun) -> str:
    return "".join(f"{trec_id(qid)} 0 {trec_id(doc)} {grade}\n" for qid, doc, grade in run.qrels)


def write_run_files(run: TrecRun, out_dir: str | Path, dataset: str, tag: str = RUN_TAG) -> tuple[Path, Path]:
    """``OUT/runs/<dataset>.trec`` and ``OUT/runs/<dataset>.qrels``, written atomically."""
    folder = Path(out_dir) / RUNS_DIR
    stem = safe_name(dataset)
    return (atomic_write_text(folder / f"{stem}.trec", run_text(run, tag)),
            atomic_write_text(folder / f"{stem}.qrels", qrels_text(run)))
