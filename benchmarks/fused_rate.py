"""The forward's fused path against its plain path on the same weights, in one process (issue 45).
Used by gpu_encode.py (the published sizes on a GPU; ``--device cpu --quick`` on the tiny model);
not a script itself.

- **plain**: the forward as it was before issue 45 -- the "varlen" attention, transformers' own
  bookkeeping (the batch without ``vis_embed_metadata``: boundaries, positions and the M-RoPE
  index derived on the device and read back), transformers' RMSNorm chain, the original vision
  MLPs (Qwen2.5-VL's 3420 wide, gate and up apart), eager.
- **fused**: the library's inference path now -- the host-computed metadata
  (model/network/vision_metadata.py), the fused RMSNorm (model/network/rms_norm.py), the aligned vision MLPs
  (model/network/aligned_mlp.py), and the regional compilation (model/network/compile_blocks.py; its first call
  timed, ``compile=False`` leaves it out).

For each: forward images/s (median of ``repeats`` after two warm-ups), useful TFLOP/s and their
share of the measured bf16 peak (model_rate.useful_flops: padding of the MLPs not counted), the
host reads of one forward (``tolist``/``item``/``__bool__``/``__index__``/``__int__`` calls, as
tests/test_host_reads.py counts them; on CUDA also the synchronising calls torch's sync debug
mode reports), and the smallest cosine between the two paths' vectors.  With ``reference``
(on a GPU in bf16) also each path's smallest cosine to an fp32 forward on the same weights
(transformers' sdpa attention: the varlen kernel has no fp32): on random weights 28-36 layers deep
bf16 rounding alone moves the vectors by ~1e-3, so "fused is as close to fp32 as plain is" is the
test of the fusion, where plain-vs-fused mixes two paths' rounding (a lent H200: 0.9988-0.9997).
"""

from __future__ import annotations

import contextlib
import statistics
import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from encode_efficiency import synchronize
from kernel_profile import describe_breakdown, kernel_breakdown
from model_rate import device_batch, square_images, timed, useful_flops

from vis_embed.model.network.aligned_mlp import align_mlps, alignment_for
from vis_embed.model.network.attention import VARLEN, attention_name, set_attention
from vis_embed.model.network.compile_blocks import compile_blocks
from vis_embed.model.network.embedding_model import EmbeddingModel
from vis_embed.model.network.vision_metadata import METADATA_KEY

PATHS = ("plain", "fused")
HOST_READS = frozenset({"tolist", "item", "__bool__", "__index__", "__int__", "__float__"})


class _CountHostReads(torch.overrides.TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.count += getattr(func, "__name__", "") in HOST_READS
        return func(*args, **(kwargs or {}))


def host_reads(run: Any, device: torch.device) -> dict[str, int | None]:
    """Host reads of ``run()`` (eager: a compiled region is opaque to the counter) and, on CUDA,
    the synchronising calls torch's sync debug mode warns about."""
    counter = _CountHostReads()
    with counter:
        run()
    syncs = None
    if device.type == "cuda":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                run()
                synchronize(device)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        syncs = sum("synchroniz" in str(warning.message).lower() for warning in caught)
    return {"host_reads": counter.count, "cuda_syncs": syncs}


@contextlib.contextmanager
def transformers_norms(model: EmbeddingModel) -> Iterator[None]:
    """transformers' own RMSNorm classes for the duration (the fused ones are their subclasses)."""
    switched = [(module, type(module)) for module in model.modules() if type(module).__name__.startswith("Fused")
                and type(module).__module__ == "vis_embed.model.network.rms_norm"]
    for module, cls in switched:
        module.__class__ = cls.__bases__[0]
    try:
        yield
    finally:
        for module, cls in switched:
            module.__class__ = cls


def fp32_vectors(model: EmbeddingModel, batch: dict[str, Any]) -> torch.Tensor:
    """The plain forward in fp32 under sdpa (the model is put back in its dtype and attention:
    bf16 -> fp32 -> bf16 is exact, so its weights are unchanged)."""
    dtype, attention = model.dtype, attention_name(model.backbone)
    model.float()
    set_attention(model.backbone, "sdpa")
    try:
        fp32_batch = {key: value.float() if torch.is_tensor(value) and value.is_floating_point() else value
                      for key, value in batch.items()}
        with torch.inference_mode(), transformers_norms(model):
            return model(**fp32_batch).float()
    finally:
        model.to(dtype)
        set_attention(model.backbone, attention or VARLEN)


def fused_side_by_side(model: EmbeddingModel, batch_size: int, repeats: int, side: int,
                       peak_flops: float | None, compile: bool = True, reference: bool = False,
                       profile: bool = False) -> dict[str, Any]:
    """The plain path, then the fused one (the model is left fused and compiled); ``reference``:
    each path's smallest cosine to the fp32 forward too; ``profile``: where one fused forward's
    time goes (kernel_profile.kernel_breakdown: kernels by kind, the GPU's idle share)."""
    set_attention(model.backbone, VARLEN)
    device = model.device
    prepared, batch = device_batch(model, square_images(batch_size, side))
    plain_batch = {key: value for key, value in batch.items() if key != METADATA_KEY}
    flops = useful_flops(model, batch)
    report: dict[str, Any] = {"batch_size": batch_size, "useful_tflop_per_batch": flops / 1e12,
                              "visual_tokens_per_item": int(prepared[0].image_grid_thw.prod()) // 4}
    vectors, seconds = {}, {}
    if reference:
        vectors["fp32"] = fp32_vectors(model, {key: value for key, value in batch.items() if key != METADATA_KEY})
    with torch.inference_mode():
        with transformers_norms(model):
            vectors["plain"] = model(**plain_batch).float()
            report["plain_reads"] = host_reads(lambda: model(**plain_batch), device)
            seconds["plain"] = timed(lambda: model(**plain_batch), device, repeats)
        report["aligned_mlps"] = align_mlps(model.base_model(), alignment_for(device))
        report["fused_reads"] = host_reads(lambda: model(**batch), device)
        report["first_call_s"] = None
        if compile:
            synchronize(device)
            started = time.perf_counter()
            compile_blocks(model.base_model(), device)
            model(**batch)
            synchronize(device)
            report["first_call_s"] = time.perf_counter() - started
        vectors["fused"] = model(**batch).float()
        seconds["fused"] = timed(lambda: model(**batch), device, repeats)
        if profile:
            try:
                report["fused_profile"] = kernel_breakdown(lambda: model(**batch), device)
            except Exception as exc:  # noqa: BLE001 -- a diagnostic: its failure must not cost the rates above
                report["fused_profile"] = None
                report["fused_profile_error"] = f"{type(exc).__name__}: {exc}"
    for path in PATHS:
        median = statistics.median(seconds[path])
        report[path] = {"images_per_s": batch_size / median, "seconds_median": median,
                        "seconds_spread": [min(seconds[path]), max(seconds[path])],
                        "useful_tflops": flops / median / 1e12,
                        "share_of_peak": flops / median / peak_flops if peak_flops else None}
    report["speedup"] = report["fused"]["images_per_s"] / report["plain"]["images_per_s"]
    report["min_cosine"] = float((vectors["plain"] * vectors["fused"]).sum(-1).min())
    if reference:
        report["min_cosine_to_fp32"] = {path: float((vectors[path] * vectors["fp32"]).sum(-1).min()) for path in PATHS}
    return report


def describe_fused(name: str, report: dict[str, Any]) -> str:
    parts = [f"{name}: batch {report['batch_size']}, {report['visual_tokens_per_item']} visual tokens an item"]
    for path in PATHS:
        row, reads = report[path], report[f"{path}_reads"]
        share = "" if row["share_of_peak"] is None else f" = {row['share_of_peak']:.0%} of peak"
        syncs = "" if reads["cuda_syncs"] is None else f", {reads['cuda_syncs']} CUDA syncs"
        parts.append(f"  {path:5s}: {row['images_per_s']:8.2f} images/s, {row['useful_tflops']:.2f} TFLOP/s{share}; "
                     f"{reads['host_reads']} host reads{syncs}")
    first = report["first_call_s"]
    parts.append(f"  fused / plain: {report['speedup']:.2f}x; min cosine {report['min_cosine']:.6f}; "
                 f"{report['aligned_mlps']} MLPs aligned; compile first call "
                 f"{'not run' if first is None else f'{first:.1f} s'}")
    to_fp32 = report.get("min_cosine_to_fp32")
    if to_fp32:
        parts.append(f"  min cosine to fp32: plain {to_fp32['plain']:.6f}, fused {to_fp32['fused']:.6f}")
    if report.get("fused_profile"):
        parts.append(describe_breakdown(report["fused_profile"]))
    if report.get("fused_profile_error"):
        parts.append(f"    profile failed: {report['fused_profile_error']}")
    return "\n".join(parts)
