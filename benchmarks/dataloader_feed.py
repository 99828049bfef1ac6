"""Can ``torch.utils.data.DataLoader`` prepare items as fast as the PreparePool (issue 36, item 2)?

The question before replacing ``model/runtime/prepare_pool.py`` (and ``model/runtime/item_feed.py``'s helper
thread) with the ecosystem's loader: on the same photo mix as ``benchmarks/prepare_throughput.py``
and the same :class:`~vis_embed.model.inputs.preparer.Preparer`, time

* **pool**: ``PreparePool(preparer, N).imap(tasks)`` -- today's path (forkserver processes,
  pickle-5 out-of-band buffers, results in task order, a DataError returned as a value);
* **dataloader**: ``DataLoader(dataset, batch_sampler=the encode batches, num_workers=N,
  multiprocessing_context="forkserver", persistent_workers=True, prefetch_factor=2,
  worker_init_fn=one torch thread, collate_fn=the list as is)`` over a Dataset whose
  ``__getitem__`` returns ``preparer.prepare_one(item)`` or its DataError (a value, as skip mode
  needs); tensors cross in torch's shared memory.  Order is the sampler's (in_order=True).

Both are timed after their workers are up (the first batch is untimed) for N = 1..max, on the
photos and on the target-size copies (``photos/s = n / (T_photos - T_copies)``, the same
start-up-free rule as prepare_throughput.py).  The criteria: 2 workers >= 1.7x of 1, and the
DataLoader within noise of the pool at every N.  Run it alone on an idle machine:

    .venv/bin/python benchmarks/dataloader_feed.py --quick      # smoke run (~1 min)
    .venv/bin/python benchmarks/dataloader_feed.py              # 48 photos, 1..cores workers
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prepare_throughput import model_and_photo_mix  # noqa: E402

BATCH = 16


class PreparedItems:
    """A map-style dataset of items: each one prepared, or its DataError (skip mode's value)."""

    def __init__(self, preparer: Any, items: list[dict[str, Any]], base_dir: Path) -> None:
        self.preparer, self.items, self.base_dir = preparer, items, base_dir

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        from vis_embed.errors import DataError

        try:
            return self.preparer.prepare_one(self.items[index], None, self.base_dir)
        except DataError as exc:
            exc.item_index = index  # type: ignore[attr-defined]
            return exc


def _one_thread(_worker: int) -> None:
    import torch

    torch.set_num_threads(1)  # N workers use N cores, as the pool's do


def _as_list(batch: list[Any]) -> list[Any]:
    return batch


def _batches(count: int) -> list[list[int]]:
    return [list(range(start, min(start + BATCH, count))) for start in range(0, count, BATCH)]


def pool_seconds(preparer: Any, items: list[dict[str, Any]], base_dir: Path, workers: int) -> float:
    from vis_embed.model.runtime.prepare_pool import PreparePool, PrepareTask

    pool = PreparePool(preparer, workers)
    try:
        list(pool.imap([PrepareTask(0, items[0], None, base_dir)]))  # workers up: untimed
        started = time.perf_counter()
        for _task, _result in pool.imap((PrepareTask(i, item, None, base_dir) for i, item in enumerate(items)),
                                        ahead=2 * BATCH + workers):
            pass
        return time.perf_counter() - started
    finally:
        pool.close()


def dataloader_seconds(preparer: Any, items: list[dict[str, Any]], base_dir: Path, workers: int) -> float:
    from torch.utils.data import DataLoader

    dataset = PreparedItems(preparer, items, base_dir)
    loader = DataLoader(dataset, batch_sampler=_batches(len(items)), num_workers=workers,
                        multiprocessing_context="forkserver", persistent_workers=True, prefetch_factor=2,
                        worker_init_fn=_one_thread, collate_fn=_as_list)
    warm = iter(loader)
    next(warm)  # workers up (and the first batch prepared): untimed
    del warm
    started = time.perf_counter()
    for _batch in loader:
        pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="checkpoint whose processor is used (default: a tiny one)")
    parser.add_argument("--photos", type=int, default=48)
    parser.add_argument("--workers", type=int, default=None, help="largest worker count (default: the cores)")
    parser.add_argument("--max-pixels", type=int, default=200704)
    parser.add_argument("--repeats", type=int, default=3, help="keep the fastest of this many runs")
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 small photos, 1 and 2 workers")
    args = parser.parse_args()

    from vis_embed.io import read_jsonl
    from vis_embed.model.runtime.dry_run import ProcessorOnlyModel
    from vis_embed.model.embedding_config import EmbeddingConfig
    from vis_embed.model.runtime.prepare_pool import available_cores

    count = 4 if args.quick else args.photos
    top = 2 if args.quick else (args.workers or available_cores())
    with model_and_photo_mix(args.model, count, args.quick, args.max_pixels) as (model, photos, copies):
        preparer = ProcessorOnlyModel.from_pretrained(model, EmbeddingConfig(max_pixels=args.max_pixels)).preparer()
        inputs = {name: [row for _line, row in read_jsonl(path)] for name, path in (("photos", photos),
                                                                                    ("copies", copies))}
        rows = []
        for workers in range(1, top + 1):
            for name, timer in (("pool", pool_seconds), ("dataloader", dataloader_seconds)):
                best = {kind: min(timer(preparer, inputs[kind], photos.parent, workers) for _ in range(args.repeats))
                        for kind in inputs}
                net = max(best["photos"] - best["copies"], 1e-9)
                rows.append({"loader": name, "workers": workers, **best, "photos_per_s": count / net})
    print(f"## Item preparation: PreparePool vs DataLoader, {count} photos, max_pixels {args.max_pixels}, "
          f"{available_cores()} cores, fastest of {args.repeats}\n")
    print("| loader | workers | photos s | copies s | photos/s (start-up excluded) |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['loader']} | {row['workers']} | {row['photos']:.2f} | {row['copies']:.2f} | "
              f"{row['photos_per_s']:.1f} |")
    for name in ("pool", "dataloader"):
        rate = {row["workers"]: row["photos_per_s"] for row in rows if row["loader"] == name}
        if 2 in rate:
            print(f"\n{name}: 2 workers vs 1: {rate[2] / rate[1]:.2f}x (>= 1.7)", end="")
    print()


if __name__ == "__main__":
    main()
