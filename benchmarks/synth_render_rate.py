"""Rendering rate of the synthetic identity benchmark (`vis-embed synth`).

Target (issue 4): the ``small`` preset renders in well under a minute on 2 CPU cores.

    .venv/bin/python benchmarks/synth_render_rate.py                 # small, 1 and 2 workers
    .venv/bin/python benchmarks/synth_render_rate.py --full-sample 4000
    .venv/bin/python benchmarks/synth_render_rate.py --modalities image,video,document --full-sample 0

``small`` is generated end to end (plan + render + write, the real command).  ``full`` is
~67K images at 224 px (several GB): by default only a sample of its render jobs (10
contiguous blocks spread over the plan) is rendered and the total is extrapolated from the
measured rate (printed as such);
``--full`` renders it completely.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from vis_embed.prep.synth import SIZES, generate
from vis_embed.prep.synth.planner import Planner
from vis_embed.prep.synth.output import _render_all


def folder_size_mb(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20


def cpu_seconds() -> float:
    """CPU time of this process plus its finished children (the rendering workers)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def time_generate(size: str, workers: int, scratch: Path,
                  modalities: str = "image") -> tuple[float, float, int, float]:
    """(wall seconds, CPU seconds, images, MB on disk) of one `generate` call.

    CPU seconds are reported because the sandbox is shared: wall time depends on the other
    jobs, CPU time much less; on idle cores wall ~= CPU / workers.
    """
    out = scratch / f"{size}-w{workers}"
    started, cpu_started = time.perf_counter(), cpu_seconds()
    generate(out, seed=0, size=size, workers=workers, modalities=modalities)
    seconds, cpu = time.perf_counter() - started, cpu_seconds() - cpu_started
    images = sum(1 for _ in out.rglob("*.png"))
    size_mb = folder_size_mb(out)
    shutil.rmtree(out)
    return seconds, cpu, images, size_mb


def time_full_sample(sample: int, workers: int) -> tuple[float, float, int, int]:
    """Plan ``full`` completely, render ``sample`` evenly spaced jobs; returns
    (plan seconds, render seconds, images rendered, images in the full plan)."""
    started = time.perf_counter()
    plan = Planner(0, SIZES["full"]).build()
    plan_seconds = time.perf_counter() - started
    # Contiguous blocks spread over the plan: consecutive jobs share identities, so sampling
    # single jobs would defeat the per-identity patch cache and overstate the cost.
    blocks = 10
    block = max(1, sample // blocks)
    stride = max(block, len(plan.jobs) // blocks)
    jobs = [job for start in range(0, len(plan.jobs), stride) for job in plan.jobs[start:start + block]][:sample]
    started = time.perf_counter()
    rendered = sum(1 for _ in _render_all(jobs, SIZES["full"].image_size, workers, show_progress=False))
    return plan_seconds, time.perf_counter() - started, rendered, len(plan.jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--full-sample", type=int, default=3000,
                        help="render this many jobs of the full plan and extrapolate (0: skip)")
    parser.add_argument("--full", action="store_true", help="render `full` completely instead")
    parser.add_argument("--size", default="small", help="the preset timed end to end (tiny: a smoke run)")
    parser.add_argument("--modalities", default="image",
                        help="as `vis-embed synth --modalities` (image,video,document: with clips and pages)")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs visible; load average {os.getloadavg()[0]:.2f} at start")
    with tempfile.TemporaryDirectory(prefix="synth-bench-") as tmp:
        scratch = Path(tmp)
        print("| size | workers | images | wall s | CPU s | images/s (wall) | images per CPU s | on disk |")
        print("|---|---|---|---|---|---|---|---|")
        sizes = [args.size, "full"] if args.full else [args.size]
        for size in sizes:
            for workers in args.workers:
                seconds, cpu, images, size_mb = time_generate(size, workers, scratch, args.modalities)
                print(f"| {size} | {workers} | {images} | {seconds:.1f} | {cpu:.1f} | {images / seconds:.0f} | "
                      f"{images / cpu:.0f} | {size_mb:.0f} MB |", flush=True)
        if not args.full and args.full_sample:
            workers = max(args.workers)
            cpu_started = cpu_seconds()
            plan_s, render_s, rendered, total = time_full_sample(args.full_sample, workers)
            cpu = cpu_seconds() - cpu_started
            rate = rendered / render_s
            print(f"| full, {rendered} of {total} rendered | {workers} | {total} | plan {plan_s:.1f} + "
                  f"render {render_s:.1f} (all: ~{plan_s + total / rate:.0f} extrapolated) | {cpu:.1f} | "
                  f"{rate:.0f} | - | - |")
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
