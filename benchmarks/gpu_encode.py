"""Encode on a GPU at the published model sizes (random weights): the GPU's own image rate, a
training step's GPU time, and end-to-end ``encode`` images/s with N preparation workers and the
GPU's utilisation (issue 28, item 5).  Needs a CUDA GPU; ``--device cpu --quick`` is the smoke
run that checks the script itself on a CPU.

1. **GPU image rate** (``--rate-models``): for each of Qwen2-VL-2B, Qwen2.5-VL-3B and
   Qwen2.5-VL-7B (``vis_embed.model.tiny`` presets with the published configs: a test pins
   their parameter counts), a batch of ``--rate-batch`` 448x448 images (exactly 256 visual
   tokens) with the query instruction is prepared once and kept on the GPU; the forward pass
   (``EmbeddingModel.forward``: backbone + last-token pooling) is timed after warm-up, median
   of ``--rate-repeats``.  This is the rate prepare_throughput.py's GPU-feed table divides
   (``--gpu-rate NAME=RATE``).
2. **Training step** (2B): the model built from ``recipes/visme_qwen2vl_2b.yaml`` (LoRA r16 on
   the language model, gradient checkpointing, bf16) on the random 2B checkpoint; one GradCache
   chunk of ``--chunk`` 256-token members timed as the step runs it (a forward without graph,
   then a forward with graph and its backward).  A rank of the 8-GPU recipe runs 256 members
   per step (1024 queries + 1024 candidates / 8), so GPU seconds per step = 256 / chunk x that.
3. **End to end**: the random 2B checkpoint written to disk and loaded back with
   ``Embedder.from_pretrained`` (the path ``vis-embed encode`` takes), then ``encode`` of a
   photo mix (JPEGs of 4032x3024, 3000x2000, 1600x1200 and 1024x768, as in
   prepare_throughput.py) with ``--workers`` preparation processes, in both decode modes.  The
   workers are started and warmed before the timed encode (their start-up is printed apart).
   GPU utilisation is NVML's (``torch.cuda.utilization``: the share of time a kernel ran)
   sampled every 50 ms during the timed encode; "waiting" is the time the model's thread spent
   waiting for its next prepared batch.  Rows must agree with the first worker count's (cosine
   >= 0.99999, the issue's rule).  ``--variants old`` also times, in the same run, the hand-over
   as it was before commit "prepared batches one ahead" (float32 patches, collated in the
   model's thread, pageable memory) for the worker counts above 0.

    python benchmarks/gpu_encode.py --json out.json          # on a GPU machine (~4 min on one H100/H200)
    .venv/bin/python benchmarks/gpu_encode.py --device cpu --quick   # smoke run of the script
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode_efficiency import gemm_peak, synchronize  # noqa: E402
from prepare_throughput import PHOTO_SIZES, photo  # noqa: E402

from vis_embed.model.embedder import Embedder  # noqa: E402
from vis_embed.model.embedding_model import EmbeddingModel, default_attn_implementation  # noqa: E402
from vis_embed.model.tiny import build_random_model  # noqa: E402

QUERY_INSTRUCTION = "Find the same object as the one in the given image."
MAX_PIXELS = 200704  # 256 visual tokens: the recipes' budget
RATE_MODELS = {"Qwen2-VL-2B": ("qwen2-vl", "qwen2-vl-2b"), "Qwen2.5-VL-3B": ("qwen2.5-vl", "qwen2.5-vl-3b"),
               "Qwen2.5-VL-7B": ("qwen2.5-vl", "qwen2.5-vl-7b")}
QUICK_MODEL = ("qwen2-vl", "tiny")
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "visme_qwen2vl_2b.yaml"
MEMBERS_PER_RANK = 2 * 1024 // 8  # the 2B recipe on 8 GPUs: queries + candidates per rank and step


def timed(function: Any, device: torch.device, repeats: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        function()
    seconds = []
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        function()
        synchronize(device)
        seconds.append(time.perf_counter() - started)
    return seconds


def square_images(count: int, side: int) -> list[dict[str, Any]]:
    """Photo-like ``side`` x ``side`` images (448: exactly 256 visual tokens)."""
    return [{"image": photo(side, side, seed=1000 + number)} for number in range(count)]


def environment(device: torch.device) -> dict[str, Any]:
    import peft
    import PIL
    import transformers

    info = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "pillow": PIL.__version__, "python": sys.version.split()[0],
            "cpu_cores": len(os.sched_getaffinity(0)), "attention": default_attn_implementation(device),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        info.update(gpu=properties.name, gpu_memory_gib=round(properties.total_memory / 2**30, 1),
                    multiprocessors=properties.multi_processor_count)
    return info


def build_model(arch: str, preset: str, device: torch.device, dtype: torch.dtype) -> EmbeddingModel:
    backbone, processor = build_random_model(arch, preset, dtype=dtype, device=device)
    backbone.set_attn_implementation(default_attn_implementation(device))
    return EmbeddingModel(backbone, processor, max_pixels=MAX_PIXELS)  # built on ``device``


def image_rate(model: EmbeddingModel, batch_size: int, repeats: int, side: int) -> dict[str, Any]:
    """Forward-pass images/s of ``model`` on a ready batch of 256-token images (no preparation)."""
    prepared = model.prepare(square_images(batch_size, side), QUERY_INSTRUCTION)
    batch = {key: value.to(model.device) for key, value in model.collate(prepared).items()}
    with torch.inference_mode():
        seconds = timed(lambda: model(**batch), model.device, repeats)
    median = statistics.median(seconds)
    return {"batch_size": batch_size, "tokens_per_item": int(batch["attention_mask"].sum()) // batch_size,
            "visual_tokens_per_item": int(prepared[0].image_grid_thw.prod()) // 4,
            "seconds_median": median, "seconds_spread": [min(seconds), max(seconds)],
            "images_per_s": batch_size / median}


def training_chunk(checkpoint: Path, device: torch.device, chunk: int, repeats: int, side: int) -> dict[str, Any]:
    """GPU seconds of one GradCache chunk of the 2B recipe's model: no-graph forward + graph forward/backward."""
    from vis_embed.training.recipe import load_recipe
    from vis_embed.training.trainer import build_training_model

    recipe = load_recipe(RECIPE, overrides=[f"model={checkpoint}", "deepspeed=null"])
    model = build_training_model(recipe, device)
    prepared = model.prepare(square_images(chunk, side), QUERY_INSTRUCTION)
    batch = {key: value.to(device) for key, value in model.collate(prepared).items()}
    cotangent = torch.randn(chunk, model.embedding_dim, device=device)

    def representations() -> None:
        with torch.no_grad():
            model(**batch)

    def graph_and_backward() -> None:
        (model(**batch) * cotangent).sum().backward()

    no_graph = statistics.median(timed(representations, device, repeats))
    with_graph = statistics.median(timed(graph_and_backward, device, repeats))
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    per_step = MEMBERS_PER_RANK / chunk * (no_graph + with_graph)
    trainable = sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)
    return {"chunk": chunk, "no_graph_forward_s": no_graph, "forward_backward_s": with_graph,
            "gpu_s_per_step_per_rank": per_step, "members_per_rank": MEMBERS_PER_RANK, "peak_gib": peak,
            "trainable_parameters": trainable}


def write_photo(arguments: tuple[Path, int, int, int]) -> str:
    root, number, width, height = arguments
    name = f"photo{number}.jpg"
    photo(width, height, seed=number).save(root / name, quality=90)
    return name


def photo_gallery(root: Path, unique: int, items: int, sizes: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """``items`` rows cycling through ``unique`` photos of the mix (written in parallel)."""
    jobs = [(root, number, *sizes[number % len(sizes)]) for number in range(unique)]
    with ProcessPoolExecutor(max_workers=min(unique, len(os.sched_getaffinity(0)))) as pool:
        names = list(pool.map(write_photo, jobs))
    return [{"image": names[number % unique]} for number in range(items)]


class UtilisationSampler:
    """NVML GPU utilisation (percent of time a kernel ran), sampled every ``interval`` s."""

    def __init__(self, device: torch.device, interval: float = 0.05) -> None:
        self.device, self.interval = device, interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.samples.append(float(torch.cuda.utilization(self.device)))
            except Exception:  # no NVML (pynvml missing): report None
                return

    def __enter__(self) -> UtilisationSampler:
        if self.device.type == "cuda":
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


@contextlib.contextmanager
def hand_over(variant: str) -> Iterator[None]:
    """``new``: the library as it is.  ``old``: float32 patches, collated in the model's thread
    into pageable memory (how batches reached the model before they were made one ahead)."""
    if variant == "new":
        yield
        return
    import vis_embed.model.item_feed as feed_module

    saved = EmbeddingModel.preparer, EmbeddingModel.collate, feed_module.one_batch_ahead
    EmbeddingModel.preparer = lambda self: dataclasses.replace(saved[0](self), pixel_dtype=None)
    EmbeddingModel.collate = lambda self, prepared, padding_side=None, pin_memory=False: saved[1](
        self, prepared, padding_side)
    feed_module.one_batch_ahead = lambda batches: batches
    try:
        yield
    finally:
        EmbeddingModel.preparer, EmbeddingModel.collate, feed_module.one_batch_ahead = saved


class BatchWaits:
    """Seconds the model's thread waits for each prepared batch (Embedder.prepared_batches)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._original = Embedder.prepared_batches

    def __enter__(self) -> BatchWaits:
        original, waits = self._original, self

        def timed(embedder: Embedder, *args: Any, **kwargs: Any) -> Iterator[Any]:
            batches = original(embedder, *args, **kwargs)
            try:
                while True:
                    started = time.perf_counter()
                    try:
                        batch = next(batches)
                    except StopIteration:
                        return
                    waits.seconds += time.perf_counter() - started
                    yield batch
            finally:
                batches.close()

        Embedder.prepared_batches = timed
        return self

    def __exit__(self, *exc: Any) -> None:
        Embedder.prepared_batches = self._original


def one_encode(embedder: Embedder, gallery: list[dict[str, Any]], base_dir: Path, device: torch.device,
               workers: int, batch_size: int) -> dict[str, Any]:
    """Start and warm ``workers`` processes, then time one encode of the gallery."""
    embedder.workers = workers
    started = time.perf_counter()
    embedder.start_workers()
    embedder.encode(gallery[:max(2 * workers, batch_size)], QUERY_INSTRUCTION, batch_size=batch_size,
                    base_dir=base_dir)
    start_up = time.perf_counter() - started
    with UtilisationSampler(device) as sampler, BatchWaits() as waits:
        synchronize(device)
        started = time.perf_counter()
        vectors = embedder.encode(gallery, QUERY_INSTRUCTION, batch_size=batch_size, base_dir=base_dir)
        synchronize(device)
        seconds = time.perf_counter() - started
    return {"items": len(gallery), "seconds": seconds, "images_per_s": len(gallery) / seconds,
            "gpu_utilisation_pct": sampler.mean(), "waiting_s": waits.seconds, "start_and_warm_s": start_up,
            "vectors": vectors}


def end_to_end(checkpoint: Path, gallery: list[dict[str, Any]], base_dir: Path, device: torch.device,
               dtype: torch.dtype, workers_by_decode: dict[str, list[int]], batch_size: int,
               variants: list[str]) -> list[dict[str, Any]]:
    decodes = list(workers_by_decode)
    embedder = Embedder.from_pretrained(checkpoint, device=device, dtype=dtype, max_pixels=MAX_PIXELS)
    rows, reference = [], {}
    try:
        for decode in decodes:
            embedder.model.embedding_config = embedder.model.embedding_config.with_values(decode=decode)
            for workers in workers_by_decode[decode]:
                for variant in variants if workers > 0 else ["new"]:
                    with hand_over(variant):
                        row = one_encode(embedder, gallery, base_dir, device, workers, batch_size)
                    first = reference.setdefault(decode, row.pop("vectors"))
                    row.update(decode=decode, variant=variant, workers=workers,
                               min_cosine_to_first=float(np.min(np.sum(first * row.pop("vectors", first), axis=1))))
                    rows.append(row)
                    busy = row["gpu_utilisation_pct"]
                    print(f"  decode {decode:5s} {variant} workers {workers:2d}: {row['images_per_s']:7.1f} images/s, "
                          f"GPU busy {'n/a' if busy is None else f'{busy:.0f}'}%, waiting {row['waiting_s']:.2f} "
                          f"of {row['seconds']:.2f} s, start+warm {row['start_and_warm_s']:.1f} s, "
                          f"min cos to first {row['min_cosine_to_first']:.6f}", flush=True)
        if len(decodes) > 1:
            fast, exact = reference.get("fast"), reference.get("exact")
            if fast is not None and exact is not None:
                cosines = np.sum(fast * exact, axis=1)
                print(f"  fast vs exact vectors: mean cos {cosines.mean():.5f}, min {cosines.min():.5f}")
    finally:
        embedder.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rate-models", nargs="*", default=list(RATE_MODELS), choices=list(RATE_MODELS))
    parser.add_argument("--rate-batch", type=int, default=64)
    parser.add_argument("--rate-repeats", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=32, help="GradCache chunk (the 2B recipe's)")
    parser.add_argument("--items", type=int, default=256, help="photos encoded end to end")
    parser.add_argument("--unique-photos", type=int, default=32)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4, 8, 14])
    parser.add_argument("--decodes", nargs="+", default=["fast", "exact"], choices=["fast", "exact"])
    parser.add_argument("--exact-workers", type=int, nargs="+", default=[1, 8, 14],
                        help="worker counts for --decode exact (slower: fewer of them)")
    parser.add_argument("--batch-size", type=int, default=64, help="encode batch size")
    parser.add_argument("--variants", nargs="+", default=["new"], choices=["new", "old"],
                        help="old: also time the hand-over as it was (see the module notes)")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--budget-s", type=float, default=330, help="skip the steps that would start after this")
    parser.add_argument("--quick", action="store_true", help="tiny model, few items (checks the script)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    began = time.perf_counter()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    side = 448
    if args.quick:
        args.rate_batch, args.rate_repeats, args.chunk, args.items, args.unique_photos = 4, 2, 4, 8, 4
        args.workers, args.exact_workers, side = [0, 2], [2], 112
    from vis_embed.provenance import provenance

    report: dict[str, Any] = {"environment": environment(device), "provenance": provenance()}
    print(json.dumps(report["environment"]), flush=True)
    if device.type == "cuda":
        report["gemm_peak_tflops"] = gemm_peak(8192, dtype, device, repeats=10) / 1e12
        print(f"bf16 GEMM peak (8192^3, torch.mm, best of 10): {report['gemm_peak_tflops']:.0f} TFLOP/s", flush=True)

    def out_of_time(step: str) -> bool:
        if time.perf_counter() - began > args.budget_s:
            print(f"SKIPPED (time budget {args.budget_s:.0f} s spent): {step}", flush=True)
            report.setdefault("skipped", []).append(step)
            return True
        return False

    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        gallery = photo_gallery(scratch, args.unique_photos, args.items, PHOTO_SIZES)
        checkpoint = scratch / "qwen2-vl-2b-random"
        report["rates"] = {}
        names = ["tiny"] if args.quick else args.rate_models
        if "Qwen2-VL-2B" not in names and not args.quick:
            names = ["Qwen2-VL-2B", *names]  # the end-to-end run needs its checkpoint
        for name in names:
            if name != names[0] and out_of_time(f"rate {name}"):
                continue
            arch, preset = QUICK_MODEL if args.quick else RATE_MODELS[name]
            started = time.perf_counter()
            model = build_model(arch, preset, device, dtype)
            built = time.perf_counter() - started
            rate = image_rate(model, args.rate_batch, args.rate_repeats, side)
            rate["build_s"] = built
            report["rates"][name] = rate
            print(f"{name}: {rate['images_per_s']:.1f} images/s forward (batch {rate['batch_size']}, "
                  f"{rate['visual_tokens_per_item']} visual / {rate['tokens_per_item']} tokens an item, "
                  f"median of {args.rate_repeats}, spread {rate['seconds_spread'][0]:.4f}-"
                  f"{rate['seconds_spread'][1]:.4f} s; built in {built:.1f} s)", flush=True)
            if name == names[0]:
                model.backbone.save_pretrained(checkpoint, safe_serialization=True)
                model.processor.save_pretrained(checkpoint)
            del model
            if device.type == "cuda":
                torch.cuda.empty_cache()
        if not args.skip_training and not out_of_time("training chunk"):
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            report["training"] = training_chunk(checkpoint, device, args.chunk, args.rate_repeats, side)
            training = report["training"]
            print(f"training (2B recipe: LoRA r16, gradient checkpointing): chunk of {training['chunk']}: "
                  f"forward without graph {training['no_graph_forward_s']:.3f} s, forward+backward "
                  f"{training['forward_backward_s']:.3f} s -> {training['gpu_s_per_step_per_rank']:.2f} GPU s "
                  f"per step and rank ({MEMBERS_PER_RANK} members); peak {training['peak_gib']} GiB", flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
        if not out_of_time("end to end"):
            print(f"end to end: {args.items} photos ({args.unique_photos} files of the mix), batch {args.batch_size}, "
                  f"{report['environment']['cpu_cores']} CPU cores", flush=True)
            workers_by_decode = {decode: args.exact_workers if decode == "exact" else args.workers
                                 for decode in args.decodes}
            report["end_to_end"] = end_to_end(checkpoint, gallery, scratch, device, dtype, workers_by_decode,
                                              args.batch_size, args.variants)
    report["elapsed_s"] = time.perf_counter() - began
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(f"done in {report['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
