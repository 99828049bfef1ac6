"""Exact top-k gallery search at scale: faiss vs numpy chunked matmul, in the same run.

    .venv/bin/python benchmarks/search_scale.py                       # 10k queries x 1M x 1536
    .venv/bin/python benchmarks/search_scale.py --gallery-size 100000 --queries 1000

Random unit vectors stand in for embeddings (the cost of exact search does not depend on the
values).  The two methods alternate over blocks of ``--block`` queries so that, on a shared
machine, both see the same background load.  The gallery alone takes gallery_size x dim x 4 bytes (1M x 1536: 5.7 GiB); both
methods search it in place (faiss.knn, no index copy).  Prints wall time, queries/s, the
speed-up and the peak resident memory of each phase (sampled every 20 ms), and checks that
both methods return the same neighbours.
"""

from __future__ import annotations

import argparse
import os
import platform
import threading
import time
from contextlib import contextmanager

import faiss
import numpy as np

from vis_embed.evaluation.search import build_index, numpy_topk, search


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@contextmanager
def peak_rss(result: dict[str, float]):
    """Sample RSS in a thread while the block runs; store the peak in GiB."""
    stop = threading.Event()
    result["start_gib"] = rss_bytes() / 2**30
    peak = [rss_bytes()]

    def sample() -> None:
        while not stop.wait(0.02):
            peak[0] = max(peak[0], rss_bytes())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    start = time.perf_counter()
    try:
        yield
    finally:
        result["seconds"] = time.perf_counter() - start
        stop.set()
        thread.join()
        result["peak_gib"] = max(peak[0], rss_bytes()) / 2**30


def _accumulate(total: dict[str, float], phase: dict[str, float]) -> None:
    total["seconds"] += phase["seconds"]
    total["peak_gib"] = max(total["peak_gib"], phase["peak_gib"])
    total["extra_gib"] = max(total["extra_gib"], phase["peak_gib"] - phase["start_gib"])


def random_unit_rows(n: int, dim: int, seed: int, chunk: int = 65536) -> np.ndarray:
    """(n, dim) float32 unit rows, generated in chunks so no float64 copy of the whole matrix exists."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, chunk):
        block = rng.standard_normal((min(chunk, n - start), dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start:start + len(block)] = block
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gallery-size", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=1536)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--gallery-chunk", type=int, default=65536, help="numpy: gallery rows per matmul block")
    parser.add_argument("--query-chunk", type=int, default=1024, help="numpy: queries per matmul block")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--block", type=int, default=1000, help="queries per alternating faiss/numpy block")
    parser.add_argument("--ivf-nlist", type=int, default=0,
                        help="also time the approximate IVF index (copies the gallery: 2x memory); 0 = skip")
    parser.add_argument("--ivf-nprobe", type=int, default=0, help="IVF lists visited (default nlist/8)")
    args = parser.parse_args()

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus; "
          f"faiss {faiss.__version__} ({faiss.omp_get_max_threads()} threads), numpy {np.__version__}")
    print(f"gallery {args.gallery_size:,} x {args.dim}, queries {args.queries:,}, top-{args.k}")
    setup: dict[str, float] = {}
    with peak_rss(setup):
        gallery = random_unit_rows(args.gallery_size, args.dim, args.seed)
        queries = random_unit_rows(args.queries, args.dim, args.seed + 1)
    print(f"data: {gallery.nbytes / 2**30:.2f} GiB gallery, generated in {setup['seconds']:.1f} s, "
          f"RSS {setup['peak_gib']:.2f} GiB")

    # Both methods run block by block, alternating, so that on a shared machine they see the
    # same background load; cumulative figures are printed after every block.
    faiss_ids = np.empty((args.queries, args.k), dtype=np.int64)
    numpy_ids = np.empty_like(faiss_ids)
    faiss_scores = np.empty((args.queries, args.k), dtype=np.float32)
    numpy_scores = np.empty_like(faiss_scores)
    faiss_stats = {"seconds": 0.0, "peak_gib": 0.0, "extra_gib": 0.0}
    numpy_stats = {"seconds": 0.0, "peak_gib": 0.0, "extra_gib": 0.0}
    for start in range(0, args.queries, args.block):
        block = slice(start, min(start + args.block, args.queries))
        phase: dict[str, float] = {}
        with peak_rss(phase):
            faiss_scores[block], faiss_ids[block] = faiss.knn(queries[block], gallery, args.k,
                                                              metric=faiss.METRIC_INNER_PRODUCT)
        _accumulate(faiss_stats, phase)
        with peak_rss(phase):
            numpy_scores[block], numpy_ids[block] = numpy_topk(queries[block], gallery, args.k,
                                                               query_chunk=args.query_chunk,
                                                               gallery_chunk=args.gallery_chunk)
        _accumulate(numpy_stats, phase)
        done = block.stop
        print(f"  {done:>7,} queries: faiss {faiss_stats['seconds']:8.1f} s, numpy {numpy_stats['seconds']:8.1f} s, "
              f"speed-up {numpy_stats['seconds'] / faiss_stats['seconds']:.2f}x", flush=True)

    same_sets = np.mean([set(a) == set(b) for a, b in zip(faiss_ids.tolist(), numpy_ids.tolist(), strict=True)])
    max_score_gap = float(np.abs(np.sort(faiss_scores, axis=1) - np.sort(numpy_scores, axis=1)).max())
    for name, stats in (("faiss exact (faiss.knn, IP)", faiss_stats), ("numpy chunked matmul", numpy_stats)):
        print(f"{name:30s} {stats['seconds']:9.1f} s  {args.queries / stats['seconds']:9.1f} queries/s  "
              f"peak RSS {stats['peak_gib']:.2f} GiB (+{stats['extra_gib']:.2f} GiB during the search)")
    print(f"speed-up faiss / numpy: {numpy_stats['seconds'] / faiss_stats['seconds']:.2f}x (target >= 5x)")
    if args.ivf_nlist:
        ivf_stats: dict[str, float] = {}
        with peak_rss(ivf_stats):
            index = build_index(gallery, kind="ivf", nlist=args.ivf_nlist, nprobe=args.ivf_nprobe or None)
            built = time.perf_counter()
            _, ivf_ids = search(index, queries, args.k)
            search_seconds = time.perf_counter() - built
        recall = np.mean([len(set(a) & set(b)) / args.k for a, b in zip(ivf_ids.tolist(), faiss_ids.tolist(), strict=True)])
        print(f"{'faiss IVF (nlist ' + str(args.ivf_nlist) + ', nprobe ' + str(index.nprobe) + ')':30s} "
              f"{search_seconds:9.1f} s  {args.queries / search_seconds:9.1f} queries/s  "
              f"(+{ivf_stats['seconds'] - search_seconds:.1f} s training/adding)  recall@{args.k} vs exact "
              f"{100 * recall:.1f}%  peak RSS {ivf_stats['peak_gib']:.2f} GiB")
        del index

    print(f"same top-{args.k} sets: {100 * same_sets:.2f}% of queries; max score difference {max_score_gap:.2e}")


if __name__ == "__main__":
    main()
