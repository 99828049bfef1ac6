"""The ``qrels`` layout (BEIR): each query ranked over the whole corpus, scored against graded
judgements.

Rows are read and cross-checked by :func:`vis_embed.data.qrels.load_qrels_dataset`; the ranking
is the gallery layout's (:class:`~vis_embed.evaluation.gallery_ranking.GlobalRanking`: the
run's index kind, the whole corpus up to 10k documents, else the top 1000, ties at the cut-off
resolved).  The primary score is ``ndcg_linear@5`` (MMEB-V2's visual-document score: gain = the
qrel's grade), or the dataset's ``options.primary`` (``hit@1``: MMEB-V2's video tasks); hit@1
(= P@1), recall@k, MRR, ndcg_linear@10 beside it.  Queries without a
relevant document are left out of every mean and counted (``n_queries_without_relevant``).
"""

from __future__ import annotations

import numpy as np

from vis_embed.data.benchmark import EvalDatasetSpec
from vis_embed.data.eval_options import QRELS_PRIMARIES
from vis_embed.data.qrels import load_qrels_dataset
from vis_embed.evaluation import metrics
from vis_embed.evaluation.gallery_ranking import GlobalRanking
from vis_embed.evaluation.layout_base import (Example, Outcome, PreparedDataset, ScoringOptions, clean, index_of,
                                               tie_policy_of)
from vis_embed.evaluation.trec_runs import TrecRun


def prepare_qrels(spec: EvalDatasetSpec, max_queries: int | None, options: ScoringOptions) -> PreparedDataset:
    """Queries and corpus as two sides; ``score`` ranks every query over the corpus."""
    data = load_qrels_dataset(spec.file("queries"), spec.file("corpus"), spec.file("qrels"), spec.root_for("queries"))
    query_rows = data.queries[:max_queries]
    queries = [clean(row.item) for row in query_rows]
    corpus = [clean(row.item) for row in data.corpus]
    position = {row.id: k for k, row in enumerate(data.corpus)}
    tie_policy = tie_policy_of(spec, options)
    index, requested = index_of(spec, options)

    def score(embeddings: dict[str, np.ndarray]) -> Outcome:
        query_emb, corpus_emb = embeddings["query"], embeddings["corpus"]
        ranking = GlobalRanking.build(corpus_emb, index, spec.options.depth or options.depth)
        per_query, examples, unresolved_ties = [], [], 0
        run = TrecRun([row.id for row in data.corpus]) if options.save_runs else None
        gains = np.zeros(len(corpus))  # the current query's grade of every document (reset after it)
        for q, ids, scores, complete in ranking.results(query_emb):
            judged = data.judgements[query_rows[q].id]
            judged_at = np.fromiter((position[doc] for doc in judged), dtype=np.int64, count=len(judged))
            gains[judged_at] = np.maximum(np.fromiter(judged.values(), dtype=np.float64, count=len(judged)), 0)
            relevant = [grade for grade in judged.values() if grade > 0]
            ranked = metrics.truncated_relevance(scores, gains[ids], ranking.depth, complete, tie_policy)
            unresolved_ties += metrics.boundary_tie_unresolved(scores, ranking.depth, complete)
            per_query.append(metrics.query_metrics(ranked, n_positives=len(relevant), ideal_gains=relevant))
            if run is not None or len(examples) < options.n_examples:
                order = metrics.tie_order(scores, gains[ids], tie_policy)
                if run is not None:
                    top = order[:ranking.depth]
                    run.add(query_rows[q].id, ids[top], scores[top],
                            [(doc, grade) for doc, grade in judged.items() if grade > 0])
                if len(examples) < options.n_examples:
                    examples.append(Example(queries[q], [(corpus[ids[j]], float(scores[j]), bool(gains[ids[j]] > 0))
                                                         for j in order[:5]]))
            gains[judged_at] = 0.0
        primary = spec.options.primary or QRELS_PRIMARIES[0]
        return Outcome(metrics.summarize(per_query), primary, len(per_query), examples,
                       {**ranking.extras(requested, corpus_emb.shape[1]),
                        "n_queries_without_relevant": data.n_unjudged, "tie_policy": tie_policy,
                        "n_unresolved_boundary_ties": unresolved_ties}, run)

    files = [spec.file("queries"), spec.file("corpus"), spec.file("qrels")]
    return PreparedDataset({"query": (spec.query_instruction, queries), "corpus": (spec.candidate_instruction, corpus)},
                           score, files,
                           {"query": (spec.file("queries"), [(row.line, "id") for row in query_rows]),
                            "corpus": (spec.file("corpus"), [(row.line, "id") for row in data.corpus])})
