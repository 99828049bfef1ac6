"""A persistent gallery index: ``vis-embed index`` writes it, ``vis-embed search`` and
``vis-embed serve --index`` read it.

A directory, written atomically (a crash leaves the previous one whole):

- ``index.faiss``: the faiss index (``flat``: ``IndexFlatIP``, exact; ``int8``:
  ``IndexScalarQuantizer`` 8-bit; ``binary``: ``IndexBinaryFlat`` on sign bits; ``ivf-pq``:
  ``IndexIVFPQ``, inverted lists of product-quantized codes);
- ``vectors.npy``: the float32 vectors (at the index's width), read memory-mapped to re-rank
  a quantized kind's shortlist (``rescore``; not for ``flat``);
- ``ids.json``: row i's id (the encode input's ``id``, else its row number);
- ``index.json``: the settings: kind (requested and chosen, with the reason), rows, width,
  ``bytes_per_vector``, memory budget, rescore, ivf-pq parameters, and the model that made the
  vectors (name, adapter, fingerprint, embedding config) so queries of another model or width
  are refused.

``auto`` picks by size and budget, like autofaiss does for a memory limit: ``flat`` (exact)
while the gallery is small enough to scan (at most :data:`FLAT_AUTO_ROWS` rows) and its floats
fit the budget; else ``binary`` (1 bit a dimension, re-ranked with the floats on disk) when
its codes fit; else ``ivf-pq`` with as many code bytes as fit.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from vis_embed.errors import ConfigError, DataError
from vis_embed.gallery.faiss_headers import check_faiss_file
from vis_embed.gallery.index_files import (FORMAT_VERSION, IDS_FILE, INDEX_FILE, SETTINGS_FILE, VECTORS_FILE,
                                           BuildReplaced, IndexSettings, check_finite, file_size, first_duplicate,
                                           mapped_vectors, missing, needed_files, opened_build, read_ids,
                                           read_settings)
from vis_embed.gallery.options import STORE_KINDS
from vis_embed.gallery.quantized_index import QuantizedIndex, binary_codes_index, int8_codes_index
from vis_embed.gallery.vectors import l2_normalise
from vis_embed.io import atomic_directory, atomic_write_json

LOAD_ATTEMPTS = 100            # builds a load may see replaced under it before it gives up
FLAT_AUTO_ROWS = 262_144       # auto: beyond this an exact scan per query is slow; a quantized kind is chosen
DEFAULT_RESCORE = 4            # quantized kinds: shortlist 4 x k, re-ranked with floats
PQ_TRAIN_ROWS = 100_000        # ivf-pq trains on at most this many rows (a seeded sample)
IVF_ID_BYTES = 8               # an inverted list stores an int64 id beside each code


@dataclass(frozen=True)
class KindChoice:
    kind: str
    reason: str
    pq_bytes: int | None = None  # ivf-pq: code bytes per vector


def memory_budget_bytes(memory_gb: float | None) -> int:
    """The budget in bytes: ``memory_gb``, else half of this machine's physical memory."""
    if memory_gb is not None:
        if not memory_gb > 0 or not math.isfinite(memory_gb * 2 ** 30):  # 1e300 GB: no byte count
            raise ConfigError(f"--memory must be a positive number of GB, got {memory_gb}")
        return int(memory_gb * 2 ** 30)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)


def pq_bytes_for(dim: int, budget_per_vector: float) -> int | None:
    """The most product-quantizer bytes per vector (a divisor of ``dim``, at most 64) within
    ``budget_per_vector`` (codes + id); None when not even one byte fits."""
    fitting = [m for m in range(1, min(64, dim) + 1) if dim % m == 0 and m + IVF_ID_BYTES <= budget_per_vector]
    return max(fitting) if fitting else None


def choose_kind(requested: str, rows: int, dim: int, budget: int) -> KindChoice:
    """The kind to build (see the module docstring); a named kind that does not fit is an error."""
    if requested not in STORE_KINDS:
        raise ConfigError(f"--kind: unknown index kind {requested!r} (known: {', '.join(STORE_KINDS)})")
    per_vector = budget / max(rows, 1)
    needs = {"flat": 4 * dim, "int8": dim, "binary": -(-dim // 8)}
    if requested == "ivf-pq" or (requested == "auto" and per_vector < needs["binary"]):
        pq = pq_bytes_for(dim, per_vector)
        if pq is None:
            raise ConfigError(f"--memory: {budget / 2 ** 30:.3g} GB holds no index of {rows} vectors")
        why = "requested" if requested == "ivf-pq" else "binary codes exceed the memory budget"
        return KindChoice("ivf-pq", f"{why}; {pq} code bytes per vector fit", pq)
    if requested != "auto":
        if needs[requested] > per_vector:
            raise ConfigError(f"--memory: a {requested} index of {rows} x {dim} needs "
                              f"{needs[requested] * rows / 2 ** 30:.3g} GB, over the {budget / 2 ** 30:.3g} GB budget")
        return KindChoice(requested, "requested")
    if rows <= FLAT_AUTO_ROWS and needs["flat"] <= per_vector:
        return KindChoice("flat", f"{rows} rows (<= {FLAT_AUTO_ROWS}) whose floats fit the budget: exact search")
    return KindChoice("binary", f"{rows} rows: binary codes ({needs['binary']} B a vector) fit the budget; "
                                f"re-ranked with the float vectors on disk")


def build_faiss(vectors: np.ndarray, choice: KindChoice, seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """``(faiss index, its parameters)`` for ``choice``."""
    rows, dim = vectors.shape
    if choice.kind == "flat":
        index = faiss.IndexFlatIP(dim)
        index.add(vectors)
        return index, {}
    if choice.kind == "binary":
        return binary_codes_index(vectors), {}
    if choice.kind == "int8":
        return int8_codes_index(vectors), {}
    nlist = max(1, min(int(4 * math.sqrt(rows)), rows // 39))
    nbits = 8 if rows >= 256 * 39 else max(1, int(math.log2(max(2, rows // 39))))  # enough points per centroid
    index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, nlist, choice.pq_bytes, nbits, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = seed
    sample = vectors if rows <= PQ_TRAIN_ROWS else vectors[np.sort(
        np.random.default_rng(seed).choice(rows, PQ_TRAIN_ROWS, replace=False))]
    index.train(sample)
    index.add(vectors)
    index.nprobe = min(nlist, max(8, nlist // 16))
    return index, {"nlist": nlist, "nprobe": int(index.nprobe), "pq_bytes": choice.pq_bytes, "pq_bits": nbits}


def bytes_per_vector_of(kind: str, dim: int, pq_bytes: int | None = None) -> int:
    """Bytes in memory per indexed vector (codes; ivf-pq: codes + the id its list stores)."""
    return {"flat": 4 * dim, "int8": dim, "binary": -(-dim // 8)}.get(kind, (pq_bytes or 0) + IVF_ID_BYTES)


def read_embeddings(path: Path) -> tuple[np.ndarray, dict[str, Any]]:
    """The float vectors of an encode output and its ``.ids.json`` record (checked to be one set)."""
    from vis_embed.model.encode_file import read_encoded  # the one reader of encode outputs

    vectors, alignment = read_encoded(path)
    if vectors.ndim != 2 or vectors.dtype.kind != "f":
        raise DataError(f"expected float vectors (encode --precision float32 or float16), got "
                        f"{vectors.dtype} {vectors.shape}", path=path, field="embeddings")
    if len(vectors) == 0:
        raise DataError("no vectors to index", path=path, field="embeddings")
    if not np.isfinite(vectors).all():
        raise DataError("NaN or infinite values", path=path, field="embeddings")
    return l2_normalise(vectors), alignment


def unique_ids(recorded: list[Any], source: Path) -> list[Any]:
    """Row i's id (its recorded ``id``, else i); a DataError naming ``ids`` when two rows share one
    (a hit must name one gallery item)."""
    ids = [row if value is None else value for row, value in enumerate(recorded)]
    duplicate = first_duplicate(ids)
    if duplicate is not None:
        raise DataError(f"rows {duplicate[0]} and {duplicate[1]} share the id {ids[duplicate[1]]!r}; give every "
                        f"gallery item its own id", path=source, field="ids")
    return ids


def _read_codes(handle: Any, kind: str, path: Path) -> Any:
    """The faiss index of a checked file (faiss allocates what the file holds, no more), its
    float parts finite: faiss drops a NaN vector silently and every search of it is wrong."""
    reader = faiss.PyCallbackIOReader(handle.read)
    try:
        codes = faiss.read_index_binary(reader) if kind == "binary" else faiss.read_index(reader)
    except RuntimeError as exc:
        raise DataError(f"faiss cannot read it ({str(exc).splitlines()[0][:200]}); build the index again",
                        path=path) from None
    for part in _float_parts(codes, kind):
        check_finite(part, path, "index")
    return codes


def _float_parts(codes: Any, kind: str) -> list[np.ndarray]:
    """The float arrays an index searches with (views where faiss allows, else small copies)."""
    if kind == "flat":
        return [faiss.rev_swig_ptr(codes.get_xb(), codes.ntotal * codes.d)]
    if kind == "int8":
        return [faiss.vector_to_array(codes.sq.trained)]
    if kind == "ivf-pq":
        quantizer = faiss.downcast_index(codes.quantizer)
        return [faiss.rev_swig_ptr(quantizer.get_xb(), quantizer.ntotal * quantizer.d),
                faiss.vector_to_array(codes.pq.centroids)]
    return []


def write_index(embeddings: Path, out: Path, kind: str = "auto", memory_gb: float | None = None,
                seed: int = 0) -> dict[str, Any]:
    """Build the index of ``embeddings`` (an encode output) into ``out``; returns its settings."""
    vectors, alignment = read_embeddings(Path(embeddings))
    rows, dim = vectors.shape
    budget = memory_budget_bytes(memory_gb)
    choice = choose_kind(kind, rows, dim, budget)
    index, parameters = build_faiss(vectors, choice, seed)
    ids = unique_ids(alignment.get("ids") or [None] * rows, Path(embeddings))
    settings = {
        "format_version": FORMAT_VERSION, "kind": choice.kind, "kind_requested": kind, "kind_reason": choice.reason,
        "rows": rows, "dim": dim, "bytes_per_vector": bytes_per_vector_of(choice.kind, dim, choice.pq_bytes),
        "memory_budget_gb": round(budget / 2 ** 30, 3), "memory_given": memory_gb is not None,
        "rescore": 0 if choice.kind == "flat" else DEFAULT_RESCORE, **parameters,
        "embeddings": str(embeddings), "model": alignment.get("model"),
        "embedding_config": alignment.get("embedding_config"),
    }
    with atomic_directory(out) as tmp:
        (faiss.write_index_binary if choice.kind == "binary" else faiss.write_index)(index, str(tmp / INDEX_FILE))
        if choice.kind != "flat":
            np.save(tmp / VECTORS_FILE, vectors)
        atomic_write_json(tmp / IDS_FILE, ids, indent=0)
        atomic_write_json(tmp / SETTINGS_FILE, settings)
    return settings


@dataclass
class GalleryIndex:
    """A loaded index directory: ``search(queries, k) -> (scores, row numbers)`` and its ``ids``."""

    directory: Path
    settings: dict[str, Any]
    ids: list[Any]
    searcher: Any
    record: IndexSettings | None = None  # index.json, validated (None: an index built in memory)

    @classmethod
    def load(cls, directory: str | Path, rescore: int | None = None) -> GalleryIndex:
        """The index in ``directory``: one whole build (re-read while a writer replaces it), every
        file checked from its header before anything is allocated (:mod:`.index_files`); a
        DataError naming the file for anything damaged, foreign or not a regular file."""
        directory = Path(directory)
        for _attempt in range(LOAD_ATTEMPTS):
            try:
                return cls._load_build(directory, rescore)
            except BuildReplaced:
                continue
        if not directory.is_dir():  # a writer's leftover .old directory beside a missing index
            raise DataError("not an index directory (not found); write one with vis-embed index", path=directory,
                            field="index")
        raise DataError(f"the index was replaced {LOAD_ATTEMPTS} times while it was read; try again when "
                        f"vis-embed index has finished", path=directory, field="index")

    @classmethod
    def _load_build(cls, directory: Path, rescore: int | None) -> GalleryIndex:
        with opened_build(directory, (SETTINGS_FILE, INDEX_FILE, IDS_FILE, VECTORS_FILE)) as files:
            missing(files, (SETTINGS_FILE,), directory)
            settings = read_settings(files[SETTINGS_FILE], directory / SETTINGS_FILE)
            kind, rows, dim = settings.kind, settings.rows, settings.dim
            rescore = settings.rescore if rescore is None else rescore
            if rescore < 0 or (rescore and kind == "flat"):
                raise ConfigError(f"--rescore {rescore}: only a binary, int8 or ivf-pq index re-ranks a shortlist")
            missing(files, needed_files(kind, rescore), directory)
            codes_file = files[INDEX_FILE]
            check_faiss_file(codes_file, file_size(codes_file), kind, rows, dim, str(directory / INDEX_FILE))
            vectors = mapped_vectors(files[VECTORS_FILE], directory / VECTORS_FILE, rows, dim) \
                if VECTORS_FILE in needed_files(kind, rescore) else None
            ids = read_ids(files[IDS_FILE], directory / IDS_FILE, rows)
            codes = _read_codes(codes_file, kind, directory / INDEX_FILE)
        searcher = codes if kind == "flat" else QuantizedIndex(kind, codes, dim, vectors, rescore)
        return cls(directory, settings.model_dump(), ids, searcher, settings)

    @property
    def dim(self) -> int:
        return int(self.settings["dim"])

    @property
    def ntotal(self) -> int:
        return int(self.searcher.ntotal)

    @property
    def rescore(self) -> int:
        """The shortlist multiplier re-ranked with floats (0: the codes' or flat scores as they are)."""
        return int(getattr(self.searcher, "rescore", 0))

    def require_model(self, allow_any_model: bool = False) -> None:
        """An index that records no model fingerprint is refused (a DataError naming ``model``)
        unless ``allow_any_model`` (``--allow-any-model``): its vectors' model is unknown, and
        another model's queries rank its gallery at random.  Checked before any model loads."""
        if not (self.settings.get("model") or {}).get("fingerprint") and not allow_any_model:
            raise DataError("the index records no model fingerprint (built by an older vis-embed, or from vectors "
                            "encoded without one), so the model of its vectors is unknown; build it again from a "
                            "vis-embed encode output, or pass --allow-any-model", path=self.directory / SETTINGS_FILE,
                            field="model")

    def check_queries(self, fingerprint: str | None, full_dim: int, allow_any_model: bool = False) -> None:
        """Queries of the model that made the gallery can be searched: the same fingerprint, and
        the index's width at most the model's (and :meth:`require_model`).  Otherwise a DataError
        naming the field."""
        self.require_model(allow_any_model)
        recorded = (self.settings.get("model") or {}).get("fingerprint")
        where = self.directory / SETTINGS_FILE
        if recorded and fingerprint and recorded != fingerprint:
            name = (self.settings.get("model") or {}).get("name")
            raise DataError(f"the index holds vectors of another model ({name}, adapter "
                            f"{(self.settings.get('model') or {}).get('adapter')}); encode the gallery with "
                            f"this model or search with that one", path=where, field="model")
        if self.dim > full_dim:
            raise DataError(f"the index is {self.dim} wide, the model's vectors {full_dim}", path=where, field="dim")

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, rows)`` (Q, k) best first; rows -1 where fewer than k exist."""
        from vis_embed.evaluation.search import search  # the one batched search (NaN queries refused)

        if queries.shape[1] != self.dim:
            raise DataError(f"queries are {queries.shape[1]} wide, the index {self.dim}", field="dim")
        return search(self.searcher, l2_normalise(queries), k)
