"""How many prepared items can the encoding process take in per second (issue 45: where the
end-to-end 23% goes)?

On a lent H200 the end-to-end encode reached 77% of the fused forward with 14 preparation
workers (docs/benchmarks.md).  Besides the workers' own decoding, the encoding process itself
does per-item work: it receives every prepared item from a worker pipe (a 256-token image is
2.4 MB of bf16 patches: pickle-5 out-of-band buffers, model/runtime/prepare_pool.py), rebuilds
it, and collates each batch.  This measures that side alone: workers whose "preparation" returns
a ready item of the real size (no decoding, no processor), so the rate is what the parent's
receiving and collating allow -- an upper bound on what any number of workers can feed -- and the
parent's CPU time per item (its threads together: ``resource.getrusage``), the share of a core
it needs at a given rate.

    .venv/bin/python benchmarks/feed_ceiling.py                  # 1 and 2 workers, 640 items
    .venv/bin/python benchmarks/feed_ceiling.py --workers 1 2 4 --items 1280 --tokens 256

Run it alone on an idle machine (it measures the host, so a CPU machine answers it).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vis_embed.model.inputs.preparer import PreparedItem
from vis_embed.model.runtime.prepare_pool import PreparePool, PrepareTask

PATCH_DIM = 1176  # Qwen2-VL / 2.5-VL: 3 channels x 2 frames x 14 x 14
MERGE = 4  # 2 x 2 patches per visual token
PROMPT_TOKENS = 25  # the query instruction's template around the image


@dataclass(frozen=True)
class ReadyPreparer:
    """A stand-in for :class:`~vis_embed.model.inputs.preparer.Preparer` whose items are ready:
    the parent's side of the feed is all that is left to time."""

    tokens: int  # visual tokens an item
    processor: Any = None  # PreparePool preloads the processor's modules: none here

    def signature(self) -> tuple[Any, ...]:
        return ("ready", self.tokens)

    def prepare_one(self, item: Any, instruction: str | None = None, base_dir: Any = None) -> PreparedItem:
        if self.tokens not in _READY:  # made once a worker: a worker's cost is its sending alone
            _READY[self.tokens] = ready_item(self.tokens, seed=0)
        return _READY[self.tokens]


_READY: dict[int, PreparedItem] = {}


def ready_item(tokens: int, seed: int) -> PreparedItem:
    """A prepared 448x448-like image item: ``tokens`` visual tokens (4 patches each) in bf16."""
    generator = torch.Generator().manual_seed(seed)
    length = tokens + PROMPT_TOKENS
    side = int(round((tokens * MERGE) ** 0.5))
    return PreparedItem(
        input_ids=torch.randint(0, 1000, (length,), generator=generator),
        mm_token_type_ids=torch.cat([torch.zeros(PROMPT_TOKENS, dtype=torch.long),
                                     torch.ones(tokens, dtype=torch.long)]),
        pixel_values=torch.randn(tokens * MERGE, PATCH_DIM, generator=generator).to(torch.bfloat16),
        image_grid_thw=torch.tensor([[1, side, side]]))


def collate_patches(items: list[PreparedItem]) -> torch.Tensor:
    """What collation costs per batch on the host: the patches gathered into one matrix (the
    token matrices are small; on CUDA the target is pinned memory)."""
    return torch.cat([item.pixel_values for item in items])


def one_run(workers: int, items: int, tokens: int, batch: int) -> dict[str, Any]:
    with PreparePool(ReadyPreparer(tokens), workers) as pool:
        list(pool.imap((PrepareTask(i, i) for i in range(2 * workers)), ahead=2 * workers))  # warm
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu_before = usage.ru_utime + usage.ru_stime
        started = time.perf_counter()
        received: list[PreparedItem] = []
        for _task, result in pool.imap((PrepareTask(i, i) for i in range(items)), ahead=2 * batch + workers):
            received.append(result)
            if len(received) == batch:
                collate_patches(received)
                received = []
        seconds = time.perf_counter() - started
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = usage.ru_utime + usage.ru_stime - cpu_before
    megabytes = tokens * MERGE * PATCH_DIM * 2 / 1e6
    return {"workers": workers, "items": items, "seconds": seconds, "items_per_s": items / seconds,
            "parent_cpu_ms_per_item": 1e3 * cpu / items, "megabytes_per_item": megabytes,
            "parent_core_share_at_200_per_s": 200 * cpu / items}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--items", type=int, default=640)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    report: dict[str, Any] = {"cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
                              "torch": torch.__version__, "rows": []}
    for workers in args.workers:
        runs = [one_run(workers, args.items, args.tokens, args.batch) for _ in range(args.repeats)]
        best = max(runs, key=lambda run: run["items_per_s"])
        best["items_per_s_all"] = [run["items_per_s"] for run in runs]
        best["parent_cpu_ms_per_item_median"] = statistics.median(run["parent_cpu_ms_per_item"] for run in runs)
        report["rows"].append(best)
        rates = ", ".join(f"{rate:.0f}" for rate in best["items_per_s_all"])
        print(f"workers {workers}: {best['items_per_s']:.0f} items/s (runs {rates}); "
              f"parent {best['parent_cpu_ms_per_item_median']:.2f} CPU-ms an item "
              f"({best['megabytes_per_item']:.1f} MB): {200 * best['parent_cpu_ms_per_item_median'] / 1e3:.0%} "
              f"of a core at 200 items/s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
