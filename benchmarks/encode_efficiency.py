"""Encode efficiency: achieved FLOP/s of ``Embedder.encode`` against the same run's GEMM peak.

Model: a randomly initialised Qwen2-VL with Qwen2-VL-2B's vocabulary (151,936) and widths
(hidden 1,536, vision 1,280) but few layers (``--text-layers``, ``--vision-depth``; 4 each by
default); inputs: the MMEB-like mix of benchmarks/encode_throughput.py (text-only, image-only
and image+text items of several image sizes and text lengths).

- **useful FLOPs**: the matrix-product FLOPs of encoding each item *alone* (no padding),
  counted once with ``torch.utils.flop_counter.FlopCounterMode`` (linear layers, attention
  products and convolutions; element-wise work is not counted, as in every MFU figure);
- **executed FLOPs**: the same count for the batches ``encode`` really runs (padding included);
- **time**: wall time of ``Embedder.encode`` over all items (pre-processing included), best of
  ``--repeats``;
- **GEMM peak**: ``torch.mm`` of two ``--gemm-size`` square matrices in the encode dtype, best of
  ``--gemm-repeats``, measured in the same process with the same thread count.

The ratio ``useful FLOP/s / GEMM peak`` is what issue 20 targets (CPU: >= 0.85; GPU: >= 0.5).
On CPU the model runs in float32 (the package default); ``--device cuda`` runs bf16 with
flash-attention 2 where installed, else sdpa.

    .venv/bin/python benchmarks/encode_efficiency.py                       # CPU, all cores
    .venv/bin/python benchmarks/encode_efficiency.py --device cuda --items 96 --batch-size 32
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode_throughput import INSTRUCTION, make_items  # noqa: E402

from vis_embed.model.embedder import Embedder  # noqa: E402
from vis_embed.model.embedding_model import EmbeddingModel, default_attn_implementation  # noqa: E402
from vis_embed.model.tiny import build_random_model  # noqa: E402


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def gemm_peak(size: int, dtype: torch.dtype, device: torch.device, repeats: int) -> float:
    """Best FLOP/s of ``torch.mm`` on two ``size`` x ``size`` matrices."""
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, dtype=dtype, device=device, generator=generator)
    b = torch.randn(size, size, dtype=dtype, device=device, generator=generator)
    out = torch.empty(size, size, dtype=dtype, device=device)
    torch.mm(a, b, out=out)  # warm-up: thread pool, kernel selection
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        torch.mm(a, b, out=out)
        synchronize(device)
        best = min(best, time.perf_counter() - started)
    return 2 * size ** 3 / best


def count_flops(function: Any) -> int:
    with FlopCounterMode(display=False) as counter:
        function()
    return int(counter.get_total_flops())


def build_embedder(args: argparse.Namespace, device: torch.device) -> Embedder:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    backbone, processor = build_random_model("qwen2-vl", preset="qwen2-vl-2b-shallow", num_layers=args.text_layers,
                                             vision_depth=args.vision_depth, dtype=dtype)
    attention = default_attn_implementation(device)
    backbone.set_attn_implementation(attention)
    backbone.to(device)
    return Embedder(EmbeddingModel(backbone, processor, max_pixels=args.max_pixels))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--items", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--text-layers", type=int, default=4, help="decoder layers (2B has 28)")
    parser.add_argument("--vision-depth", type=int, default=4, help="vision blocks (2B has 32)")
    parser.add_argument("--max-pixels", type=int, default=224 * 224, help="pixel budget per image")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=3, help="timed encodes; the best counts")
    parser.add_argument("--gemm-size", type=int, default=None, help="GEMM side (default: 2048 CPU, 8192 GPU)")
    parser.add_argument("--gemm-repeats", type=int, default=5)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    embedder = build_embedder(args, device)
    model = embedder.model
    items = make_items(args.items)
    print(f"model: Qwen2-VL random, 2B widths, {args.text_layers} decoder layers, vision depth {args.vision_depth}, "
          f"{model.dtype}, {model.base_model().config._attn_implementation} attention, device {device}, "
          f"{torch.get_num_threads()} CPU threads; load average {os.getloadavg()[0]:.2f}")

    def encode() -> None:
        embedder.encode(items, instruction=INSTRUCTION, batch_size=args.batch_size)

    encode()  # warm-up (and the vectors' first computation)
    executed = count_flops(encode)
    with torch.inference_mode():
        useful = count_flops(lambda: [model.embed([item], INSTRUCTION) for item in items])
    best = float("inf")
    for _ in range(args.repeats):
        synchronize(device)
        started = time.perf_counter()
        encode()
        synchronize(device)
        best = min(best, time.perf_counter() - started)
    peak = gemm_peak(args.gemm_size or (8192 if device.type == "cuda" else 2048), model.dtype, device,
                     args.gemm_repeats)
    achieved = useful / best
    print(f"items: {len(items)}, batch size {args.batch_size}; encode {best:.3f} s (best of {args.repeats}), "
          f"{len(items) / best:.2f} items/s")
    print(f"FLOPs: useful {useful / 1e9:.2f} G, executed {executed / 1e9:.2f} G "
          f"(padding and batching overhead {executed / useful - 1:+.1%})")
    print(f"achieved: {achieved / 1e9:.1f} GFLOP/s useful ({executed / best / 1e9:.1f} executed)")
    print(f"GEMM peak ({model.dtype}, torch.mm): {peak / 1e9:.1f} GFLOP/s")
    print(f"ratio (useful FLOP/s / GEMM peak): {achieved / peak:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
