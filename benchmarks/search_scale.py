"""Exact top-k gallery search at scale: our indexes vs numpy chunked matmul, in the same run.

    .venv/bin/python benchmarks/search_scale.py                       # 10k queries x 1M x 1536
    .venv/bin/python benchmarks/search_scale.py --gallery-size 100000 --queries 1000

Three exact methods: ``--index exact-bf16`` (vis_embed's Bf16ShortlistIndex: certified bf16
shortlist + exact re-rank), ``--index flat`` (faiss flat, float32; faiss.knn searches the
array in place) and numpy chunked matmul + argpartition (the baseline).  Random unit vectors
stand in for embeddings: the cost of the matrix product does not depend on the values, and for
the bf16 index random vectors are the *hard* case -- their top scores sit in a dense crowd, so
the shortlist that must be re-scored is larger than for clustered real embeddings.

The methods alternate over blocks of ``--block`` queries so that, on a shared machine, all see
the same background load.  The gallery takes gallery_size x dim x 4 bytes (1M x 1536: 5.7 GiB);
the bf16 index adds a bf16 copy (half that), built once before the timed searches (its build
time is reported separately).  Prints wall time, queries/s, the speed-ups over numpy and the
peak resident memory of each phase (sampled every 20 ms), and checks that all methods return
the same neighbours.
"""

from __future__ import annotations

import argparse
import os
import platform
import threading
import time
from contextlib import contextmanager

# Spin-waiting OpenMP threads (the default) slow every method down badly on a shared machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import faiss  # noqa: E402  (after the OpenMP setting)
import numpy as np  # noqa: E402

from vis_embed.gallery.index_choice import resolve_index
from vis_embed.gallery.search import build_index, numpy_topk, search
from vis_embed.gallery.search_bf16 import Bf16ShortlistIndex
from vis_embed.vectors.index_spec import IndexSpec


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
    parser.add_argument("--bf16-gallery-chunk", type=int, default=65536, help="exact-bf16: gallery rows per product")
    parser.add_argument("--bf16-query-chunk", type=int, default=1024, help="exact-bf16: queries per product")
    parser.add_argument("--skip-faiss", action="store_true", help="time only exact-bf16 and numpy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--block", type=int, default=1000, help="queries per alternating faiss/numpy block")
    parser.add_argument("--ivf-nlist", type=int, default=0,
                        help="also time the approximate IVF index (copies the gallery: 2x memory); 0 = skip")
    parser.add_argument("--ivf-nprobe", type=int, default=0, help="IVF lists visited (default nlist/8)")
    args = parser.parse_args()

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus; "
          f"faiss {faiss.__version__} ({faiss.omp_get_max_threads()} threads), numpy {np.__version__}")
    print(f"gallery {args.gallery_size:,} x {args.dim}, queries {args.queries:,}, top-{args.k}")
    choice = resolve_index("auto", args.dim)  # what `--index auto` (the default) runs on this machine
    print(f"--index auto on this machine: {choice.spec.recorded()} ({choice.reason})")
    setup: dict[str, float] = {}
    with peak_rss(setup):
        gallery = random_unit_rows(args.gallery_size, args.dim, args.seed)
        queries = random_unit_rows(args.queries, args.dim, args.seed + 1)
    print(f"data: {gallery.nbytes / 2**30:.2f} GiB gallery, generated in {setup['seconds']:.1f} s, "
          f"RSS {setup['peak_gib']:.2f} GiB")

    index_stats: dict[str, float] = {}
    with peak_rss(index_stats):
        bf16_index = Bf16ShortlistIndex(gallery, gallery_chunk=args.bf16_gallery_chunk,
                                        query_chunk=args.bf16_query_chunk)
    print(f"exact-bf16 index built in {index_stats['seconds']:.1f} s "
          f"(+{index_stats['peak_gib'] - index_stats['start_gib']:.2f} GiB)")

    # The methods run block by block, alternating, so that on a shared machine they see the
    # same background load; cumulative figures are printed after every block.
    methods = {"exact-bf16": lambda q: bf16_index.search(q, args.k),
               "faiss": lambda q: faiss.knn(q, gallery, args.k, metric=faiss.METRIC_INNER_PRODUCT),
               "numpy": lambda q: numpy_topk(q, gallery, args.k, query_chunk=args.query_chunk,
                                             gallery_chunk=args.gallery_chunk)}
    if args.skip_faiss:
        del methods["faiss"]
    ids = {name: np.empty((args.queries, args.k), dtype=np.int64) for name in methods}
    scores = {name: np.empty((args.queries, args.k), dtype=np.float32) for name in methods}
    stats = {name: {"seconds": 0.0, "peak_gib": 0.0, "extra_gib": 0.0} for name in methods}
    for start in range(0, args.queries, args.block):
        block = slice(start, min(start + args.block, args.queries))
        for name, method in methods.items():
            phase: dict[str, float] = {}
            with peak_rss(phase):
                scores[name][block], ids[name][block] = method(queries[block])
            _accumulate(stats[name], phase)
        print(f"  {block.stop:>7,} queries: " + ", ".join(f"{name} {stats[name]['seconds']:7.1f} s" for name in methods)
              + f"; exact-bf16 speed-up {stats['numpy']['seconds'] / stats['exact-bf16']['seconds']:.2f}x", flush=True)

    labels = {"exact-bf16": "vis_embed exact-bf16", "faiss": "faiss exact (knn, IP)", "numpy": "numpy chunked matmul"}
    for name in methods:
        print(f"{labels[name]:30s} {stats[name]['seconds']:9.1f} s  "
              f"{args.queries / stats[name]['seconds']:9.1f} queries/s  "
              f"peak RSS {stats[name]['peak_gib']:.2f} GiB (+{stats[name]['extra_gib']:.2f} GiB during the search)")
    for name in methods:
        if name != "numpy":
            print(f"speed-up {name} / numpy: {stats['numpy']['seconds'] / stats[name]['seconds']:.2f}x"
                  + (" (target >= 5x)" if name == "exact-bf16" else ""))
    print(f"exact-bf16: {bf16_index.n_fallback_queries} of {args.queries:,} queries needed the brute-force fallback; "
          f"{bf16_index.n_rescored / args.queries:.1f} rows re-scored exactly per query")
    if args.ivf_nlist:
        ivf_stats: dict[str, float] = {}
        with peak_rss(ivf_stats):
            index = build_index(gallery, IndexSpec.named("ivf", nlist=args.ivf_nlist, nprobe=args.ivf_nprobe or None))
            built = time.perf_counter()
            _, ivf_ids = search(index, queries, args.k)
            search_seconds = time.perf_counter() - built
        recall = np.mean([len(set(a) & set(b)) / args.k
                          for a, b in zip(ivf_ids.tolist(), ids["numpy"].tolist(), strict=True)])
        print(f"{'faiss IVF (nlist ' + str(args.ivf_nlist) + ', nprobe ' + str(index.nprobe) + ')':30s} "
              f"{search_seconds:9.1f} s  {args.queries / search_seconds:9.1f} queries/s  "
              f"(+{ivf_stats['seconds'] - search_seconds:.1f} s training/adding)  recall@{args.k} vs exact "
              f"{100 * recall:.1f}%  peak RSS {ivf_stats['peak_gib']:.2f} GiB")
        del index

    for name in methods:
        if name == "numpy":
            continue
        same_sets = np.mean([set(a) == set(b) for a, b in zip(ids[name].tolist(), ids["numpy"].tolist(), strict=True)])
        gap = float(np.abs(np.sort(scores[name], axis=1) - np.sort(scores["numpy"], axis=1)).max())
        print(f"{name} vs numpy: same top-{args.k} sets for {100 * same_sets:.2f}% of queries; "
              f"max score difference {gap:.2e}")


if __name__ == "__main__":
    main()
