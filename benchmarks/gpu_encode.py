"""On a GPU at the published model sizes (random weights), in ONE run: the forward's fused path
against its plain path side by side (issue 45: host-computed metadata, fused RMSNorm, aligned
vision MLPs, regional compilation; benchmarks/fused_rate.py), optionally transformers' sdpa
attention against ours ("varlen"; issue 35), a training chunk of the 2B and 3B recipes, and
end-to-end ``encode`` with N preparation workers against the fused forward rate.
Needs a CUDA GPU; ``--smoke`` (= ``--device cpu --quick``) is the run that checks the script on
a CPU.  The report records card, driver, torch, transformers and the bf16 GEMM peak measured first.

0. **Fused vs plain** (``--rate-models``; benchmarks/fused_rate.py): for each model, the plain
   path (as before issue 45) and the fused path on the same weights: forward images/s, share of
   the GEMM peak, host reads and CUDA syncs of one forward, the compile's first call
   (``--skip-compile``: fused without it), and the smallest cosine; and where one fused
   forward's time goes (benchmarks/kernel_profile.py: kernel time by kind -- matrix products,
   attention, Inductor's fused kernels, elementwise, copies -- and the GPU's idle share of the
   call; ``--skip-profile`` leaves it out).
1. **sdpa vs ours** (only with ``--with-sdpa``; benchmarks/model_rate.py): for each of Qwen2-VL-2B,
   Qwen2.5-VL-3B and Qwen2.5-VL-7B (``vis_embed.model.files.tiny`` presets with the published
   configs: a test pins their parameter counts), a batch of ``--rate-batch`` 448x448 images
   (exactly 256 visual tokens) with the query instruction is prepared once and kept on the
   GPU; the forward pass (``EmbeddingModel.forward``) is timed after warm-up, median of
   ``--rate-repeats``, under sdpa and under ours on the same weights; with the attention
   operators one forward runs (torch profiler), the useful TFLOP/s and their share of the
   measured GEMM peak, and the smallest cosine between the two paths' vectors.
2. **Training** (``--train-recipes``): the model built by the trainer from
   ``recipes/visme_qwen2vl_2b.yaml`` / ``visme_qwen25vl_3b.yaml`` on the random checkpoint;
   one GradCache chunk as the recipe sets it (chunk 32, gradient checkpointing) timed as the
   step runs it, under sdpa and under ours; then ours with ``chunk_size: auto`` /
   ``gradient_checkpointing: auto`` (the plan the memory probe picks on this card).  A rank of
   the 8-GPU recipes runs 256 members per step (1024 queries + 1024 candidates / 8).
3. **End to end**: the random 2B checkpoint written to disk and loaded back with
   ``Embedder.from_pretrained`` (the path ``vis-embed encode`` takes), then ``encode`` of a
   photo mix (JPEGs of 4032x3024, 3000x2000, 1600x1200 and 1024x768, as in
   prepare_throughput.py) with ``--workers`` preparation processes, under ``--e2e-attention``
   (ours, then sdpa at the last worker count).  The workers are started and warmed before the
   timed encode.  GPU utilisation is NVML's (``torch.cuda.utilization``) sampled every 50 ms;
   "waiting" is the time the model's thread spent waiting for its next prepared batch.  Rows
   must agree with the first row of their decode mode (cosine >= 0.9999 in bf16).
   ``--variants old`` also times the hand-over as it was before commit "prepared batches one
   ahead".
   ``Embedder.from_pretrained`` compiles on CUDA by default: the encode runs the fused path, and
   ``e2e_share_of_forward`` is the best encode rate over the 2B's fused forward rate (target
   >= 85%); each row also times the same workers preparing the gallery with no model running
   (``feed_images_per_s``; ``feed_share_of_forward``): whether the feed or the overlap is short.

Steps that would start after ``--budget-s`` are skipped and named in the report.

    python benchmarks/gpu_encode.py --json $OUT/gpu_encode.json      # on a GPU machine (one command)
    .venv/bin/python benchmarks/gpu_encode.py --smoke --skip-compile # smoke run of the script
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

from fused_rate import describe_fused, fused_side_by_side  # noqa: E402
from model_rate import (QUERY_INSTRUCTION, describe_rates, describe_training, rates_side_by_side,  # noqa: E402
                        training_side_by_side)

from vis_embed.model.network.attention import (VARLEN, flash_attention_available, resolve_attn_implementation,  # noqa: E402
                                               set_attention)
from vis_embed.model.runtime.embedder import Embedder  # noqa: E402
from vis_embed.model.network.embedding_model import EmbeddingModel  # noqa: E402
from vis_embed.model.defaults import DEFAULT_MAX_PIXELS  # noqa: E402
from vis_embed.model.files.tiny import build_random_model  # noqa: E402

MAX_PIXELS = DEFAULT_MAX_PIXELS  # 256 visual tokens: the recipes' budget
RATE_MODELS = {"Qwen2-VL-2B": ("qwen2-vl", "qwen2-vl-2b"), "Qwen2.5-VL-3B": ("qwen2.5-vl", "qwen2.5-vl-3b"),
               "Qwen2.5-VL-7B": ("qwen2.5-vl", "qwen2.5-vl-7b")}
QUICK_MODEL = ("qwen2-vl", "tiny")
RECIPES = {"Qwen2-VL-2B": "visme_qwen2vl_2b.yaml", "Qwen2.5-VL-3B": "visme_qwen25vl_3b.yaml"}
RECIPE_DIR = Path(__file__).resolve().parents[1] / "recipes"
MEMBERS_PER_RANK = 2 * 1024 // 8  # the recipes on 8 GPUs: queries + candidates per rank and step


def driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no NVML bindings: ask nvidia-smi
        import subprocess

        try:
            return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=20).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None


def host_cpu() -> dict[str, Any]:
    """The host's CPU model and its physical cores among those this process may use (from
    /proc/cpuinfo; None where it says nothing): a feed of N workers on N hyperthreads of N/2
    cores is about half that on N cores, which the e2e rows' feed figures must be read against."""
    processors: list[dict[str, str]] = [{}]
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip():
                processors[-1][key.strip()] = value.strip()
            elif processors[-1]:
                processors.append({})
    except OSError:
        return {"cpu_model": None, "cpu_physical_cores": None}
    usable = os.sched_getaffinity(0)
    mine = [info for info in processors if info.get("processor", "").isdigit() and int(info["processor"]) in usable]
    cores = {(info.get("physical id"), info.get("core id")) for info in mine if "core id" in info}
    return {"cpu_model": mine[0].get("model name") if mine else None, "cpu_physical_cores": len(cores) or None}


def environment(device: torch.device) -> dict[str, Any]:
    import peft
    import PIL
    import transformers

    info = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "pillow": PIL.__version__, "python": sys.version.split()[0],
            "cpu_cores": len(os.sched_getaffinity(0)), "default_attention": resolve_attn_implementation(None, device),
            "flash_attention_2_installed": flash_attention_available("flash_attention_2"),
            **host_cpu(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        info.update(gpu=properties.name, gpu_memory_gib=round(properties.total_memory / 2**30, 1),
                    multiprocessors=properties.multi_processor_count, cuda=torch.version.cuda,
                    compute_capability=".".join(map(str, torch.cuda.get_device_capability(device))),
                    driver=driver_version())
    return info


def build_model(arch: str, preset: str, device: torch.device, dtype: torch.dtype) -> EmbeddingModel:
    backbone, processor = build_random_model(arch, preset, dtype=dtype, device=device)
    set_attention(backbone, VARLEN)
    return EmbeddingModel(backbone, processor, max_pixels=MAX_PIXELS)  # built on ``device``


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
    import vis_embed.model.runtime.item_feed as feed_module

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
    """Seconds the model's thread waits for each prepared batch (Embedder.prepared_batches), in
    order: the first is the pipeline's fill (no batch can run before one is prepared: a cost per
    call, paid once however long the gallery), the rest the steady state's starvation (the feed
    slower than the model) -- the two causes of an encode slower than the forward, told apart."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self._original = Embedder.prepared_batches

    @property
    def seconds(self) -> float:
        return sum(self.waits)

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
                    waits.waits.append(time.perf_counter() - started)
                    yield batch
            finally:
                batches.close()

        Embedder.prepared_batches = timed
        return self

    def __exit__(self, *exc: Any) -> None:
        Embedder.prepared_batches = self._original


def one_encode(embedder: Embedder, gallery: list[dict[str, Any]], base_dir: Path, device: torch.device,
               workers: int, batch_size: int) -> dict[str, Any]:
    """Start and warm ``workers`` processes, then time one encode of the gallery.  The warm-up
    encodes the whole gallery once: a compiled model meets every graph variant of the timed pass
    there (batches with and without padding, each token count's dynamic graph), so the timed pass
    is the steady state (a lent H200: one 64-item warm-up left a 2.5 s recompile in the timed
    pass); the compile's first-call cost is reported by the forward step."""
    embedder.workers = workers
    started = time.perf_counter()
    embedder.start_workers()
    embedder.encode(gallery, QUERY_INSTRUCTION, batch_size=batch_size, base_dir=base_dir)
    start_up = time.perf_counter() - started
    with UtilisationSampler(device) as sampler, BatchWaits() as waits:
        synchronize(device)
        started = time.perf_counter()
        vectors = embedder.encode(gallery, QUERY_INSTRUCTION, batch_size=batch_size, base_dir=base_dir)
        synchronize(device)
        seconds = time.perf_counter() - started
    feed_s = feed_alone(embedder, gallery, base_dir, batch_size)
    return {"items": len(gallery), "seconds": seconds, "images_per_s": len(gallery) / seconds,
            "gpu_utilisation_pct": sampler.mean(), "waiting_s": waits.seconds, "start_and_warm_s": start_up,
            **steady_state(waits.waits, len(gallery), seconds), "feed_alone_s": feed_s,
            "feed_images_per_s": len(gallery) / feed_s, "vectors": vectors}


def feed_alone(embedder: Embedder, gallery: list[dict[str, Any]], base_dir: Path, batch_size: int) -> float:
    """Seconds for the same workers to prepare and collate (pinned) the gallery in encode's batches
    with no model running: what the feed can deliver.  Below the forward's rate, the end-to-end
    target is the preparation's (more cores, faster decoding); above it with the encode still
    short, the overlap of feed and forward is."""
    batches = embedder.batch_plan(gallery, QUERY_INSTRUCTION, batch_size, base_dir)
    started = time.perf_counter()
    for _batch, _indices in embedder.prepared_batches(gallery, batches, QUERY_INSTRUCTION, base_dir, "raise", {}):
        pass
    return time.perf_counter() - started


def steady_state(waits: list[float], items: int, seconds: float) -> dict[str, Any]:
    """The encode without its pipeline fill: the first batch's wait (``fill_s``), the waits after it
    (``steady_waiting_s``) and the rate had the fill been free (``steady_images_per_s``: every item
    over the time less the fill).  A steady rate near the forward's says the gap is the fill (a
    longer gallery amortises it); one below it says the feed cannot keep up."""
    fill = waits[0] if waits else 0.0
    return {"batches": len(waits), "fill_s": fill, "steady_waiting_s": sum(waits[1:]),
            "steady_images_per_s": items / (seconds - fill) if seconds > fill else None}


def worker_counts(given: list[str], device: torch.device) -> list[int]:
    """``--workers`` values as counts: ``auto`` is what ``vis-embed encode --workers auto`` starts
    for a model on this device (its rule, resolve_workers), so the default is timed as shipped."""
    from vis_embed.model.runtime.prepare_pool import resolve_workers

    return list(dict.fromkeys(resolve_workers(value, accelerated=device.type == "cuda") for value in given))


def end_to_end(checkpoint: Path, gallery: list[dict[str, Any]], base_dir: Path, device: torch.device,
               dtype: torch.dtype, workers_by_decode: dict[str, list[int]], batch_size: int,
               variants: list[str], attentions: list[str], compile: bool | None = None) -> list[dict[str, Any]]:
    """Rows of encode timings: every worker count under ``attentions[0]``, the others at the
    last worker count of each decode mode only (the comparison, not the worker sweep).
    ``compile``: Embedder.from_pretrained's (None: its default, on for CUDA)."""
    decodes = list(workers_by_decode)
    embedder = Embedder.from_pretrained(checkpoint, device=device, dtype=dtype, max_pixels=MAX_PIXELS,
                                        compile=None if compile else False)
    rows, reference = [], {}
    try:
        for decode in decodes:
            embedder.model.embedding_config = embedder.model.embedding_config.with_values(decode=decode)
            for attention in attentions:
                set_attention(embedder.model.backbone, attention)
                counts = workers_by_decode[decode] if attention == attentions[0] else workers_by_decode[decode][-1:]
                for workers in counts:
                    for variant in variants if workers > 0 else ["new"]:
                        with hand_over(variant):
                            row = one_encode(embedder, gallery, base_dir, device, workers, batch_size)
                        first = reference.setdefault(decode, row.pop("vectors"))
                        row.update(decode=decode, variant=variant, workers=workers, attention=attention,
                                   min_cosine_to_first=float(np.min(np.sum(first * row.pop("vectors", first),
                                                                           axis=1))))
                        rows.append(row)
                        busy = row["gpu_utilisation_pct"]
                        print(f"  {attention:6s} decode {decode:5s} {variant} workers {workers:2d}: "
                              f"{row['images_per_s']:7.1f} images/s, GPU busy "
                              f"{'n/a' if busy is None else f'{busy:.0f}'}%, waiting {row['waiting_s']:.2f} "
                              f"of {row['seconds']:.2f} s (fill {row['fill_s']:.2f}, steady "
                              f"{row['steady_waiting_s']:.2f}; steady {row['steady_images_per_s'] or 0:.1f} "
                              f"images/s; feed alone {row['feed_images_per_s']:.1f} images/s), "
                              f"start+warm {row['start_and_warm_s']:.1f} s, "
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
    parser.add_argument("--train-recipes", nargs="*", default=list(RECIPES), choices=list(RECIPES),
                        help="recipes whose training chunk is timed (their model's rate runs first)")
    parser.add_argument("--train-repeats", type=int, default=3)
    parser.add_argument("--items", type=int, default=256, help="photos encoded end to end")
    parser.add_argument("--unique-photos", type=int, default=32)
    parser.add_argument("--workers", nargs="+", default=["8", "14"],
                        help="worker counts end to end; 'auto' is encode's own default for the device")
    parser.add_argument("--decodes", nargs="+", default=["fast"], choices=["fast", "exact"])
    parser.add_argument("--exact-workers", nargs="+", default=["14"],
                        help="worker counts for --decode exact (slower: fewer of them)")
    parser.add_argument("--with-sdpa", action="store_true",
                        help="also time transformers' sdpa attention against ours (issue 35's side by side)")
    parser.add_argument("--e2e-attention", nargs="+", default=[VARLEN],
                        help="attentions end to end: all worker counts for the first, the last count for others")
    parser.add_argument("--batch-size", type=int, default=64, help="encode batch size")
    parser.add_argument("--variants", nargs="+", default=["new"], choices=["new", "old"],
                        help="old: also time the hand-over as it was (see the module notes)")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--skip-e2e", action="store_true", help="no end-to-end encode")
    parser.add_argument("--skip-compile", action="store_true", help="the fused path without torch.compile")
    parser.add_argument("--skip-profile", action="store_true",
                        help="no kernel-time breakdown of the fused forward (benchmarks/kernel_profile.py)")
    parser.add_argument("--budget-s", type=float, default=400, help="skip the steps that would start after this")
    parser.add_argument("--quick", action="store_true", help="tiny model, few items (checks the script)")
    parser.add_argument("--smoke", action="store_true", help="--device cpu --quick")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    began = time.perf_counter()
    if args.smoke:
        args.device, args.quick = "cpu", True
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    side, members_per_rank, train_overrides = 448, MEMBERS_PER_RANK, []
    if args.quick:
        args.rate_batch, args.rate_repeats, args.train_repeats, args.items, args.unique_photos = 4, 2, 1, 8, 4
        args.batch_size = 4  # two batches: the fill and the steady state both measured
        args.workers, args.exact_workers, side, members_per_rank = [0, 2], [2], 112, 8
        train_overrides = ["gradcache.chunk_size=2"]
    from vis_embed.provenance import provenance

    report: dict[str, Any] = {"environment": environment(device), "provenance": provenance()}
    print(json.dumps(report["environment"]), flush=True)
    peak = None
    if device.type == "cuda":
        peak = gemm_peak(8192, dtype, device, repeats=10)
        report["gemm_peak_tflops"] = peak / 1e12
        print(f"bf16 GEMM peak (8192^3, torch.mm, best of 10): {peak / 1e12:.0f} TFLOP/s", flush=True)

    def save() -> None:  # after every step: a run cut short still leaves what it measured
        report["elapsed_s"] = time.perf_counter() - began
        current = getattr(torch.nn.attention, "current_flash_attention_impl", None)
        report["flash_attention_impl"] = current() if current else None  # "FA4" once activated
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=2))

    def out_of_time(step: str) -> bool:
        save()
        if time.perf_counter() - began > args.budget_s:
            print(f"SKIPPED (time budget {args.budget_s:.0f} s spent): {step}", flush=True)
            report.setdefault("skipped", []).append(step)
            return True
        return False

    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        gallery = photo_gallery(scratch, args.unique_photos, args.items, PHOTO_SIZES)
        checkpoints = {name: scratch / name for name in RATE_MODELS}
        trained = [] if args.skip_training else args.train_recipes  # a recipe's model is built for its step
        names = ["Qwen2-VL-2B"] if args.quick else list(dict.fromkeys(["Qwen2-VL-2B", *trained, *args.rate_models]))
        report["rates"], report["fused"] = {}, {}
        for name in names:  # the 2B first: end to end needs its checkpoint
            if name != names[0] and out_of_time(f"rate {name}"):
                continue
            arch, preset = QUICK_MODEL if args.quick else RATE_MODELS[name]
            started = time.perf_counter()
            model = build_model(arch, preset, device, dtype)
            built = time.perf_counter() - started
            if name == "Qwen2-VL-2B" or name in trained:
                model.backbone.save_pretrained(checkpoints[name], safe_serialization=True)
                model.processor.save_pretrained(checkpoints[name])
            if args.with_sdpa:
                rate = rates_side_by_side(model, args.rate_batch, args.rate_repeats, side, peak)
                rate["build_s"] = built
                report["rates"][name] = rate
                print(describe_rates(f"{name} forward (built in {built:.1f} s)", rate), flush=True)
            fused = fused_side_by_side(model, args.rate_batch, args.rate_repeats, side, peak,
                                       compile=not args.skip_compile, reference=True, profile=not args.skip_profile)
            report["fused"][name] = fused
            print(describe_fused(f"{name} forward, plain vs fused (built in {built:.1f} s)", fused), flush=True)
            save()
            del model
            if device.type == "cuda":
                torch.cuda.empty_cache()
        report["training"] = {}
        for name in trained:
            if not checkpoints[name].is_dir() or out_of_time(f"training {name}"):
                continue
            training = training_side_by_side(RECIPE_DIR / RECIPES[name], checkpoints[name], device,
                                             args.train_repeats, side, members_per_rank, overrides=train_overrides,
                                             compiled=not args.skip_compile)
            report["training"][name] = training
            print(describe_training(training), flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
        if not args.skip_e2e and not out_of_time("end to end"):
            print(f"end to end: {args.items} photos ({args.unique_photos} files of the mix), batch {args.batch_size}, "
                  f"{report['environment']['cpu_cores']} CPU cores ({report['environment']['cpu_physical_cores']} "
                  f"physical, {report['environment']['cpu_model']})", flush=True)
            workers_by_decode = {decode: worker_counts(args.exact_workers if decode == "exact" else args.workers,
                                                       device) for decode in args.decodes}
            report["end_to_end"] = end_to_end(checkpoints["Qwen2-VL-2B"], gallery, scratch, device, dtype,
                                              workers_by_decode, args.batch_size, args.variants, args.e2e_attention,
                                              compile=not args.skip_compile)
            forward = report["fused"].get("Qwen2-VL-2B", {}).get("fused", {}).get("images_per_s")
            best = max((row["images_per_s"] for row in report["end_to_end"]), default=None)
            if forward and best:
                report["e2e_share_of_forward"] = best / forward
                print(f"end to end / fused forward (2B): {best:.1f} / {forward:.1f} images/s = "
                      f"{best / forward:.0%} (target >= 85%)", flush=True)
                steady = max((row["steady_images_per_s"] or 0.0 for row in report["end_to_end"]), default=0.0)
                report["e2e_steady_share_of_forward"] = steady / forward
                print(f"  without the pipeline's fill (the first batch's wait): {steady:.1f} images/s = "
                      f"{steady / forward:.0%} of the forward", flush=True)
                feed = max(row["feed_images_per_s"] for row in report["end_to_end"])
                report["feed_share_of_forward"] = feed / forward
                print(f"  the workers alone (no model): {feed:.1f} images/s = {feed / forward:.0%} of the forward",
                      flush=True)
    save()
    print(f"done in {report['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
