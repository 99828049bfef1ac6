"""A persistent gallery index: ``vis-embed index`` writes it, ``vis-embed search`` and
``vis-embed serve --index`` read it.

A directory, written atomically (a crash leaves the previous one whole):

- ``index.faiss``: the faiss index (``flat``: ``IndexFlatIP``, exact; ``int8``:
  ``IndexScalarQuantizer`` 8-bit; ``binary``: ``IndexBinaryFlat`` on sign bits; ``ivf-pq``:
  ``IndexIVFPQ``, inverted lists of product-quantized codes);
- ``vectors.npy``: the float32 vectors (at the index's width), read memory-mapped to re-rank
  a quantized kind's shortlist (``rescore``; not for ``flat``);
- ``ids.json``: row i's id (the encode input's ``id``, else its row number);
- ``index.json``: :class:`~.index_files.IndexFile`, written and read as that model: kind
  (requested and chosen, with the reason), rows, width, ``bytes_per_vector``, memory budget,
  rescore, ivf-pq parameters, and the model that made the vectors (name, adapter, fingerprint,
  embedding config) so queries of another model or width are refused.

The kinds, their byte counts and the rescore rule are :mod:`.index_spec`'s; ``auto`` (by size
and the memory budget) is chosen by :func:`vis_embed.gallery.index_choice.resolve_index` and
the index built by :func:`vis_embed.gallery.search.build_index`, as for an evaluation.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faiss
import numpy as np

from vis_embed.errors import ConfigError, DataError
from vis_embed.gallery.index_choice import resolve_index  # the one chooser
from vis_embed.gallery.search import SearchIndex, build_index, non_finite_rows  # the one factory
from vis_embed.gallery.search import search as batched_search  # NaN queries refused
from vis_embed.gallery.faiss_headers import check_faiss_file
from vis_embed.gallery.index_files import (FORMAT_VERSION, IDS_FILE, INDEX_FILE, SETTINGS_FILE, VECTORS_FILE,
                                           BuildReplaced, IndexFile, check_finite, file_size, first_duplicate,
                                           mapped_vectors, missing, needed_files, opened_build, read_ids,
                                           read_settings)
from vis_embed.vectors.index_spec import DEFAULT_RESCORE, STORE_KINDS, IndexSpec, check_index_name, check_rescore
from vis_embed.gallery.quantized_index import QuantizedIndex
from vis_embed.vectors.transforms import check_dim, l2_normalise
from vis_embed.io import atomic_directory, atomic_write_json

if TYPE_CHECKING:
    from vis_embed.model.runtime.encode_file import EncodedAlignment

LOAD_ATTEMPTS = 100            # builds a load may see replaced under it before it gives up


def memory_budget_bytes(memory_gb: float | None) -> int:
    """The budget in bytes: ``memory_gb``, else half of this machine's physical memory."""
    if memory_gb is not None:
        if not memory_gb > 0 or not math.isfinite(memory_gb * 2 ** 30):  # 1e300 GB: no byte count
            raise ConfigError(f"--memory must be a positive number of GB, got {memory_gb}")
        return int(memory_gb * 2 ** 30)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)


def faiss_parameters(index: Any) -> dict[str, Any]:
    """What index.json records of an ivf-pq index's faiss build (nothing for the other kinds)."""
    codes = index.codes if isinstance(index, QuantizedIndex) else index
    if not hasattr(codes, "nlist"):
        return {}
    return {"nlist": int(codes.nlist), "nprobe": int(codes.nprobe), "pq_bytes": int(codes.pq.M),
            "pq_bits": int(codes.pq.nbits)}


def read_embeddings(path: Path) -> tuple[np.ndarray, EncodedAlignment]:
    """The float vectors of an encode output and its ``.ids.json`` record (checked to be one set)."""
    from vis_embed.model.runtime.encode_file import read_encoded  # the one reader of encode outputs

    vectors, alignment = read_encoded(path)
    if vectors.ndim != 2 or vectors.dtype.kind != "f":
        raise DataError(f"expected float vectors (encode --precision float32 or float16), got "
                        f"{vectors.dtype} {vectors.shape}", path=path, field="embeddings")
    if len(vectors) == 0:
        raise DataError("no vectors to index", path=path, field="embeddings")
    bad = non_finite_rows(vectors)
    if len(bad):  # the row to look at: its input line when the record says it
        line = f" (input line {alignment.lines[bad[0]]})" if len(alignment.lines) == len(vectors) else ""
        raise DataError(f"row {bad[0]}{line} holds NaN or infinite values ({len(bad)} such rows)", path=path,
                        field="embeddings")
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
                seed: int = 0) -> IndexFile:
    """Build the index of ``embeddings`` (an encode output) into ``out``; returns its index.json.

    ``out`` is replaced only when it is missing, empty or an index directory, and holds no input
    (checked before anything is read or built: replacing deletes what was there)."""
    from vis_embed.model.runtime.encode_file import sidecar_paths  # the encode output's file names

    check_index_name(kind, STORE_KINDS, "--kind")
    embeddings = Path(embeddings)
    with atomic_directory(out, marker=SETTINGS_FILE, what="an index directory",
                          inputs=(embeddings, *sidecar_paths(embeddings))) as tmp:
        settings, index, vectors, ids = _build(embeddings, kind, memory_gb, seed)
        codes = index.codes if isinstance(index, QuantizedIndex) else index  # the faiss index to write
        (faiss.write_index_binary if settings.kind == "binary" else faiss.write_index)(codes, str(tmp / INDEX_FILE))
        if settings.kind != "flat":
            np.save(tmp / VECTORS_FILE, vectors)
        atomic_write_json(tmp / IDS_FILE, ids, indent=0)
        atomic_write_json(tmp / SETTINGS_FILE, settings.as_json())
    return settings


def _build(embeddings: Path, kind: str, memory_gb: float | None, seed: int) -> tuple[IndexFile, Any, np.ndarray,
                                                                                      list[Any]]:
    """index.json, the built index, its float vectors and ids of an encode output."""
    budget = memory_budget_bytes(memory_gb)  # a bad --memory is refused before the file is read
    vectors, alignment = read_embeddings(embeddings)
    rows, dim = vectors.shape
    choice = resolve_index(kind, dim, rows, budget)
    spec = choice.spec.model_copy(update={"rescore": DEFAULT_RESCORE if choice.spec.takes_rescore else 0})
    index = build_index(vectors, spec, seed=seed)
    ids = unique_ids(alignment.ids or [None] * rows, embeddings)
    settings = IndexFile(
        format_version=FORMAT_VERSION, kind=spec.kind, kind_requested=kind, kind_reason=choice.reason,
        rows=rows, dim=dim, bytes_per_vector=spec.bytes_per_vector,
        memory_budget_gb=round(budget / 2 ** 30, 3), memory_given=memory_gb is not None,
        rescore=spec.rescore, **faiss_parameters(index),
        embeddings=str(embeddings), model=alignment.model, embedding_config=alignment.embedding_config)
    return settings, index, vectors, ids


@dataclass
class GalleryIndex:
    """A loaded index directory: ``search(queries, k) -> (scores, row numbers)`` and its ``ids``."""

    directory: Path
    settings: IndexFile  # index.json, validated
    ids: list[Any]
    searcher: SearchIndex

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
            check_rescore(rescore, kind)  # the one rescore rule
            missing(files, needed_files(kind, rescore), directory)
            codes_file = files[INDEX_FILE]
            check_faiss_file(codes_file, file_size(codes_file), kind, rows, dim, str(directory / INDEX_FILE))
            vectors = mapped_vectors(files[VECTORS_FILE], directory / VECTORS_FILE, rows, dim) \
                if VECTORS_FILE in needed_files(kind, rescore) else None
            ids = read_ids(files[IDS_FILE], directory / IDS_FILE, rows)
            codes = _read_codes(codes_file, kind, directory / INDEX_FILE)
        searcher = codes if kind == "flat" else QuantizedIndex(kind, codes, dim, vectors, rescore)
        return cls(directory, settings, ids, searcher)

    @property
    def dim(self) -> int:
        return self.settings.dim

    @property
    def ntotal(self) -> int:
        return int(self.searcher.ntotal)

    @property
    def spec(self) -> IndexSpec:
        """What this index is, in the one vocabulary (index.json's kind, width and build
        parameters, with the rescore it searches at)."""
        settings = self.settings
        return IndexSpec(kind=settings.kind, dims=self.dim, rescore=self.rescore, nlist=settings.nlist,
                         nprobe=settings.nprobe, pq_bytes=settings.pq_bytes)

    @property
    def rescore(self) -> int:
        """The shortlist multiplier re-ranked with floats (0: the codes' or flat scores as they are)."""
        return int(getattr(self.searcher, "rescore", 0))

    def require_model(self, allow_any_model: bool = False) -> None:
        """An index that records no model fingerprint is refused (a DataError naming ``model``)
        unless ``allow_any_model`` (``--allow-any-model``): its vectors' model is unknown, and
        another model's queries rank its gallery at random.  Checked before any model loads."""
        if not self.settings.fingerprint and not allow_any_model:
            raise DataError("the index records no model fingerprint (built by an older vis-embed, or from vectors "
                            "encoded without one), so the model of its vectors is unknown; build it again from a "
                            "vis-embed encode output, or pass --allow-any-model", path=self.directory / SETTINGS_FILE,
                            field="model")

    def check_queries(self, fingerprint: str | None, full_dim: int, allow_any_model: bool = False) -> None:
        """Queries of the model that made the gallery can be searched: the same fingerprint, and
        the index's width at most the model's (and :meth:`require_model`).  Otherwise a DataError
        naming the field."""
        self.require_model(allow_any_model)
        recorded, model = self.settings.fingerprint, self.settings.model
        where = self.directory / SETTINGS_FILE
        if recorded and fingerprint and recorded != fingerprint:
            raise DataError(f"the index holds vectors of another model ({model and model.name}, adapter "
                            f"{model and model.adapter}); encode the gallery with "
                            f"this model or search with that one", path=where, field="model")
        try:
            check_dim(self.dim, full_dim, field="dim")  # the one width rule
        except DataError as error:
            raise DataError(f"the index is {self.dim} wide: {error.reason}", path=where, field="dim") from None

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, rows)`` (Q, k) best first; rows -1 where fewer than k exist.  ``queries``: a
        (Q, width) matrix, one query too (``query[None, :]``); any other shape is a DataError."""
        queries = np.asarray(queries)
        if queries.ndim != 2:
            raise DataError(f"queries must be a (queries, {self.dim}) matrix, got shape {queries.shape} (one query: "
                            f"query[None, :])", field="queries")
        if queries.shape[1] != self.dim:
            raise DataError(f"queries are {queries.shape[1]} wide, the index {self.dim}", field="dim")
        return batched_search(self.searcher, l2_normalise(queries), k)
