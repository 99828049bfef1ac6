"""Where one call's time goes, by kind of kernel (issue 45: what stands between a forward and the peak).
Used by fused_rate.py (the fused forward of each model gpu_encode.py measures); not a script itself.

:func:`kernel_breakdown` runs ``run()`` once under torch's profiler (after one warm-up call) and
sums the time of what ran, by category (:data:`CATEGORIES`: matrix products, attention, Inductor's
fused kernels, elementwise, norms, reductions, copies, other), with the kernels that took longest:

- on CUDA, the GPU's kernels and copies (Kineto's device events) -- and the call's wall time, the
  time at least one kernel ran (the union of their intervals) and the rest, ``idle_share``: the
  GPU waiting on the host (launches, host reads) -- the issue's "~100 ms of 579 with no kernel";
- on a CPU, the operators' own (self, children excluded) times: a CPU runs them one after another, so there is no
  idle to report (``idle_share`` None), and the split says what a CPU spends, not what a GPU would.

Which kernel is which is read from its name (:func:`category_of`, first matching rule): a kernel
library's naming is the only label a profile carries.  torch.profiler's own tables
(``key_averages``) sum by name but neither group the names nor measure the device's idle time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

from encode_efficiency import synchronize

# (category, name fragments), the first match wins: attention before matrix (flash kernels carry
# "cutlass" in their template names), Inductor's GEMM templates (triton_tem_*) before its fused
# pointwise / reduction kernels (triton_poi_*, triton_red_*, triton_per_*).
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("flash", "fmha", "attention", "varlen", "mha_", "_attn")),
    ("matrix", ("gemm", "nvjet", "cutlass", "cublas", "xmma", "matmul", "triton_tem", "aten::mm", "aten::addmm",
                "aten::bmm", "aten::_weight_int", "sm90_", "sm80_")),
    ("fused (Inductor)", ("triton_",)),
    ("copy", ("memcpy", "memset", "copy", "cat", "aten::contiguous", "aten::clone", "aten::index")),
    ("norm", ("norm", "rms")),
    ("reduction", ("reduce", "softmax", "aten::sum", "aten::mean", "aten::max", "aten::min", "cumsum")),
    ("elementwise", ("elementwise", "vectorized", "aten::mul", "aten::add", "aten::sub", "aten::div",
                     "aten::sigmoid", "aten::gelu", "aten::silu", "aten::pow", "aten::rsqrt", "aten::neg",
                     "aten::exp", "aten::clamp", "aten::where", "aten::fill", "aten::cos", "aten::sin")),
)
OTHER = "other"
TOP_KERNELS = 12  # the longest kernels (total over their calls) listed by name


def category_of(name: str) -> str:
    """The category of a kernel or operator ``name`` (:data:`CATEGORIES`; else ``"other"``)."""
    lowered = name.lower()
    for category, fragments in CATEGORIES:
        if any(fragment in lowered for fragment in fragments):
            return category
    return OTHER


def covered_us(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals: the time something ran (overlapping
    kernels on two streams count once)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def _timed_pieces(profiler: profile, device: torch.device) -> list[tuple[str, float, float, float]]:
    """``(name, start_us, end_us, own_us)`` of what ran: the device's kernels and copies on CUDA,
    every operator's self time on a CPU (an ``addmm``'s GEMM is its own time, its children's
    copies theirs)."""
    if device.type == "cuda":
        # The raw Kineto events: ``profiler.events()`` keeps only the host's side and files each
        # kernel's duration under the operator that launched it, without its start and end.
        # Kineto mirrors record_function ranges (ours, Inductor's "Torch-Compiled Region") on the
        # GPU's timeline as "user annotations" spanning kernels: no kernels (counted, the GPU would
        # never look idle).
        return [(event.name(), event.start_ns() / 1e3, event.end_ns() / 1e3, event.duration_ns() / 1e3)
                for event in profiler.profiler.kineto_results.events()
                if event.device_type() == DeviceType.CUDA and event.name() != _CALL
                and not event.is_user_annotation() and event.duration_ns() > 0]
    return [(event.name, event.time_range.start, event.time_range.end, event.self_cpu_time_total)
            for event in profiler.events() if event.device_type == DeviceType.CPU and event.name != _CALL
            and event.self_cpu_time_total > 0]


_CALL = "vis_embed::profiled_call"


def kernel_breakdown(run: Callable[[], Any], device: torch.device) -> dict[str, Any]:
    """One ``run()`` (after a warm-up) under the profiler: milliseconds by category, their shares of
    the kernel time, the :data:`TOP_KERNELS` longest kernels, the call's wall time and (CUDA) the
    GPU's idle share of it."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    run()
    synchronize(device)
    with profile(activities=activities) as profiler:
        with record_function(_CALL):
            run()
            synchronize(device)
    wall_us = next(event.time_range.elapsed_us() for event in profiler.events()
                   if event.name == _CALL and event.device_type == DeviceType.CPU)  # the host's span of the call
    pieces = _timed_pieces(profiler, device)
    by_category: dict[str, float] = defaultdict(float)
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for name, _start, _end, own_us in pieces:
        by_category[category_of(name)] += own_us
        by_name[name][0] += own_us
        by_name[name][1] += 1
    kernel_us = sum(by_category.values())
    busy_us = covered_us([(start, end) for _name, start, end, _own in pieces]) if device.type == "cuda" else None
    longest = sorted(by_name.items(), key=lambda entry: -entry[1][0])[:TOP_KERNELS]
    return {
        "device": device.type,
        "wall_ms": wall_us / 1e3,
        "kernel_ms": kernel_us / 1e3,
        "kernels": len(pieces),
        "busy_ms": None if busy_us is None else busy_us / 1e3,
        "idle_share": None if busy_us is None else max(0.0, 1 - busy_us / wall_us),
        "by_category_ms": {category: us / 1e3 for category, us in sorted(by_category.items(), key=lambda kv: -kv[1])},
        "share_of_kernel_time": {category: us / kernel_us for category, us in by_category.items()} if kernel_us else {},
        "top": [{"name": name[:120], "ms": us / 1e3, "calls": int(calls), "category": category_of(name)}
                for name, (us, calls) in longest],
    }


def describe_breakdown(breakdown: dict[str, Any]) -> str:
    """Two or three lines: the wall, the idle share (CUDA), and the categories' milliseconds."""
    head = f"    profile ({breakdown['device']}): wall {breakdown['wall_ms']:.1f} ms, " \
           f"{breakdown['kernels']} kernels {breakdown['kernel_ms']:.1f} ms"
    if breakdown["idle_share"] is not None:
        head += f", GPU busy {breakdown['busy_ms']:.1f} ms, idle {breakdown['idle_share']:.0%} of the wall"
    shares = breakdown["share_of_kernel_time"]
    split = ", ".join(f"{category} {ms:.1f} ms ({shares[category]:.0%})"
                      for category, ms in breakdown["by_category_ms"].items())
    lines = [head, f"    {split}"]
    if breakdown["top"]:
        longest = breakdown["top"][0]
        lines.append(f"    longest: {longest['name'][:80]} ({longest['ms']:.1f} ms, {longest['calls']} calls)")
    return "\n".join(lines)

