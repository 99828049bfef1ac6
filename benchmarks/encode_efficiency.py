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
flash-attention 2 where installed, else sdpa.  ``--compile`` times ``Embedder.compile()``
(fused element-wise kernels; the compilation, reported apart, is not in the timed encodes).

What bounds the ratio is printed from one profiled encode: the time in matrix products and
their FLOP/s against the peak, the time in attention kernels, and the rest (element-wise
kernels, copies, Python).  The ratio is about (useful / executed FLOPs) x (share of time in
matrix products) x (their efficiency against the peak).

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

from vis_embed.model.runtime.embedder import Embedder  # noqa: E402
from vis_embed.model.network.attention import attention_name, resolve_attn_implementation, set_attention  # noqa: E402
from vis_embed.model.network.embedding_model import EmbeddingModel  # noqa: E402
from vis_embed.model.files.tiny import build_random_model  # noqa: E402


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


# Kernels of matrix products (eager aten, oneDNN and Inductor's extern calls) and of attention.
MATRIX_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::convolution",
              "mkldnn::_linear_pointwise", "mkl::_mkl_linear")
MATRIX_FLOP_OPS = ("mm", "addmm", "bmm", "baddbmm", "convolution")


def count_matrix_flops(function: Any) -> int:
    """FLOPs of the matrix products alone (attention products left out)."""
    with FlopCounterMode(display=False) as counter:
        function()
    return int(sum(flops for op, flops in counter.get_flop_counts()["Global"].items()
                   if str(op).split(".")[1] in MATRIX_FLOP_OPS))  # "aten.mm" or "aten.mm.default"


def print_breakdown(function: Any, matrix_flops: int, peak: float, device: torch.device) -> None:
    """One profiled run: time in matrix products (and their FLOP/s vs the peak), attention, rest."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiler:
        function()
    seconds = {"matrix": 0.0, "attention": 0.0, "other": 0.0}
    if device.type == "cuda":
        events, attribute = list(profiler.events()), "self_device_time_total"
    else:
        # The model's thread only: the prefetch worker's pre-processing overlaps it.
        by_thread: dict[int, float] = {}
        for event in profiler.events():
            if event.key in MATRIX_OPS:
                by_thread[event.thread] = by_thread.get(event.thread, 0.0) + event.self_cpu_time_total
        model_thread = max(by_thread, key=by_thread.__getitem__)
        events = [event for event in profiler.events() if event.thread == model_thread]
        attribute = "self_cpu_time_total"
    for event in events:
        kind = "matrix" if event.key in MATRIX_OPS else "attention" if "attention" in event.key else "other"
        seconds[kind] += getattr(event, attribute) / 1e6
    total = sum(seconds.values())
    print(f"profiled encode: {total:.2f} s of operator time on the model's thread; "
          f"matrix products {seconds['matrix']:.2f} s "
          f"({seconds['matrix'] / total:.0%}) at {matrix_flops / seconds['matrix'] / 1e9:.1f} GFLOP/s "
          f"= {matrix_flops / seconds['matrix'] / peak:.2f} of the GEMM peak; attention "
          f"{seconds['attention']:.2f} s ({seconds['attention'] / total:.0%}); element-wise, copies and the "
          f"rest {seconds['other']:.2f} s ({seconds['other'] / total:.0%})")


def build_embedder(args: argparse.Namespace, device: torch.device) -> Embedder:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    backbone, processor = build_random_model("qwen2-vl", preset="qwen2-vl-2b-shallow", num_layers=args.text_layers,
                                             vision_depth=args.vision_depth, dtype=dtype, device=device)
    set_attention(backbone, resolve_attn_implementation(args.attn_implementation, device))
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
    parser.add_argument("--compile", action="store_true", help="time Embedder.compile()'s fused blocks")
    parser.add_argument("--attn-implementation", default=None, help="sdpa: transformers' own path; default: ours")
    parser.add_argument("--no-breakdown", action="store_true", help="skip the profiled encode")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    embedder = build_embedder(args, device)
    model = embedder.model
    items = make_items(args.items)
    print(f"model: Qwen2-VL random, 2B widths, {args.text_layers} decoder layers, vision depth {args.vision_depth}, "
          f"{model.dtype}, {attention_name(model.backbone)} attention, device {device}, "
          f"{torch.get_num_threads()} CPU threads; load average {os.getloadavg()[0]:.2f}")

    def encode() -> None:
        embedder.encode(items, instruction=INSTRUCTION, batch_size=args.batch_size)

    encode()  # warm-up (and the vectors' first computation)
    if args.compile:
        started = time.perf_counter()
        embedder.compile()
        encode()
        encode()  # graph variants not met in the first pass (e.g. a batch without padding)
        print(f"compile: two encodes with compilation took {time.perf_counter() - started:.1f} s")
    executed, matrix_flops = count_flops(encode), count_matrix_flops(encode)
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
    if not args.no_breakdown:
        print_breakdown(encode, matrix_flops, peak, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
