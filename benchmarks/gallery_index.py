"""Persistent-index kinds at gallery scale: memory, build time, queries/s and recall@10 against
exact float search, for every kind of ``vis-embed index`` (vis_embed/gallery/store.py).

    .venv/bin/python benchmarks/gallery_index.py                                  # 1M x 1536, 1000 queries
    .venv/bin/python benchmarks/gallery_index.py --rows 20000 --dim 256 --queries 200   # smoke

Vectors drawn as *clustered identities*, the shape of an identity gallery: ``rows / views``
identities (default 16 views: more than k = 10, so a query's exact top-10 are views of its own
identity, well above the rest; with fewer views than k, the exact top-10 ends in a crowd of
unrelated vectors whose order is noise at the 0.005 level that no approximate search keeps:
``--views 8`` shows that case), each a unit centre drawn from an anisotropic Gaussian (dimension i has standard
deviation (1 + i)^-0.25 after a fixed random rotation, so no coordinate axis is special and the
spectrum decays like learnt embeddings'); each gallery row is a view of its identity,
``normalise(centre + noise)`` with per-coordinate noise ``--spread / sqrt(dim)`` (cosine to its
centre ~ 1 / sqrt(1 + spread^2): 0.78 at the default 0.8).  Queries are fresh views of gallery
identities.  Ground truth: the exact top-10 of each query by float32 inner product (the
``flat`` kind, faiss IndexFlatIP).  Besides recall@10 against it, ``identity@10`` is the mean
share of a kind's top-10 that are views of the query's identity, over the same share of the
exact top-10 (what a re-identification search needs).

Per kind (``flat``, ``int8``, ``binary`` and ``ivf-pq``, each quantized kind with and without
``--rescore``): build seconds (training included), index bytes (faiss's serialised size; the
rescoring floats are not counted: they stay on disk, memory-mapped, and only K x 10 rows a
query are read), peak resident memory of the build, queries/s over all queries (one batch; faiss
uses every core it is given: ``--threads``), recall@10 and the speed-up over flat.  The floats
are held in memory for the rescoring here, so the figures are the page-cache-warm case.
Writes the table as Markdown to stdout and every figure to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spinning OpenMP threads distort timings on shared CPUs

import faiss  # noqa: E402  (after the OpenMP setting)
import numpy as np  # noqa: E402

from search_scale import peak_rss  # noqa: E402
from vis_embed.gallery.quantized_index import QuantizedIndex  # noqa: E402
from vis_embed.gallery.search import build_index  # noqa: E402
from vis_embed.vectors.index_spec import IndexSpec, pq_bytes_for  # noqa: E402
from vis_embed.gallery.store import faiss_parameters  # noqa: E402


def rotation(dim: int, seed: int) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((dim, dim)))
    return (q * np.sign(np.diag(r))).astype(np.float32)


def unit(block: np.ndarray) -> np.ndarray:
    return block / np.linalg.norm(block, axis=1, keepdims=True)


def clustered_identities(rows: int, dim: int, views: int, spread: float, queries: int,
                         seed: int, chunk: int = 65536) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(gallery, queries, query identities, identities)`` as the module docstring describes;
    float32, built in chunks; gallery row i is a view of identity ``i % identities``."""
    rng = np.random.default_rng(seed)
    identities = max(1, rows // views)
    scale = ((1.0 + np.arange(dim)) ** -0.25).astype(np.float32)
    centres = unit((rng.standard_normal((identities, dim), dtype=np.float32) * scale) @ rotation(dim, seed + 1))
    noise = spread / np.sqrt(dim)

    def views_of(ids: np.ndarray) -> np.ndarray:
        return unit(centres[ids] + noise * rng.standard_normal((len(ids), dim), dtype=np.float32))

    gallery = np.empty((rows, dim), dtype=np.float32)
    for start in range(0, rows, chunk):
        stop = min(rows, start + chunk)
        gallery[start:stop] = views_of(np.arange(start, stop) % identities)
    query_identities = rng.integers(0, identities, queries)
    return gallery, views_of(query_identities), query_identities, identities


def serialised_bytes(index: faiss.Index | faiss.IndexBinary) -> int:
    """What the index takes on disk.  A flat index is its codes (rows x code size, plus a header
    of a few dozen bytes) and is not serialised here: at 1M x 1536 the copy would be another
    6 GB beside the gallery and the index (the first full run was killed for memory at 24 GiB)."""
    if isinstance(index, faiss.IndexFlat):
        return int(index.ntotal) * int(index.code_size)
    writer = faiss.serialize_index_binary if isinstance(index, faiss.IndexBinary) else faiss.serialize_index
    return int(writer(index).size)


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a[a >= 0]) & set(b)) / len(b) for a, b in zip(found, truth)]))


def identity_share(found: np.ndarray, query_identities: np.ndarray, identities: int) -> float:
    """Mean share of each query's hits that are views of its identity."""
    return float(np.mean((found % identities == query_identities[:, None]) & (found >= 0)))


def run_kind(kind: str, gallery: np.ndarray, queries: np.ndarray, rescores: list[int], k: int,
             pq_bytes: int | None) -> tuple[list[dict], np.ndarray | None]:
    """Build ``kind`` once, then search it at every rescore (flat: none); rows of the table."""
    build: dict[str, float] = {}
    with peak_rss(build):
        spec = IndexSpec(kind=kind, dims=gallery.shape[1], pq_bytes=pq_bytes if kind == "ivf-pq" else None)
        built = build_index(gallery, spec)  # the one factory, as `vis-embed index` builds it
        index, parameters = (built if kind == "flat" else built.codes), faiss_parameters(built)
    rows, found_flat = [], None
    for rescore in ([0] if kind == "flat" else rescores):
        searcher = index if kind == "flat" else QuantizedIndex(kind, index, gallery.shape[1], gallery, rescore)
        started = time.perf_counter()
        _scores, found = searcher.search(queries, k)
        seconds = time.perf_counter() - started
        if kind == "flat":
            found_flat = found
        rows.append({"kind": kind, "rescore": rescore, "build_s": round(build["seconds"], 2),
                     "build_peak_gib": round(build["peak_gib"], 2), "index_bytes": serialised_bytes(index),
                     "bytes_per_vector": spec.bytes_per_vector,
                     "queries_per_s": round(len(queries) / seconds, 1), "found": found, **parameters})
    return rows, found_flat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=1536)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--views", type=int, default=16, help="gallery rows per identity (default: 16)")
    parser.add_argument("--spread", type=float, default=0.8, help="view noise relative to the centre (default 0.8)")
    parser.add_argument("--kinds", default="flat,int8,binary,ivf-pq")
    parser.add_argument("--rescore", default="0,4,10", help="comma-separated rescore factors (default: 0,4,10)")
    parser.add_argument("--pq-bytes", type=int, default=None, help="ivf-pq code bytes (default: 64 or fewer)")
    parser.add_argument("--threads", type=int, default=None, help="faiss threads (default: every core)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON file for every figure")
    args = parser.parse_args()
    if args.threads:
        faiss.omp_set_num_threads(args.threads)
    k, kinds = 10, [kind.strip() for kind in args.kinds.split(",")]
    if kinds[0] != "flat":
        kinds.insert(0, "flat")  # the ground truth
    drawn: dict[str, float] = {}
    with peak_rss(drawn):
        gallery, queries, query_identities, identities = clustered_identities(
            args.rows, args.dim, args.views, args.spread, args.queries, args.seed)
    pq_bytes = args.pq_bytes or pq_bytes_for(args.dim, 72)
    table, truth = [], None
    for kind in kinds:
        rows, found_flat = run_kind(kind, gallery, queries, [int(r) for r in args.rescore.split(",")], k, pq_bytes)
        truth = found_flat if found_flat is not None else truth
        table += rows
    flat_qps = table[0]["queries_per_s"]
    exact_share = identity_share(truth, query_identities, identities)
    for row in table:
        row["identity_at_10"] = round(identity_share(row["found"], query_identities, identities) / exact_share, 4)
        row["recall_at_10"] = round(recall_at(row.pop("found"), truth), 4)
        row["speedup_vs_flat"] = round(row["queries_per_s"] / flat_qps, 2)
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
               "faiss_threads": faiss.omp_get_max_threads(), "faiss": faiss.__version__}
    print(f"{args.rows} x {args.dim} clustered identities ({args.views} views each, spread {args.spread}), "
          f"{args.queries} queries, k={k}; drawn in {drawn['seconds']:.1f} s; {machine}")
    print("| kind | rescore | bytes/vector | index MiB | build s | build peak GiB | queries/s | x flat | recall@10 "
          "| identity@10 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in table:
        print(f"| {row['kind']} | {row['rescore'] or '-'} | {row['bytes_per_vector']} | "
              f"{row['index_bytes'] / 2 ** 20:.1f} | {row['build_s']} | {row['build_peak_gib']} | "
              f"{row['queries_per_s']} | {row['speedup_vs_flat']} | {row['recall_at_10']} | {row['identity_at_10']} |")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump({"args": vars(args), "machine": machine, "rows": table}, handle, indent=2)


if __name__ == "__main__":
    main()
