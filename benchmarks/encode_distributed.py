"""`vis-embed encode` on 2 processes (torchrun, gloo on CPU / NCCL on GPUs) vs 1 process.

Correctness first: both runs encode the same JSONL (a deterministic mix of text-only,
image-only and image+text items) and the script checks that the vectors agree (cos >=
0.99999) and the ids files are identical.  Then the wall-clock times of the two commands,
model loading included (each rank loads its own copy).  On CPU the thread budget is shared
fairly: one process gets ``--threads`` OpenMP threads, each of the two ranks half of them, so
a speed-up measures the sharding, not extra cores.  On a machine with fewer cores than
``--threads`` (or busy with other jobs) expect no speed-up: the point there is correctness.

    .venv/bin/python benchmarks/encode_distributed.py                       # tiny model, 96 items
    .venv/bin/python benchmarks/encode_distributed.py --preset qwen2-vl-2b-shallow --items 256 --threads 8
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

TEXTS = ["a red car", "the same person as in the photo, seen from the side at a wedding",
         "a small blue bicycle leaning on a wall next to the river bank at sunset"]
SIZES = [(224, 224), (320, 240), (160, 320), (448, 336)]


def write_items(folder: Path, count: int, seed: int = 0) -> Path:
    """``count`` items (text / image / image+text in turn) with their PNGs under ``folder``."""
    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for index in range(count):
        width, height = SIZES[int(rng.integers(len(SIZES)))]
        row: dict[str, str] = {"id": f"item-{index}"}
        if index % 3:
            name = f"images/{index:05d}.png"
            Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(folder / name)
            row["image"] = name
        if index % 3 != 1:
            row["text"] = TEXTS[int(rng.integers(len(TEXTS)))]
        rows.append(row)
    path = folder / "items.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def timed(command: list[str], threads: int) -> float:
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads), "DS_ACCELERATOR": "cpu"}
    start = time.perf_counter()
    proc = subprocess.run(command, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{proc.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=96)
    parser.add_argument("--preset", default="tiny", help="tiny-model preset (tiny | qwen2-vl-2b-shallow)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for the 1-process run (split over ranks)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (under torchrun each rank takes cuda:LOCAL_RANK)")
    args = parser.parse_args()

    bin_dir = Path(sys.executable).parent
    vis_embed = str(bin_dir / "vis-embed")
    torchrun = str(bin_dir / "torchrun") if (bin_dir / "torchrun").exists() else shutil.which("torchrun")
    with tempfile.TemporaryDirectory(prefix="encode-distributed-") as tmp:
        root = Path(tmp)
        subprocess.run([vis_embed, "tiny-model", str(root / "model"), "--preset", args.preset],
                       check=True, capture_output=True)
        items = write_items(root / "data", args.items)
        common = ["--model", str(root / "model"), "--input", str(items), "--batch-size", str(args.batch_size),
                  "--no-progress", "--instruction", "Represent it.", "--device", args.device]
        one = timed([vis_embed, "encode", *common, "--output", str(root / "one.npy")], args.threads)
        two = timed([torchrun, "--nproc-per-node", "2", "--master-port", str(free_port()), "-m", "vis_embed",
                     "encode", *common, "--output", str(root / "two.npy")], max(1, args.threads // 2))
        single, shared = np.load(root / "one.npy"), np.load(root / "two.npy")
        same_ids = (root / "one.ids.json").read_text() == (root / "two.ids.json").read_text()
        min_cos = float(np.min(np.sum(single * shared, axis=1)))
    print(json.dumps({"items": args.items, "preset": args.preset, "threads": args.threads, "device": args.device,
                      "one_process_s": round(one, 2), "two_processes_s": round(two, 2),
                      "speed_up": round(one / two, 2), "min_cos": min_cos, "same_ids": same_ids}, indent=1))
    if not (same_ids and min_cos >= 0.99999):
        sys.exit("2-process vectors or ids differ from 1 process")


if __name__ == "__main__":
    main()
