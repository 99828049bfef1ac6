"""Scale benchmark of the offline scheduler (issue: scheduling).

A synthetic configuration shaped like the paper's: 40 sub-datasets, ~1.1M records, identity
and pairs datasets mixed, skewed identity sizes, designated hard negatives on half of the
datasets; 3000 steps x 1024 members, k = 5.  Prints wall time (data preparation excluded and
included) and peak memory (max RSS of this process).  Target: <= 20 s and <= 2 GiB.

    .venv/bin/python benchmarks/schedule_scale.py [--steps 3000] [--global-batch-size 1024]
        [--interleave-batch-size 32] [--out /tmp/schedule.parquet]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from vis_embed.sampling import ScheduleSettings, SubDataset, plan_schedule, write_schedule
from vis_embed.sampling.report import format_report


def synthetic_datasets(num_datasets: int = 40, total_rows: int = 1_100_000, seed: int = 0) -> list[SubDataset]:
    rng = np.random.default_rng(seed)
    shares = rng.lognormal(0.0, 1.0, num_datasets)
    sizes = np.maximum(2000, (shares / shares.sum() * total_rows).astype(np.int64))
    sizes[-1] += total_rows - sizes.sum()
    datasets = []
    for index, size in enumerate(sizes):
        size = int(size)
        kind = "identity" if index % 10 < 7 else "pairs"  # 28 identity, 12 pairs datasets
        name = f"{kind}_{index:02d}"
        if kind == "identity":
            # skewed identity sizes: 1 + geometric, a few identities with hundreds of instances
            instances = 1 + rng.geometric(0.15, size)
            instances[: max(1, size // 5000)] = rng.integers(200, 800, max(1, size // 5000))
            labels = np.repeat(np.arange(len(instances)), instances)[:size]
            labels = labels[rng.permutation(size)]
        else:
            labels = None
        hard_negatives = None
        if index % 2 == 0:
            lengths = rng.integers(5, 11, size)
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            hard_negatives = (offsets, rng.integers(0, size, int(offsets[-1])))
        ids = np.array([f"{name}-{i}" for i in range(size)], dtype=object)
        datasets.append(SubDataset(name, kind, ids, labels, hard_negatives, weight=float(rng.uniform(0.5, 2.0))))
    return datasets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--global-batch-size", type=int, default=1024)
    parser.add_argument("--interleave-batch-size", type=int, default=32)
    parser.add_argument("--hard-negatives", type=int, default=5)
    parser.add_argument("--out", default=None)
    parser.add_argument("--report", action="store_true", help="print the per-dataset report table")
    args = parser.parse_args()
    load_before = f"{os.getloadavg()[0]:.2f}"  # the sandbox is shared: say how busy it was

    started = time.perf_counter()
    datasets = synthetic_datasets()
    prepared = time.perf_counter()
    cpu_before = time.process_time()
    settings = ScheduleSettings(steps=args.steps, global_batch_size=args.global_batch_size,
                                interleave_batch_size=args.interleave_batch_size,
                                hard_negatives=args.hard_negatives, seed=0)
    schedule = plan_schedule(datasets, settings)
    planned = time.perf_counter()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp()) / "schedule.parquet"
    write_schedule(schedule, out, data_fingerprint="synthetic")
    written = time.perf_counter()
    cpu_seconds = time.process_time() - cpu_before
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    rows = sum(ds.num_rows for ds in datasets)
    if args.report:
        print(format_report(schedule.report))
    print(f"datasets: {len(datasets)}  records: {rows}  steps: {settings.steps}  B: {settings.global_batch_size}  "
          f"M: {settings.interleave_batch_size}  k: {settings.hard_negatives}")
    print(f"synthetic data: {prepared - started:.2f} s")
    print(f"scheduling: {planned - prepared:.2f} s   writing Parquet: {written - planned:.2f} s   "
          f"schedule total: {written - prepared:.2f} s   ({out.stat().st_size / 2**20:.1f} MiB)")
    print(f"CPU time of scheduling + writing (this process): {cpu_seconds:.2f} s   "
          f"load average before/after: {load_before} / {os.getloadavg()[0]:.2f}")
    print(f"peak RSS (whole process, incl. synthetic data): {peak_gib:.2f} GiB")
    fallbacks = schedule.report["fallbacks"]
    print(f"fallbacks: {fallbacks}")


if __name__ == "__main__":
    main()
