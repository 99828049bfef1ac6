"""Hard-negative mining with an embedding model (and denoising of positives).

For every record: embed its query side (with the dataset's query instruction) and its
candidate side (with the candidate instruction); among the records that share the group key
(``group_by``, e.g. the same edit instruction) but *not* the identity, the ``k`` nearest
become its ``hard_negatives`` (ids, nearest first; an exact inner-product index on unit vectors).
"Nearest" is ``similarity="candidate"`` (the default, the paper's: the record's own
candidate against the others' candidates -- for edits, the generated images closest to its
generated image) or ``similarity="query"`` (the record's query against the others'
candidates: what the model confuses at retrieval time).  ``min_positive_similarity`` flags or removes
records whose query-positive cosine is below the threshold (the paper's denoising): for
``pairs`` rows the row's own positive, for ``identity`` rows the mean over the other
instances of the identity.

DATA is either a training data config YAML (``dataset_name`` picks the sub-dataset; it may
be omitted when there is one) or a single ``.jsonl`` / ``.parquet`` data file (kind inferred
from its rows, images relative to the file, no instructions).  OUT is a data file of the same
rows with ``hard_negatives`` set; point the data config at it.  The command line
(``vis-embed mine-negatives``) is :mod:`vis_embed.mining.cli`.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vis_embed.config import get_dotted
from vis_embed.data.factorize import factorize
from vis_embed.errors import ConfigError, DataError
from vis_embed.model.runtime.encoder import Encoder

if TYPE_CHECKING:
    from vis_embed.data.train import TrainDataset

_SEARCH_CHUNK = 4096
# first search depth past k: room for a few neighbours of the row's own identity
_DEPTH_MARGIN = 16
SIMILARITIES: tuple[str, str] = ("candidate", "query")


@dataclass
class MiningResult:
    """Row positions of each record's hard negatives and the denoising outcome."""

    hard_negatives: list[list[int]]
    positive_similarity: np.ndarray       # (N,) float; nan for an identity with one instance
    noisy: np.ndarray                     # (N,) bool: below min_positive_similarity
    removed: np.ndarray                   # (N,) bool: dropped from the output
    report: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- core (embeddings in)


def _codes(values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """Integer codes: an int array is taken as codes already (the loader's ``TrainDataset.labels``);
    other labels go through ``factorize``, ``None`` values getting negative codes of their own
    (each unique)."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        return values.astype(np.int64)
    codes, _distinct = factorize(list(values), none_is_missing=True)
    missing = codes < 0
    codes[missing] = -1 - np.arange(int(missing.sum()))
    return codes


def positive_similarity(kind: str, queries: np.ndarray, candidates: np.ndarray,
                        identity: np.ndarray) -> np.ndarray:
    """Query-positive cosine per record (see module docstring); nan where no positive exists."""
    if kind == "pairs":
        return np.einsum("nd,nd->n", queries, candidates)
    uniques, inverse, counts = np.unique(identity, return_inverse=True, return_counts=True)
    sums = np.zeros((len(uniques), candidates.shape[1]), dtype=np.float64)
    np.add.at(sums, inverse, candidates)
    others = sums[inverse] - candidates
    with np.errstate(invalid="ignore", divide="ignore"):
        similarity = np.einsum("nd,nd->n", queries, others) / (counts[inverse] - 1)
    return np.where(counts[inverse] > 1, similarity, np.nan)


def check_threshold(value: float | None, name: str = "min_positive_similarity") -> float | None:
    """``value`` when it is None or a cosine, from -1 to 1: beyond, every record is noisy or none is
    (``--noisy remove`` then drops the whole dataset silently).  A ConfigError naming ``name``."""
    if value is not None and not -1.0 <= value <= 1.0:  # NaN too
        raise ConfigError(f"{name} must be a cosine from -1 to 1, got {value}")
    return value


def check_mining(k: int, similarity: str, min_positive_similarity: float | None) -> None:
    """The mining settings' rules: asked before anything is encoded (:func:`mine_dataset`) and by
    :func:`mine_from_embeddings`."""
    if similarity not in SIMILARITIES:
        raise ConfigError(f"similarity must be one of {SIMILARITIES}, got {similarity!r}")
    if k < 1:
        raise ConfigError(f"k must be >= 1, got {k}")
    check_threshold(min_positive_similarity)


def mine_from_embeddings(queries: np.ndarray, candidates: np.ndarray, identities: Sequence[Any] | np.ndarray,
                         groups: Sequence[Any] | None, k: int, kind: str = "pairs",
                         min_positive_similarity: float | None = None,
                         remove_noisy: bool = False, similarity: str = "candidate") -> MiningResult:
    """Hard negatives from precomputed unit-norm embeddings (row i = record i).

    ``identities``: label per record (None: the record is its own identity), or int codes
    (``TrainDataset.labels``: the loss labels, so a mined negative is never one the loss masks).  ``groups``:
    group key per record (None for a record: it gets no negatives and is nobody's negative);
    ``groups=None``: one group.  ``similarity``: ``candidate`` (rank the others' candidates by
    similarity to the record's candidate) or ``query`` (to the record's query).
    """
    # here, not at the top: `vis-embed mine-negatives --help` imports this module, and the index
    # stack brings faiss and torch
    from vis_embed.gallery.search import build_index, search
    from vis_embed.vectors.index_spec import IndexSpec

    check_mining(k, similarity, min_positive_similarity)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    candidates = np.ascontiguousarray(candidates, dtype=np.float32)
    n = len(queries)
    if candidates.shape != queries.shape:
        raise ValueError(f"queries {queries.shape} and candidates {candidates.shape} differ")
    identity = _codes(identities)
    group = np.zeros(n, dtype=np.int64) if groups is None else _codes(list(groups))
    ungrouped = np.zeros(n, dtype=bool) if groups is None else np.array([g is None for g in groups])
    probes = candidates if similarity == "candidate" else queries
    positive = positive_similarity(kind, queries, candidates, identity)
    noisy = np.zeros(n, dtype=bool) if min_positive_similarity is None else \
        (positive < min_positive_similarity)
    removed = noisy.copy() if remove_noisy else np.zeros(n, dtype=bool)
    if remove_noisy and kind == "identity":
        # an identity row needs another instance as its positive: drop identities left alone
        kept_identity, kept_counts = np.unique(identity[~removed], return_counts=True)
        alone = np.isin(identity, kept_identity[kept_counts < 2])
        removed |= alone
    hard_negatives: list[list[int]] = [[] for _ in range(n)]
    searchable = ~removed & ~ungrouped
    for key in np.unique(group[searchable]):
        members = np.flatnonzero(searchable & (group == key))
        if len(members) < 2:
            continue
        # exact neighbours within one group: a flat index from the one index factory (float32
        # products: the nearest must be the nearest)
        index = build_index(candidates[members], IndexSpec(kind="flat"))
        for row, found in _nearest_other_identity(index, search, members, probes, identity, k):
            hard_negatives[row] = found
    report = _mining_report(hard_negatives, positive, noisy, removed, ungrouped, k,
                            min_positive_similarity, probes, candidates)
    report["similarity"] = similarity
    return MiningResult(hard_negatives, positive, noisy, removed, report)


def _nearest_other_identity(index: Any, search: Any, members: np.ndarray, probes: np.ndarray,
                            identity: np.ndarray, k: int) -> Iterator[tuple[int, list[int]]]:
    """Each member's ``k`` nearest candidates of another identity, as ``(row, rows)``.

    Searched at depth ``k + _DEPTH_MARGIN`` first; only rows whose own identity crowded the
    list are searched again, at double the depth, until full or the group is exhausted.  A
    single search deep enough for the largest identity would cost N x (k + largest) memory
    and time whatever k is (8,000 rows with one 7,900-row identity: 9x slower).  The search's
    tie order (score, then row id) makes a shallow hit list a prefix of a deeper one, so the
    result is the same as one deep search."""
    pending, depth = members, min(len(members), k + _DEPTH_MARGIN)
    while len(pending):
        short = []
        for start in range(0, len(pending), _SEARCH_CHUNK):  # chunks keep memory at chunk x depth
            chunk = pending[start:start + _SEARCH_CHUNK]
            _scores, neighbours = search(index, probes[chunk], depth)
            for row, found in zip(chunk, neighbours):
                found = members[found[found >= 0]]
                found = found[identity[found] != identity[row]]
                if len(found) >= k or depth == len(members):
                    yield int(row), found[:k].tolist()
                else:
                    short.append(row)
        pending, depth = np.array(short, dtype=np.int64), min(len(members), 2 * depth)


def _mining_report(hard_negatives: list[list[int]], similarity: np.ndarray, noisy: np.ndarray,
                   removed: np.ndarray, ungrouped: np.ndarray, k: int, threshold: float | None,
                   probes: np.ndarray, candidates: np.ndarray) -> dict[str, Any]:
    kept = ~removed
    counts = np.array([len(h) for h in hard_negatives])
    # in the ranking's own terms: the record's probe (candidate or query) against the negative's candidate
    negative_similarity = [float(probes[i] @ candidates[j]) for i, hn in enumerate(hard_negatives) for j in hn]
    finite = similarity[np.isfinite(similarity)]
    return {
        "records": int(len(counts)), "kept": int(kept.sum()), "removed": int(removed.sum()),
        "k": k, "records_with_k": int((counts[kept] >= k).sum()),
        "records_with_fewer": int((counts[kept] < k).sum()),
        "records_without_group": int(ungrouped.sum()),
        "mean_negative_similarity": float(np.mean(negative_similarity)) if negative_similarity else None,
        "positive_similarity": {"mean": float(finite.mean()) if len(finite) else None,
                                "min": float(finite.min()) if len(finite) else None,
                                "threshold": threshold, "below_threshold": int(noisy.sum())},
    }


# --------------------------------------------------------------------------- records in


def _field(record: dict[str, Any], dotted: str) -> Any:
    """A record's value at ``dotted``, hashable (nested values as canonical JSON)."""
    value = get_dotted(record, dotted)
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def _group_values(dataset: TrainDataset, group_by: str) -> list[Any]:
    """Each record's ``group_by`` value; some missing is fine (counted: no negatives), none
    present is a misspelled field, which would otherwise mine nothing and exit 0."""
    values = [_field(record, group_by) for record in dataset.records]
    if all(value is None for value in values):
        fields = ", ".join(sorted(dataset.records[0])) if dataset.records else ""
        raise ConfigError(f"--group-by {group_by!r}: no record of dataset {dataset.name!r} has this field, so "
                          f"no record would get a hard negative (the first record's fields: {fields})")
    return values


def mine_dataset(dataset: TrainDataset, encoder: Encoder, k: int = 5, group_by: str | None = None,
                 min_positive_similarity: float | None = None, remove_noisy: bool = False,
                 batch_size: int = 16, show_progress: bool = False,
                 similarity: str = "candidate") -> tuple[list[dict[str, Any]], MiningResult]:
    """Mine one loaded sub-dataset (``vis_embed.data.TrainDataset``); returns output rows and result."""
    records = dataset.records
    check_mining(k, similarity, min_positive_similarity)  # before the (slow) encoding, as the group field
    groups = None if group_by is None else _group_values(dataset, group_by)
    queries = encoder.encode([dataset.query_item(r) for r in records], instruction=dataset.query_instruction,
                             batch_size=batch_size, show_progress=show_progress)
    candidates = encoder.encode([dataset.positive_item(r) for r in records],
                                instruction=dataset.candidate_instruction, batch_size=batch_size,
                                show_progress=show_progress)
    identities = dataset.labels  # the loss's labels, encoded once at load
    result = mine_from_embeddings(queries, candidates, identities, groups, k, kind=dataset.kind,
                                  min_positive_similarity=min_positive_similarity, remove_noisy=remove_noisy,
                                  similarity=similarity)
    rows = []
    for position, record in enumerate(records):
        if result.removed[position]:
            continue
        row = dict(record)
        row["hard_negatives"] = [records[j]["id"] for j in result.hard_negatives[position]]
        if result.noisy[position]:
            row["noisy_positive"] = True
        rows.append(row)
    result.report["dataset"] = dataset.name
    result.report["group_by"] = group_by
    result.report["removed_ids"] = [records[i]["id"] for i in np.flatnonzero(result.removed)]
    result.report["noisy_ids"] = [records[i]["id"] for i in np.flatnonzero(result.noisy)]
    return rows, result


def load_mining_dataset(data: str | Path, dataset_name: str | None = None) -> Any:
    """The sub-dataset to mine: from a data config YAML, or a single data file."""
    from vis_embed.data import load_train_config
    from vis_embed.data.tables import read_table

    path = Path(data)
    if path.suffix.lower() in (".yaml", ".yml"):
        config = load_train_config(path)
        if dataset_name is None:
            if len(config.datasets) != 1:
                raise ConfigError(f"{path} has {len(config.datasets)} datasets; choose one (--dataset) "
                                  f"({', '.join(d.name for d in config.datasets)})")
            return config.datasets[0]
        try:
            return config.dataset(dataset_name)
        except KeyError as exc:
            raise ConfigError(str(exc)) from None
    first = next(read_table(path), None)
    if first is None:
        raise DataError("data file has no rows", path=path)
    kind = "pairs" if "query" in first[1] or "positive" in first[1] else "identity"
    with tempfile.TemporaryDirectory() as tmp:
        config_path = Path(tmp) / "data.yaml"
        config_path.write_text(json.dumps({"datasets": [{"name": path.stem, "kind": kind,
                                                         "path": str(path.resolve())}]}))
        return load_train_config(config_path).datasets[0]
