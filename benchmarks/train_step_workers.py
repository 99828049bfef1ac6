"""Training steps with item preparation in worker processes: ``num_workers`` 0 vs 1 vs 2 (issue 28).

What is timed is the real trainer: ``python -m vis_embed train RECIPE`` (one fresh process per
configuration) on an image-dominated identity data set, and each step's ``step_time_s`` from
its ``train_log.jsonl``.  That is the trainer's own clock: from the start of step k to the end
of its optimiser step, so it includes preparing step k's items (``num_workers: 0``: in the
main process, nothing overlapped) or waiting for them (``num_workers >= 1``: the next step is
prepared in that many processes while this one trains).

* **Data**: photo-size JPEGs (1600x1200 and 3000x2000 in turn; smooth colour fields and
  grain from ``prepare_throughput.photo``, so they decode like photos), one identity per two
  instances, and a schedule from the real scheduler.  Each step prepares ``--batch`` queries
  and ``--batch`` positives: 2 x batch photos.
* **Model**: the tiny random Qwen2-VL (``build_tiny_checkpoint``), LoRA r4, fp32, at
  ``--max-pixels`` (default 200704 = 256 visual tokens): decoding and downscaling a photo
  costs far more than the tiny model's forward and backward on it, so preparation dominates.
  The row "target-size copies" shows how much: the same run (``num_workers: 0``) on copies of
  the photos stored at the size the processor resizes them to, i.e. the step without the big
  decode.
* **Start-up excluded**: the first ``--warmup`` steps (default 2) are left out of the median:
  they include starting the worker processes (forkserver: a fresh interpreter importing torch
  and the processor) and, for ``num_workers >= 1``, step 0, which nothing prepared ahead.
  The last step is left out too: with ``num_workers >= 1`` nothing is prepared beside it.
  Model loading and saving are outside every step anyway; "run s" (the whole process) is
  printed for reference only.
* **Same adapter**: the final adapters of the photo runs are compared tensor by tensor with
  the ``num_workers: 0`` one.  Bit-identity is expected with one torch thread
  (``--threads 1``, the default, as ``tests/test_prepare_workers.py`` checks it); with more
  threads reductions may differ in the last bits and the maximum difference is printed.

    .venv/bin/python benchmarks/train_step_workers.py --quick     # smoke run (toy photos, ~1 min on 2 cores)
    .venv/bin/python benchmarks/train_step_workers.py             # the figures (idle machine)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prepare_throughput import photo  # noqa: E402

FULL_SIZES = [(1600, 1200), (3000, 2000)]
QUICK_SIZES = [(640, 480), (800, 600)]  # above the default budget: the copies are smaller


def write_photo_datasets(root: Path, identities: int, sizes: list[tuple[int, int]],
                         max_pixels: int) -> dict[str, Path]:
    """Two identity data sets with the same records: ``photos`` and ``copies`` (at processor size).

    Returns ``{"photos": YAML, "copies": YAML}``; each YAML names its own image folder.
    """
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    rows = []
    for folder in ("photos", "copies"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for identity in range(identities):
        for instance in range(2):
            number = 2 * identity + instance
            width, height = sizes[number % len(sizes)]
            picture = photo(width, height, seed=number)
            name = f"id{identity:03d}_{instance}.jpg"
            picture.save(root / "photos" / name, quality=90)
            target_height, target_width = smart_resize(height, width, 28, 3136, max_pixels)  # the processor's size
            picture.resize((target_width, target_height), Image.BICUBIC).save(root / "copies" / name, quality=90)
            rows.append({"id": f"id{identity:03d}_{instance}", "image": name, "identity": f"obj{identity:03d}"})
    (root / "rec.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    configs = {}
    for folder in ("photos", "copies"):
        config = {"datasets": [{"name": "photos", "kind": "identity", "path": "rec.jsonl", "image_root": folder,
                                "query_instruction": "Find the same object.",
                                "candidate_instruction": "Represent the given image."}]}
        configs[folder] = root / f"{folder}.yaml"
        configs[folder].write_text(yaml.safe_dump(config))
    return configs


def write_schedule(data_yaml: Path, steps: int, batch: int) -> Path:
    from vis_embed.data import load_train_config
    from vis_embed.training.schedule_source import write_recipe_schedule

    return write_recipe_schedule(load_train_config(data_yaml), data_yaml.with_suffix(".schedule.parquet"),
                                 steps=steps, global_batch_size=batch, seed=0,
                                 sampling={"interleave_batch_size": batch, "hard_negatives": 0}, show_progress=False)


def recipe(model: str, data_yaml: Path, schedule: Path, output_dir: Path, args: argparse.Namespace,
           num_workers: int) -> dict[str, Any]:
    return {
        "model": model, "data": str(data_yaml), "schedule": str(schedule), "output_dir": str(output_dir),
        "max_steps": args.warmup + args.steps + 1,  # + the last step, not timed
        "global_batch_size": args.batch, "seed": 0,
        "optimizer": {"lr": 1e-3, "warmup_steps": 1},
        "temperature": {"init": 0.05},
        "lora": {"r": 4, "alpha": 8, "dropout": 0.0},
        "gradcache": {"chunk_size": 0},
        "model_options": {"dtype": "float32", "max_pixels": args.max_pixels, "decode": args.decode},
        "checkpoint": {"every": 0},
        "logging": {"tensorboard": False, "progress_bar": False},
        "num_workers": num_workers, "torch_threads": args.threads,
    }


def train(raw_recipe: dict[str, Any], output_dir: Path) -> dict[str, Any]:
    """One training in a fresh process; its per-step times (from train_log.jsonl) and wall time."""
    recipe_path = output_dir.with_suffix(".yaml")
    recipe_path.write_text(yaml.safe_dump(raw_recipe))
    started = time.perf_counter()
    completed = subprocess.run([sys.executable, "-m", "vis_embed", "train", str(recipe_path), "--no-progress"],
                               capture_output=True, text=True)
    run_s = time.perf_counter() - started
    if completed.returncode:
        raise SystemExit(f"training with num_workers {raw_recipe['num_workers']} failed:\n{completed.stderr[-3000:]}")
    log = [json.loads(line) for line in (output_dir / "train_log.jsonl").read_text().splitlines()]
    return {"step_times": [record["step_time_s"] for record in sorted(log, key=lambda r: r["step"])],
            "run_s": run_s, "adapter": output_dir / "final" / "adapter_model.safetensors"}


def adapter_difference(reference: Path, other: Path) -> tuple[bool, float]:
    """(bit-identical, max absolute difference) of two saved adapters."""
    import torch
    from safetensors.torch import load_file

    left, right = load_file(str(reference)), load_file(str(other))
    if set(left) != set(right) or not left:
        return False, float("inf")
    identical = all(torch.equal(left[name], right[name]) for name in left)
    worst = max(float((left[name] - right[name]).abs().max()) for name in left)
    return identical, worst


def summarise(label: str, workers: int, run: dict[str, Any], warmup: int) -> dict[str, Any]:
    timed = run["step_times"][warmup:-1]  # the last step has nothing prepared beside it
    median = statistics.median(timed)
    return {"data": label, "num_workers": workers, "median_step_s": median, "steps_per_s": 1 / median,
            "steps_timed": len(timed), "warmup_step_s": run["step_times"][:warmup], "run_s": run["run_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="checkpoint (default: a tiny random Qwen2-VL)")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2], help="num_workers values to run")
    parser.add_argument("--batch", type=int, default=8, help="global batch: 2 x batch photos per step")
    parser.add_argument("--steps", type=int, default=8, help="timed steps (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=2, help="first steps left out (worker start-up)")
    parser.add_argument("--identities", type=int, default=16, help="identities of 2 photos each")
    parser.add_argument("--max-pixels", type=int, default=200704, help="pixel budget (default: 256 tokens)")
    parser.add_argument("--decode", choices=["exact", "fast"], default="exact")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the training process")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 6 identities of small JPEGs, batch 4, 1 + 2 steps")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.batch < 1 or min(args.workers) < 0:
        parser.error("--steps and --batch must be >= 1, --warmup and --workers >= 0")
    if args.quick:
        args.batch, args.steps, args.warmup, args.identities = 4, 2, 1, 6
    args.workers = sorted({0, *args.workers})  # 0 first: the reference of the ratio and of the adapter
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        model = args.model
        if model is None:
            from vis_embed.model.files.tiny import build_tiny_checkpoint

            model = str(build_tiny_checkpoint(scratch / "tiny", arch="qwen2-vl", seed=0))
        datasets = write_photo_datasets(scratch / "data", args.identities, sizes, args.max_pixels)
        total_steps = args.warmup + args.steps + 1
        schedules = {label: write_schedule(path, total_steps, args.batch) for label, path in datasets.items()}
        rows, adapters = [], {}
        for workers in args.workers:
            run = train(recipe(model, datasets["photos"], schedules["photos"], scratch / f"run{workers}", args,
                               workers), scratch / f"run{workers}")
            rows.append(summarise("photos", workers, run, args.warmup))
            adapters[workers] = run["adapter"]
            print(f"photos, num_workers {workers}: median step {rows[-1]['median_step_s']:.3f} s", flush=True)
        copies = train(recipe(model, datasets["copies"], schedules["copies"], scratch / "copies", args, 0),
                       scratch / "copies")
        rows.append(summarise("target-size copies", 0, copies, args.warmup))
        same = {workers: adapter_difference(adapters[0], adapters[workers]) for workers in args.workers if workers}
    report(args, sizes, rows, same)
    if args.json:
        checks = {str(workers): {"identical": identical, "max_abs_diff": worst}
                  for workers, (identical, worst) in same.items()}
        args.json.write_text(json.dumps({"settings": vars(args), "rows": rows, "adapters": checks},
                                        indent=2, default=str))


def report(args: argparse.Namespace, sizes: list[tuple[int, int]], rows: list[dict[str, Any]],
           same: dict[int, tuple[bool, float]]) -> None:
    from vis_embed.model.runtime.prepare_pool import available_cores

    reference = rows[0]["median_step_s"]
    print(f"\n## Training steps vs num_workers: batch {args.batch} ({2 * args.batch} photos of "
          f"{' / '.join(f'{w}x{h}' for w, h in sizes)} per step), max_pixels {args.max_pixels}, decode {args.decode}, "
          f"{args.threads} torch thread(s), {available_cores()} cores available; median of {args.steps} steps after "
          f"{args.warmup} warm-up step(s), the last step left out\n")
    print("| data | num_workers | median step (s) | steps/s | speed-up vs photos, num_workers 0 "
          "| warm-up steps (s) | run s | adapter = num_workers 0 |")
    print("|---|---:|---:|---:|---:|---|---:|---|")
    for row in rows:
        workers = row["num_workers"]
        if row["data"] != "photos":
            check = ""
        elif workers == 0:
            check = "(reference)"
        else:
            identical, worst = same[workers]
            check = "bit-identical" if identical else f"differs (max {worst:.2e})"
        warm = ", ".join(f"{t:.2f}" for t in row["warmup_step_s"])
        print(f"| {row['data']} | {workers} | {row['median_step_s']:.3f} | {row['steps_per_s']:.2f} | "
              f"{reference / row['median_step_s']:.2f}x | {warm} | {row['run_s']:.1f} | {check} |")
    share = 1 - rows[-1]["median_step_s"] / reference
    print(f"\nPreparation share of a num_workers 0 step (1 - copies / photos): {share:.0%}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # inherited by the training processes
    main()
