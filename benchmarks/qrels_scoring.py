"""Scoring cost of the ``qrels`` layout (global ranking + graded metrics) and of ``--save-runs``.

    .venv/bin/python benchmarks/qrels_scoring.py                          # 1,600 queries x 10,000 pages
    .venv/bin/python benchmarks/qrels_scoring.py --queries 200 --corpus 2000   # a quick smoke

A BEIR-shaped dataset of text rows (the size of ViDoRe / VisRAG sets: up to ~1.6k queries and
~10k pages; text rows, since encoding is not what is timed) and random unit vectors standing in
for embeddings: the layout's ``score`` (exact index, every query ranked over the whole corpus,
the tie rule, ndcg_linear / hit / recall / MRR) is timed without and with the TREC run, then the
run files' writing.  Prints seconds and queries/s per phase and the machine (provenance).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

from vis_embed.data.benchmark import EvalDatasetSpec  # noqa: E402
from vis_embed.evaluation import layouts  # noqa: E402
from vis_embed.evaluation.layout_base import ScoringOptions  # noqa: E402
from vis_embed.evaluation.trec_runs import write_run_files  # noqa: E402
from vis_embed.vectors.index_spec import IndexSpec  # noqa: E402
from vis_embed.provenance import provenance  # noqa: E402


def write_dataset(root: Path, n_queries: int, n_corpus: int, seed: int) -> dict[str, Path]:
    rng = np.random.default_rng(seed)
    files = {"queries": root / "queries.jsonl", "corpus": root / "corpus.jsonl", "qrels": root / "qrels.jsonl"}
    files["queries"].write_text("".join(json.dumps({"id": f"q{i}", "text": f"question {i}"}) + "\n"
                                        for i in range(n_queries)))
    files["corpus"].write_text("".join(json.dumps({"id": f"p{j}", "text": f"page {j}"}) + "\n"
                                       for j in range(n_corpus)))
    rows = []
    for i in range(n_queries):  # 1-3 relevant pages a query, grades 1-2 (ViDoRe v2 style)
        for j in rng.choice(n_corpus, size=int(rng.integers(1, 4)), replace=False):
            rows.append({"query_id": f"q{i}", "corpus_id": f"p{j}", "score": int(rng.integers(1, 3))})
    files["qrels"].write_text("".join(json.dumps(row) + "\n" for row in rows))
    return files


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1600)
    parser.add_argument("--corpus", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=1536)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        spec = EvalDatasetSpec("bench", "qrels", "VDRv1", None, "MMEB-V2", modality="visdoc",
                               **write_dataset(root, args.queries, args.corpus, args.seed))
        embeddings = {"query": unit(rng, args.queries, args.dim), "corpus": unit(rng, args.corpus, args.dim)}
        report = {"queries": args.queries, "corpus": args.corpus, "dim": args.dim}
        for save_runs in (False, True):
            options = ScoringOptions(index=IndexSpec(kind="flat"), n_examples=0, save_runs=save_runs)
            prepared = layouts.load_for_scoring(spec, options=options)
            start = time.perf_counter()
            outcome = prepared.score(embeddings)
            seconds = time.perf_counter() - start
            report["score_with_run_s" if save_runs else "score_s"] = round(seconds, 3)
            report["queries_per_s_with_run" if save_runs else "queries_per_s"] = round(args.queries / seconds, 1)
        start = time.perf_counter()
        run_path, _qrels_path = write_run_files(outcome.run, root / "out", "bench")
        report["write_run_s"] = round(time.perf_counter() - start, 3)
        report["run_file_mb"] = round(run_path.stat().st_size / 2**20, 1)
        report["ndcg_linear@5"] = round(outcome.metrics["ndcg_linear@5"], 3)
    print(json.dumps({"result": report, "provenance": provenance()}, indent=1, default=str))


if __name__ == "__main__":
    main()
