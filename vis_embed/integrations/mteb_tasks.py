"""Benchmark-manifest datasets as mteb retrieval tasks (local data, no hub access).

Every manifest dataset with a retrieval layout (:data:`vis_embed.data.manifest.RETRIEVAL_LAYOUTS`)
becomes an ``AbsTaskRetrieval`` whose rows are read by the same loaders ``vis-embed eval``
uses (:mod:`vis_embed.data.benchmark`), so mteb's evaluator and vis_embed's harness score the
same queries against the same candidates:

* ``candidates`` (MMEB): each query ranks its own candidate list, the first one relevant (the
  first N with the row's ``"positives": N``). In mteb terms a reranking task: the corpus is every
  distinct candidate item, ``top_ranked`` holds each query's list, ``relevant_docs`` its positives.
* ``gallery`` (identity retrieval): the corpus is the gallery; a query's relevant documents are
  the gallery rows of its identity.  A gallery row with the query's id is left out of its
  ranking (mteb's ``ignore_identical_ids``); when some query also shares an image file with a
  differently named gallery row, each query gets the gallery minus its excluded rows as
  ``top_ranked`` instead, the exclusion rule of ``GalleryData.excluded``.
* ``qrels`` (BEIR): queries, corpus and graded judgements as they are (mteb's own form);
  judgements of grade 0 or below and queries without a relevant document are left out, as
  ``vis-embed eval`` does.

The queries and the corpus carry mteb's ``text`` / ``image`` columns plus a ``vis_embed_item``
column with the exact item (resolved image path, text, bbox) that
:class:`vis_embed.integrations.mteb.VisEmbedMtebModel` encodes, with the manifest's
``query_instruction`` / ``candidate_instruction`` as the task's query / document prompt.
The task's main score is ``precision_at_1`` (vis_embed's P@1); ``ndcg_at_5`` is beside it in
mteb's scores (trec_eval's linear-gain nDCG: vis_embed's ``ndcg_linear@5``, a qrels dataset's
primary score).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vis_embed.data.benchmark import EvalDatasetSpec, load_benchmark, load_candidates, load_gallery
from vis_embed.data.qrels import load_qrels_dataset
from vis_embed.data.items import Item, ResolvedItem
from vis_embed.data.manifest import RETRIEVAL_LAYOUTS
from vis_embed.errors import ConfigError
from vis_embed.integrations import require

require("mteb", "mteb", "the mteb integration")

from datasets import Dataset  # noqa: E402
from mteb.abstasks.retrieval import AbsTaskRetrieval  # noqa: E402
from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData  # noqa: E402
from mteb.abstasks.task_metadata import TaskMetadata  # noqa: E402

from vis_embed.integrations.mteb import ITEM_COLUMN  # noqa: E402

SPLIT = "test"
MAIN_SCORE = "precision_at_1"


class ManifestRetrievalTask(AbsTaskRetrieval):
    """One manifest dataset; built by :func:`manifest_task` (which sets ``metadata`` and ``spec``)."""

    spec: EvalDatasetSpec

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        if self.data_loaded:
            return
        builder = {"candidates": _candidates_split, "qrels": _qrels_split}.get(self.spec.layout, _gallery_split)
        split, self.ignore_identical_ids = builder(self.spec)
        self.dataset = {"default": {SPLIT: split}}
        self.data_loaded = True


def manifest_tasks(manifest: str | Path, names: Sequence[str] | None = None) -> list[ManifestRetrievalTask]:
    """The mteb tasks of ``manifest``'s retrieval datasets (all of them, or ``names``).

    A named dataset that is missing or has a non-retrieval layout is a ConfigError; without
    names, the peer-protocol datasets (2afc, nearid, ...) are left out."""
    benchmark = load_benchmark(manifest)
    by_name = {spec.name: spec for spec in benchmark.datasets}
    if names is None:
        return [manifest_task(spec) for spec in benchmark.datasets if spec.layout in RETRIEVAL_LAYOUTS]
    tasks = []
    for name in names:
        spec = by_name.get(name)
        if spec is None:
            raise ConfigError(f"{benchmark.path}: no dataset named {name!r} (have: {', '.join(by_name)})")
        if spec.layout not in RETRIEVAL_LAYOUTS:
            raise ConfigError(f"{benchmark.path}: dataset {name!r} has layout {spec.layout!r}; mteb retrieval "
                              f"tasks are built from {', '.join(RETRIEVAL_LAYOUTS)} layouts")
        tasks.append(manifest_task(spec))
    return tasks


def manifest_task(spec: EvalDatasetSpec) -> ManifestRetrievalTask:
    """The mteb retrieval task of one retrieval-layout dataset (rows are read at load_data)."""
    query_side, document_side = _side_modalities(spec)
    prompt = {side: text for side, text in (("query", spec.query_instruction),
                                            ("document", spec.candidate_instruction)) if text}
    metadata = TaskMetadata(
        name=spec.name,
        description=f"vis_embed manifest dataset {spec.name} ({spec.layout} layout, meta-task {spec.meta_task}) "
                    f"from {spec.manifest_path}",
        dataset={"path": str(spec.manifest_path or spec.name), "revision": "local"},
        prompt=prompt or None, type="Any2AnyRetrieval",
        modalities=sorted({*_modalities(query_side), *_modalities(document_side)}),
        category=f"{query_side}2{document_side}", eval_splits=[SPLIT], eval_langs=["eng-Latn"],
        main_score=MAIN_SCORE, domains=[], task_subtypes=[], license="not specified", annotations_creators="derived",
        dialect=[], sample_creation="found", bibtex_citation="",
    )
    task_class = type(f"Manifest_{spec.name}", (ManifestRetrievalTask,), {"metadata": metadata, "spec": spec})
    return task_class()


# ---------------------------------------------------------------- the three layouts

def _candidates_split(spec: EvalDatasetSpec) -> tuple[RetrievalSplitData, bool]:
    rows = load_candidates(spec.file("path"), spec.root_for("path"))
    pool: dict[ResolvedItem, tuple[str, Item]] = {}  # item -> (document id, item)
    top_ranked: dict[str, list[str]] = {}
    relevant: dict[str, dict[str, int]] = {}
    for position, row in enumerate(rows):
        query_id = f"q{position}"  # positions: row ids need not be unique in this layout
        ranked = []
        for raw in row.candidates:
            item = _clean(raw)
            document_id = pool.setdefault(ResolvedItem.unchecked(item), (f"c{len(pool)}", item))[0]
            if document_id not in ranked:
                ranked.append(document_id)
        top_ranked[query_id] = ranked
        # the row's first `positives` candidates are relevant (MomentSeeker: several), as vis-embed eval scores them
        relevant[query_id] = {pool[ResolvedItem.unchecked(_clean(raw))][0]: 1 for raw in row.candidates[:row.positives]}
    queries = _side_dataset([f"q{i}" for i in range(len(rows))], [_clean(row.query) for row in rows])
    corpus = _side_dataset([doc_id for doc_id, _ in pool.values()], [item for _, item in pool.values()])
    return RetrievalSplitData(queries=queries, corpus=corpus, relevant_docs=relevant, top_ranked=top_ranked), False


def _gallery_split(spec: EvalDatasetSpec) -> tuple[RetrievalSplitData, bool]:
    data = load_gallery(spec.file("queries"), spec.file("gallery"), spec.root_for("queries"))
    excluded = [set(positions) for positions in data.excluded()]
    by_identity: dict[str, list[int]] = {}
    for position, row in enumerate(data.gallery):
        by_identity.setdefault(row.identity, []).append(position)
    relevant = {query.id: {data.gallery[p].id: 1 for p in by_identity.get(query.identity, ()) if p not in excluded[q]}
                for q, query in enumerate(data.queries)}
    # same-id exclusions are mteb's ignore_identical_ids; any other one needs explicit lists
    needs_lists = any(data.gallery[p].id != query.id for q, query in enumerate(data.queries) for p in excluded[q])
    top_ranked = None
    if needs_lists:
        top_ranked = {query.id: [row.id for p, row in enumerate(data.gallery) if p not in excluded[q]]
                      for q, query in enumerate(data.queries)}
    queries = _side_dataset([row.id for row in data.queries], [_clean(row.item()) for row in data.queries])
    corpus = _side_dataset([row.id for row in data.gallery], [_clean(row.item()) for row in data.gallery])
    return RetrievalSplitData(queries=queries, corpus=corpus, relevant_docs=relevant, top_ranked=top_ranked), True


def _qrels_split(spec: EvalDatasetSpec) -> tuple[RetrievalSplitData, bool]:
    data = _qrels_data(spec)
    relevant = {query.id: {doc: grade for doc, grade in data.judgements[query.id].items() if grade > 0}
                for query in data.queries}
    queries = _side_dataset([row.id for row in data.queries], [_clean(row.item) for row in data.queries])
    corpus = _side_dataset([row.id for row in data.corpus], [_clean(row.item) for row in data.corpus])
    return RetrievalSplitData(queries=queries, corpus=corpus, relevant_docs=relevant, top_ranked=None), False


def _qrels_data(spec: EvalDatasetSpec, check_images: bool = True) -> Any:
    return load_qrels_dataset(spec.file("queries"), spec.file("corpus"), spec.file("qrels"), spec.root_for("queries"),
                              check_images=check_images)


# ---------------------------------------------------------------- rows -> datasets

def _clean(item: Item) -> Item:
    return {key: value for key, value in item.items() if value is not None}


def _side_dataset(ids: list[str], items: list[Item]) -> Dataset:
    """mteb's columns (``id``, ``text``, ``image`` as path strings) + the exact item as JSON."""
    columns: dict[str, list[Any]] = {"id": ids, "text": [item.get("text") or "" for item in items],
                                     ITEM_COLUMN: [json.dumps(item) for item in items]}
    if any("image" in item for item in items):
        columns["image"] = [None if item.get("image") is None else str(item["image"]) for item in items]
    if not any(columns["text"]):
        del columns["text"]
    return Dataset.from_dict(columns)


def _side_modalities(spec: EvalDatasetSpec) -> tuple[str, str]:
    """mteb's category letters of the query and document sides (``i``, ``t`` or ``it``)."""
    if spec.layout == "candidates":
        rows = load_candidates(spec.file("path"), spec.root_for("path"), check_images=False)
        queries = [row.query for row in rows]
        documents = [item for row in rows for item in row.candidates]
    elif spec.layout == "qrels":
        qrels = _qrels_data(spec, check_images=False)
        queries, documents = [row.item for row in qrels.queries], [row.item for row in qrels.corpus]
    else:
        data = load_gallery(spec.file("queries"), spec.file("gallery"), spec.root_for("queries"), check_images=False)
        queries = [row.item() for row in data.queries]
        documents = [row.item() for row in data.gallery]
    return _letters(queries), _letters(documents)


def _letters(items: Sequence[Item]) -> str:
    letters = ("i" if any(item.get("image") is not None for item in items) else "") + \
              ("t" if any(item.get("text") for item in items) else "")
    return letters or "t"


def _modalities(letters: str) -> list[str]:
    return [{"i": "image", "t": "text"}[letter] for letter in letters]
