"""Benchmark layouts: how a manifest entry's rows become items to encode and metrics.

Every layout turns an :class:`~vis_embed.data.benchmark.EvalDatasetSpec` into a :class:`PreparedDataset`: named *sides*
(items + the instruction they are encoded with) and a ``score`` function mapping the
sides' embeddings to metrics.  The harness encodes each distinct (instruction, item) once,
whatever side or row it appears in.

Layouts (row formats are documented in docs/evaluation.md):
``candidates`` (MMEB: each query ranks its own candidate list, positive first),
``gallery`` (identity retrieval over a shared gallery with faiss), ``qrels`` (BEIR: queries
ranked over a corpus, graded judgements; :mod:`vis_embed.evaluation.qrels_layout`), and the
peer layouts ``2afc``, ``nearid``, ``asym_recall``, ``pair_ap``, ``human_corr``
(:mod:`vis_embed.evaluation.peer_layouts`, scored by :mod:`vis_embed.evaluation.peer_metrics`).  The
retrieval layouts keep their rankings for TREC run files when asked (``ScoringOptions.save_runs``,
:mod:`vis_embed.evaluation.trec_runs`).

Every layout's ``score`` sees embeddings that passed one boundary (:func:`load_for_scoring`): a NaN or
infinite vector is a :class:`DataError` naming the dataset, file, row and field of its item
(whatever the index kind), and every vector is L2-normalised, so every score is a cosine and
an encoder cannot game a protocol with its vectors' norms.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vis_embed.data.benchmark import EvalDatasetSpec, load_candidates, load_gallery
from vis_embed.data.manifest import LAYOUTS
from vis_embed.data.factorize import factorize
from vis_embed.data.items import Item, ResolvedItem
from vis_embed.errors import ConfigError, DataError
from vis_embed.evaluation import metrics
from vis_embed.evaluation.gallery_ranking import GlobalRanking
from vis_embed.evaluation.qrels_layout import prepare_qrels
from vis_embed.evaluation.trec_runs import TrecRun
from vis_embed.evaluation.layout_base import (Example, Outcome, PreparedDataset, ScoringOptions, clean, index_of,
                                              scored_at_the_boundary, tie_policy_of)
from vis_embed.evaluation.peer_layouts import (prepare_2afc, prepare_asym_recall, prepare_human_corr,
                                               prepare_nearid, prepare_pair_ap)

__all__ = ["load_for_scoring"]


# ---------------------------------------------------------------- candidates

def prepare_candidates(spec: EvalDatasetSpec, max_queries: int | None, options: ScoringOptions) -> PreparedDataset:
    """MMEB-eval: ``{"id", "query": item, "candidates": [item, ...]}``, positive first.

    Rows are read and validated by :func:`vis_embed.data.load_candidates`.
    """
    tie_policy = tie_policy_of(spec, options)
    rows = load_candidates(spec.file("path"), spec.root_for("path"))[:max_queries]
    queries = [clean(row.query) for row in rows]
    pool: list[Item] = []
    pool_index: dict[ResolvedItem, int] = {}
    pool_places: list[tuple[int, str]] = []
    lists: list[np.ndarray] = []
    listed: list[list[int]] = []  # each kept candidate's place in its row (the run files' c<k> ids)
    kept_positives: list[int] = []  # how many of a row's kept candidates (its first ones) are positives
    duplicates = 0
    for row in rows:
        indices: list[int] = []
        places: list[int] = []
        for k, raw in enumerate(row.candidates):
            item = clean(raw)
            key = ResolvedItem.unchecked(item)  # the loader resolved and checked it
            if key not in pool_index:
                pool_index[key] = len(pool)
                pool.append(item)
                pool_places.append((row.line, f"candidates[{k}]"))
            if pool_index[key] in indices[: min(k, row.positives)]:
                # a positive listed again: the same item, so the same candidate (VLM2Vec
                # scores by name: a hit); kept once so it cannot tie with itself as a negative
                duplicates += 1
                continue
            indices.append(pool_index[key])
            places.append(k)
        lists.append(np.asarray(indices))
        listed.append(places)
        kept_positives.append(sum(place < row.positives for place in places))

    def score(embeddings: dict[str, np.ndarray]) -> Outcome:
        query_emb, pool_emb = embeddings["query"], embeddings["candidate"]
        per_query, examples = [], []
        longest = max(len(row.candidates) for row in rows)
        run = TrecRun([f"c{k}" for k in range(longest)]) if options.save_runs else None
        for i, indices in enumerate(lists):
            scores = pool_emb[indices] @ query_emb[i]
            mask = np.zeros(len(indices), dtype=bool)
            mask[: kept_positives[i]] = True  # the positives come first
            order = metrics.tie_order(scores, mask, tie_policy)
            per_query.append(metrics.query_metrics(mask[order]))  # = ranked_relevance
            if run is not None:
                judged = [(f"c{place}", 1) for place in listed[i][: kept_positives[i]]]
                run.add(rows[i].id, np.asarray(listed[i])[order], scores[order], judged)
            if i < options.n_examples:
                examples.append(Example(queries[i], [(pool[indices[j]], float(scores[j]), bool(mask[j]))
                                                     for j in order[:5]]))
        return Outcome(metrics.summarize(per_query), "P@1", len(per_query), examples,
                       {"tie_policy": tie_policy, "n_duplicate_positives": duplicates}, run)

    path = spec.file("path")
    return PreparedDataset({"query": (spec.query_instruction, queries),
                            "candidate": (spec.candidate_instruction, pool)}, score, [path],
                           {"query": (path, [(row.line, "query") for row in rows]),
                            "candidate": (path, pool_places)})


# ---------------------------------------------------------------- gallery

def prepare_gallery(spec: EvalDatasetSpec, max_queries: int | None, options: ScoringOptions) -> PreparedDataset:
    """Identity retrieval: rows ``{"id", "image", "text"?, "identity"}`` in queries and gallery.

    Rows are read and validated by :func:`vis_embed.data.load_gallery`.  Positives of a query
    are gallery rows of its identity; a gallery row with the query's id or the same resolved
    image file is excluded for that query (a query never finds itself).
    """
    data = load_gallery(spec.file("queries"), spec.file("gallery"), spec.root_for("queries"))
    query_rows = data.queries[:max_queries]
    excluded = [np.asarray(e, dtype=np.int64) for e in data.excluded()[:max_queries]]
    queries = [clean(row.item()) for row in query_rows]
    gallery = [clean(row.item()) for row in data.gallery]
    codes, _identities = factorize([r.identity for r in data.gallery] + [r.identity for r in query_rows])
    gallery_codes, query_codes = codes[:len(data.gallery)], codes[len(data.gallery):]
    tie_policy = tie_policy_of(spec, options)
    index, requested = index_of(spec, options)

    def score(embeddings: dict[str, np.ndarray]) -> Outcome:
        query_emb, gallery_emb = embeddings["query"], embeddings["gallery"]
        ranking = GlobalRanking.build(gallery_emb, index, spec.options.depth or options.depth)
        per_query, examples, skipped, unresolved_ties = [], [], 0, 0
        run = TrecRun([row.id for row in data.gallery]) if options.save_runs else None
        for q, ids, scores, complete in ranking.results(query_emb, excluded):
            is_positive = gallery_codes == query_codes[q]
            is_positive[excluded[q]] = False
            n_positives = int(is_positive.sum())
            if n_positives == 0:  # load_gallery rejects these; kept for direct callers
                skipped += 1
                continue
            relevance = metrics.truncated_relevance(scores, is_positive[ids], ranking.depth, complete, tie_policy)
            unresolved_ties += metrics.boundary_tie_unresolved(scores, ranking.depth, complete)
            per_query.append(metrics.query_metrics(relevance, n_positives=n_positives))
            if run is None and len(examples) >= options.n_examples:
                continue
            order = metrics.tie_order(scores, is_positive[ids], tie_policy)
            if run is not None:
                top = order[:ranking.depth]
                run.add(query_rows[q].id, ids[top], scores[top],
                        [(data.gallery[g].id, 1) for g in np.flatnonzero(is_positive)])
            if len(examples) < options.n_examples:
                examples.append(Example(queries[q], [(gallery[ids[j]], float(scores[j]),
                                                      bool(is_positive[ids[j]])) for j in order[:5]]))
        if not per_query:
            raise DataError("no query has a positive in the gallery", path=spec.file("queries"))
        return Outcome(metrics.summarize(per_query), "P@1", len(per_query), examples,
                       {"n_skipped_queries": skipped,
                        **ranking.extras(requested, gallery_emb.shape[1]),
                        "tie_policy": tie_policy, "n_unresolved_boundary_ties": unresolved_ties}, run)

    return PreparedDataset({"query": (spec.query_instruction, queries),
                            "gallery": (spec.candidate_instruction, gallery)}, score,
                           [spec.file("queries"), spec.file("gallery")],
                           {"query": (spec.file("queries"), [(row.line, "image") for row in query_rows]),
                            "gallery": (spec.file("gallery"), [(row.line, "image") for row in data.gallery])})


LAYOUT_LOADERS: dict[str, Callable[[EvalDatasetSpec, int | None, ScoringOptions], PreparedDataset]] = {
    "candidates": prepare_candidates, "gallery": prepare_gallery, "qrels": prepare_qrels, "2afc": prepare_2afc,
    "nearid": prepare_nearid, "asym_recall": prepare_asym_recall, "pair_ap": prepare_pair_ap,
    "human_corr": prepare_human_corr,
}


def load_for_scoring(spec: EvalDatasetSpec, max_queries: int | None = None,
                     options: ScoringOptions | None = None) -> PreparedDataset:
    """``spec``'s rows read by its layout: the items each side encodes and the score function
    (behind the one non-finite-embedding boundary)."""
    if spec.layout not in LAYOUT_LOADERS:
        raise ConfigError(f"dataset {spec.name!r}: unknown layout {spec.layout!r}; expected one of {LAYOUTS}")
    return scored_at_the_boundary(spec, LAYOUT_LOADERS[spec.layout](spec, max_queries, options or ScoringOptions()))

