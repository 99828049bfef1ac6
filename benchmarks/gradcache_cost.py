"""GradCache cost: step time and peak memory vs global batch size, with and without GradCache.

Each configuration runs in a fresh subprocess so peak memory (CUDA max allocated on GPU,
max RSS on CPU) belongs to that configuration alone.  Members mix short and long texts and
several image sizes, so padding matters; GradCache sorts members by length before chunking
and the script reports the padded-token fraction of its chunks.

Items are prepared once, outside the timed step, so this script does not show what the
recipe's ``num_workers`` buys: ``benchmarks/train_step_workers.py`` times whole trainer steps
(preparation included) on photo-size JPEGs with ``num_workers`` 0, 1 and 2.

    .venv/bin/python benchmarks/gradcache_cost.py                      # tiny random Qwen2-VL, CPU
    .venv/bin/python benchmarks/gradcache_cost.py --model Qwen/Qwen2-VL-2B-Instruct \\
        --batch-sizes 64 128 256 1024 --chunk-size 32 --dtype bfloat16  # on a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ("red blue small large round square striped dotted object person car bird chair lamp "
         "bottle cup shoe bag tree house on the left right near far behind").split()


def make_items(count: int, seed: int, image_dir: Path, base_side: int) -> list[dict]:
    from PIL import Image

    rng = random.Random(seed)
    items = []
    for index in range(count):
        side = base_side * rng.choice([1, 1, 2])  # 1x or 2x side: 4x the visual tokens
        path = image_dir / f"bench_{seed}_{index}.png"
        if not path.exists():
            Image.new("RGB", (side, side), tuple(rng.randrange(256) for _ in range(3))).save(path)
        text = " ".join(rng.choice(WORDS) for _ in range(rng.choice([2, 4, 24])))
        items.append({"image": str(path), "text": text})
    return items


def run_one(args: argparse.Namespace) -> dict:
    import torch

    from vis_embed.model.network.embedding_model import EmbeddingModel
    from vis_embed.training.backends import TorchBackend
    from vis_embed.training.gradcache import contrastive_step
    from vis_embed.training.recipe import GradCacheConfig, OptimizerConfig
    from vis_embed.training.losses import Temperature, info_nce_loss
    from vis_embed.training.lr_schedule import lr_lambda

    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    model = EmbeddingModel.from_pretrained(args.model, device=device, dtype=dtype)
    model.add_lora(r=16, alpha=32, dropout=0.05)
    if args.gradient_checkpointing:
        model.enable_gradient_checkpointing()
    model.train()
    tau = Temperature(0.02)
    backend = TorchBackend(model, optimizer=OptimizerConfig(lr=1e-4, max_grad_norm=1.0), lr_schedule=lr_lambda(0, 100))
    image_dir = Path(args.image_dir)
    queries = model.prepare(make_items(args.batch_size, 1, image_dir, args.image_side), instruction="Find it.")
    candidates = model.prepare(make_items(args.batch_size, 2, image_dir, args.image_side), instruction=None)
    q_len = [p.length for p in queries]
    c_len = [p.length for p in candidates]
    times, fractions = [], []
    for repeat in range(args.warmup + args.repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        result = contrastive_step(backend, model.collate, queries, candidates,
                                  lambda q, c: info_nce_loss(q, c, tau()), query_lengths=q_len,
                                  candidate_lengths=c_len, device=device,
                                  gradcache=GradCacheConfig(chunk_size=args.chunk, max_padding=args.max_padding))
        backend.step()
        if device == "cuda":
            torch.cuda.synchronize()
        if repeat >= args.warmup:
            times.append(time.perf_counter() - started)
            fractions.extend(result.padded_fraction)
    if device == "cuda":
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    else:
        import resource

        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"batch_size": args.batch_size, "chunk_size": args.chunk, "step_s": statistics.median(times),
            "samples_per_s": args.batch_size / statistics.median(times), "peak_mb": peak_mb,
            "padded_fraction_max": max(fractions), "padded_fraction_mean": statistics.mean(fractions)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint (default: a tiny random Qwen2-VL)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--chunk-size", type=int, default=8)
    parser.add_argument("--plain-max-batch", type=int, default=1 << 30,
                        help="skip the plain (no GradCache) run above this batch size (it would not fit)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--image-side", type=int, default=56)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--max-padding", type=float, default=0.1, help="GradCache chunking padding budget")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument("--_one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--_batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--_chunk", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--_image_dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._one:
        args.batch_size, args.chunk, args.image_dir = args._batch, args._chunk, args._image_dir
        print("RESULT " + json.dumps(run_one(args)), flush=True)
        return 0

    with tempfile.TemporaryDirectory() as scratch:
        model = args.model
        if model is None:
            from vis_embed.model.files.tiny import build_tiny_checkpoint

            model = str(build_tiny_checkpoint(Path(scratch) / "tiny", arch="qwen2-vl", seed=0))
        rows = []
        for batch_size in args.batch_sizes:
            for chunk in (0, args.chunk_size):
                if chunk == 0 and batch_size > args.plain_max_batch:
                    continue
                command = [sys.executable, __file__, "--_one", "--_batch", str(batch_size), "--_chunk", str(chunk),
                           "--_image_dir", scratch, "--model", model, "--dtype", args.dtype,
                           "--image-side", str(args.image_side), "--repeats", str(args.repeats),
                           "--warmup", str(args.warmup), "--max-padding", str(args.max_padding)] \
            + (["--threads", str(args.threads)] if args.threads else []) + (["--gradient-checkpointing"]
                                                            if args.gradient_checkpointing else [])
                proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ})
                line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
                if proc.returncode or not line:
                    print(f"batch {batch_size} chunk {chunk}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                    continue
                rows.append(json.loads(line[-1][7:]))
                row = rows[-1]
                print(f"B={row['batch_size']:5d} {'GradCache c=' + str(chunk) if chunk else 'plain':>14}  "
                      f"step {row['step_s']:.3f}s  {row['samples_per_s']:.1f} samples/s  "
                      f"peak {row['peak_mb']:.0f} MB  padded max {row['padded_fraction_max']:.1%} "
                      f"mean {row['padded_fraction_mean']:.1%}", flush=True)
    print("\n| global batch | mode | step (s) | GradCache / plain | peak memory (MB) "
          "| padded tokens per chunk (max / mean) |")
    print("|---|---|---|---|---|---|")
    plain = {r["batch_size"]: r for r in rows if r["chunk_size"] == 0}
    for row in rows:
        ratio = ""
        if row["chunk_size"] and row["batch_size"] in plain:
            ratio = f"{row['step_s'] / plain[row['batch_size']]['step_s']:.2f}x"
        mode = f"GradCache, chunk {row['chunk_size']}" if row["chunk_size"] else "plain"
        print(f"| {row['batch_size']} | {mode} | {row['step_s']:.3f} | {ratio} | {row['peak_mb']:.0f} | "
              f"{row['padded_fraction_max']:.1%} / {row['padded_fraction_mean']:.1%} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
