"""Item preparation throughput: photos/s per core, both decode modes, 1..N workers, the floor,
and how many cores keep a GPU fed (issue 28).

What is timed is ``vis-embed encode --dry-run`` (:func:`vis_embed.model.runtime.dry_run.dry_run_jsonl`):
every item read, validated, decoded, resized and tokenised exactly as a real encode does, in
``--workers`` processes, without the model.  Inputs:

* the **photo mix**: JPEGs of 4032x3024, 3000x2000, 1600x1200 and 1024x768 (in turn), with
  smooth colour fields and grain so that they compress to realistic JPEG sizes;
* the **target-size copies**: the same pictures stored at the size the processor resizes
  them to.  Preparing them costs the same fixed work (start-up of the worker processes,
  reading, prompts, tokenising, the processor's normalisation) minus the big decode and the
  downscale, so ``photos/s = n / (T_photos - T_copies)`` excludes start-up (the issue's rule);
  the raw times are printed too.  A first untimed run starts the process's forkserver (once
  per process: a fresh interpreter importing torch and the processor);
* the **floor**: PIL decode (``Image.open(...).convert("RGB")``) + the model's HF image
  processor on each photo, in this process on one torch thread: what preparing a photo
  costs without any of our code.

The GPU-feed table divides a GPU's image rate by the measured per-core rate.  GPU rates are
*estimates from FLOPs* unless given with ``--gpu-rate NAME=IMAGES_PER_S`` (e.g. measured on a
lent GPU): forward FLOPs per image = 2 x (vision-tower parameters x 1024 patches + decoder
parameters x (256 visual + ~40 text tokens)) for a 256-token image (attention ignored), at
``--mfu`` (default 0.4) of the H100 SXM's dense BF16 peak, 989 TFLOP/s (NVIDIA H100 Tensor Core
GPU datasheet).  Parameter counts: Qwen2-VL-2B 1.5B decoder + 0.675B ViT, Qwen2.5-VL-3B 3.1B +
0.67B, Qwen2.5-VL-7B 7.6B + 0.67B (the Qwen2-VL and Qwen2.5-VL model cards / technical
reports).  The training row: one step of recipes/visme_qwen2vl_2b.yaml on 8 GPUs (1024 members
per side / 8 = 128 queries + 128 candidates per rank), ~4x forward FLOPs per item (GradCache:
forward without graph, forward again with it, backward ~2x).

    .venv/bin/python benchmarks/prepare_throughput.py --quick      # smoke run (seconds)
    .venv/bin/python benchmarks/prepare_throughput.py              # 48 photos, 1..cores workers
    taskset -c 0 .venv/bin/python benchmarks/prepare_throughput.py --workers 1   # the one-core criteria
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

PHOTO_SIZES = [(4032, 3024), (3000, 2000), (1600, 1200), (1024, 768)]
QUICK_SIZES = [(3000, 2000), (1600, 1200)]
H100_BF16_DENSE_FLOPS = 989e12  # NVIDIA H100 SXM datasheet, dense BF16 tensor-core peak
# (vision-tower parameters, decoder parameters): Qwen2-VL / Qwen2.5-VL model cards
MODELS = {"Qwen2-VL-2B": (0.675e9, 1.54e9), "Qwen2.5-VL-3B": (0.67e9, 3.09e9), "Qwen2.5-VL-7B": (0.67e9, 7.6e9)}
PATCHES_AT_256_TOKENS = 1024  # 256 merged tokens = 1024 patches of 14x14 through the ViT
TEXT_TOKENS = 40  # prompt template + instruction
TRAIN_ITEMS_PER_RANK = 2 * 1024 // 8  # recipes/visme_qwen2vl_2b.yaml on 8 GPUs: queries + candidates
TRAIN_FLOPS_PER_FORWARD = 4  # GradCache: forward (no graph) + forward with graph + backward (~2x)


def photo(width: int, height: int, seed: int) -> Image.Image:
    """Smooth colour fields plus grain: compresses like a photo (not like flat colour or pure noise)."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 1, height, dtype=np.float32)[:, None]
    x = np.linspace(0, 1, width, dtype=np.float32)[None, :]
    channels = []
    for channel in range(3):
        fx, fy, phase = rng.uniform(2, 9), rng.uniform(2, 9), rng.uniform(0, 6.3)
        channels.append(127 + 90 * np.sin(fx * 6.3 * x + phase) * np.cos(fy * 6.3 * y + channel))
    image = np.stack(channels, axis=-1)
    image += rng.normal(0, 14, image.shape).astype(np.float32)
    return Image.fromarray(np.clip(image, 0, 255).astype(np.uint8))


@contextmanager
def model_and_photo_mix(model: str | None, count: int, quick: bool,
                        max_pixels: int) -> Iterator[tuple[str, Path, Path]]:
    """``(model, photos.jsonl, copies.jsonl)`` in a scratch folder removed afterwards: ``model``
    or a tiny random checkpoint built there, and :func:`write_photo_mix` of ``count`` photos."""
    with tempfile.TemporaryDirectory() as scratch:
        if model is None:
            from vis_embed.model.files.tiny import build_tiny_checkpoint

            model = str(build_tiny_checkpoint(Path(scratch) / "tiny"))
        photos, copies = write_photo_mix(Path(scratch) / "mix", count, QUICK_SIZES if quick else PHOTO_SIZES,
                                         max_pixels)
        yield model, photos, copies


def write_photo_mix(root: Path, count: int, sizes: list[tuple[int, int]], max_pixels: int) -> tuple[Path, Path]:
    """``photos.jsonl`` (the mix) and ``copies.jsonl`` (each photo at its processor size)."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    root.mkdir(parents=True, exist_ok=True)
    photos, copies = [], []
    for number in range(count):
        width, height = sizes[number % len(sizes)]
        picture = photo(width, height, seed=number)
        picture.save(root / f"photo{number}.jpg", quality=90)
        target_height, target_width = smart_resize(height, width, 28, 3136, max_pixels)  # the processor's size
        picture.resize((target_width, target_height), Image.BICUBIC).save(
            root / f"copy{number}.jpg", quality=90)
        photos.append({"image": f"photo{number}.jpg"})
        copies.append({"image": f"copy{number}.jpg"})
    for name, rows in (("photos.jsonl", photos), ("copies.jsonl", copies)):
        (root / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return root / "photos.jsonl", root / "copies.jsonl"


def dry_run_seconds(model: str, items: Path, workers: int, decode: str, max_pixels: int) -> float:
    from vis_embed.model.runtime.dry_run import dry_run_jsonl

    started = time.perf_counter()
    dry_run_jsonl(model, items, workers=workers, decode=decode, max_pixels=max_pixels, batch_size=16)
    return time.perf_counter() - started


def estimate_seconds(model: str, items: Path, max_pixels: int) -> float:
    """The length estimate encode runs before preparing (header sizes + prompt tokens): the part of
    an item's work done twice (validated, opened and tokenised again when it is prepared)."""
    from vis_embed.model.runtime.dry_run import ProcessorOnlyModel
    from vis_embed.model.embedding_config import EmbeddingConfig
    from vis_embed.model.runtime.encode_file import read_items
    from vis_embed.model.inputs.lengths import estimated_lengths

    stand_in = ProcessorOnlyModel.from_pretrained(model, EmbeddingConfig(min_pixels=3136, max_pixels=max_pixels))
    rows = read_items(items, "raise")[0]
    started = time.perf_counter()
    estimated_lengths(stand_in, rows, None, items.parent)
    return time.perf_counter() - started


def floor_seconds(model: str, items: Path, max_pixels: int) -> float:
    """PIL decode + the model's HF image processor alone, one torch thread, this process."""
    import torch
    from transformers import AutoProcessor

    image_processor = AutoProcessor.from_pretrained(model).image_processor
    paths = [items.parent / json.loads(line)["image"] for line in items.read_text().splitlines()]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        started = time.perf_counter()
        for path in paths:
            with Image.open(path) as image:
                image_processor(images=[image.convert("RGB")], size={"shortest_edge": 3136, "longest_edge": max_pixels},
                                return_tensors="pt")
        return time.perf_counter() - started
    finally:
        torch.set_num_threads(threads)


def gpu_rates(mfu: float, given: dict[str, float]) -> dict[str, tuple[float, str]]:
    rates = {}
    for name, (vision, decoder) in MODELS.items():
        if name in given:
            rates[name] = (given[name], "given (--gpu-rate)")
            continue
        flops = 2 * (vision * PATCHES_AT_256_TOKENS + decoder * (256 + TEXT_TOKENS))
        rates[name] = (H100_BF16_DENSE_FLOPS * mfu / flops, f"estimate: FLOPs at {mfu:.0%} of 989 TFLOP/s")
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="checkpoint whose processor is used (default: a tiny one)")
    parser.add_argument("--photos", type=int, default=48)
    parser.add_argument("--workers", type=int, default=None, help="largest worker count (default: the cores)")
    parser.add_argument("--max-pixels", type=int, default=200704, help="pixel budget (default: 256 tokens)")
    parser.add_argument("--mfu", type=float, default=0.4, help="GPU model-FLOP utilisation for the estimates")
    parser.add_argument("--gpu-rate", action="append", default=[], metavar="NAME=IMAGES_PER_S",
                        help=f"a measured GPU rate for one of {', '.join(MODELS)} (replaces the estimate)")
    parser.add_argument("--train-step-gpu-s", type=float, default=None, metavar="SECONDS",
                        help="measured GPU seconds of one training step per rank of the 2B recipe "
                             "(benchmarks/gpu_encode.py; replaces the FLOPs estimate)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 small photos, 1 worker")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--repeats", type=int, default=3,
                        help="time every measurement (floor and runs) this many times and keep the fastest "
                             "(timeit's rule: the slower ones measure the machine's other work, not this)")
    args = parser.parse_args()
    from vis_embed.model.runtime.prepare_pool import available_cores

    cores = available_cores()
    top = 1 if args.quick else (args.workers or cores)
    count = 4 if args.quick else args.photos
    with model_and_photo_mix(args.model, count, args.quick, args.max_pixels) as (model, photos, copies):
        repeats = max(1, args.repeats)
        floor = min(floor_seconds(model, photos, args.max_pixels) for _ in range(repeats))
        estimate = min(estimate_seconds(model, photos, args.max_pixels) for _ in range(repeats))
        # The first pool of a process starts the forkserver (a fresh interpreter importing torch and
        # the processor): once per process, not per run, so it stays out of every timed run.
        dry_run_seconds(model, copies, 1, "exact", args.max_pixels)
        rows: list[dict[str, Any]] = []
        for decode in ("exact", "fast"):
            for workers in range(1, top + 1):
                photo_s = min(dry_run_seconds(model, photos, workers, decode, args.max_pixels) for _ in range(repeats))
                copy_s = min(dry_run_seconds(model, copies, workers, decode, args.max_pixels) for _ in range(repeats))
                net = max(photo_s - copy_s, 1e-9)
                rows.append({"decode": decode, "workers": workers, "photos_s": photo_s, "copies_s": copy_s,
                             "photos_per_s": count / net, "per_core": count / net / workers,
                             "vs_floor": net / floor})
    sizes = ", ".join(f"{w}x{h}" for w, h in (QUICK_SIZES if args.quick else PHOTO_SIZES))
    print(f"## Item preparation, {count} photos ({sizes}), "
          f"max_pixels {args.max_pixels}, {cores} cores available, fastest of {repeats} per figure\n")
    print(f"Floor (PIL decode + HF image processor, 1 thread): {floor:.2f} s = {count / floor:.1f} photos/s")
    print(f"Length estimate (the work an item repeats: validation, header, prompt tokens): {estimate:.3f} s = "
          f"{1e3 * estimate / count:.2f} ms per photo\n")
    print("| decode | workers | photos s | copies s | photos/s (start-up excluded) | per core | time / floor |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['decode']} | {row['workers']} | {row['photos_s']:.2f} | {row['copies_s']:.2f} | "
              f"{row['photos_per_s']:.1f} | {row['per_core']:.1f} | {row['vs_floor']:.2f} |")
    one = {row["decode"]: row for row in rows if row["workers"] == 1}
    print(f"\nCriteria (issue 28): 1 worker, fast {one['fast']['vs_floor']:.2f}x the floor (<= 0.35), "
          f"exact {one['exact']['vs_floor']:.2f}x (<= 1.1)", end="")
    two = {row["decode"]: row for row in rows if row["workers"] == 2}
    if two:
        print(f"; 2 workers vs 1 (exact): {two['exact']['photos_per_s'] / one['exact']['photos_per_s']:.2f}x (>= 1.7)")
    else:
        print()
    given = dict((name, float(rate)) for name, rate in (entry.split("=", 1) for entry in args.gpu_rate))
    rates = gpu_rates(args.mfu, given)
    print("\n## GPU feed: cores of preparation (at this machine's rate per core) that keep one GPU busy "
          "(256-token photos)\n")
    print("| model | GPU images/s | source | cores, exact | cores, fast |")
    print("|---|---:|---|---:|---:|")
    for name, (rate, source) in rates.items():
        print(f"| {name} | {rate:.0f} | {source} | {rate / one['exact']['per_core']:.1f} | "
              f"{rate / one['fast']['per_core']:.1f} |")
    rate_2b = rates["Qwen2-VL-2B"][0]
    step_s = args.train_step_gpu_s or TRAIN_ITEMS_PER_RANK * TRAIN_FLOPS_PER_FORWARD / rate_2b
    step_source = "given (--train-step-gpu-s)" if args.train_step_gpu_s else "estimate"
    print(f"\nTraining step, recipes/visme_qwen2vl_2b.yaml on 8 GPUs: {TRAIN_ITEMS_PER_RANK} items per rank, "
          f"{step_s:.1f} s of GPU per step ({step_source}); preparation per rank: "
          f"{TRAIN_ITEMS_PER_RANK / one['exact']['per_core']:.1f} core-s exact "
          f"({math.ceil(TRAIN_ITEMS_PER_RANK / one['exact']['per_core'] / step_s)} cores to keep up), "
          f"{TRAIN_ITEMS_PER_RANK / one['fast']['per_core']:.1f} core-s fast "
          f"({math.ceil(TRAIN_ITEMS_PER_RANK / one['fast']['per_core'] / step_s)} cores)")
    if args.json:
        args.json.write_text(json.dumps({"floor_s": floor, "estimate_s": estimate, "photos": count, "rows": rows,
                                         "gpu_rates": {k: v[0] for k, v in rates.items()}}, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    main()
