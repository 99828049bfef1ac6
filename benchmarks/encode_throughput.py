"""Encode throughput: our Embedder.encode vs a naive VLM2Vec-style loop, in the same run.

Model: a randomly initialised Qwen2-VL with Qwen2-VL-2B's vocabulary (151,936) and hidden
width (1,536) but few layers (``--text-layers``, ``--vision-depth``), so compute -- not
Python overhead -- dominates.  Inputs: a deterministic mix of text-only, image-only and
image+text items with different image sizes and text lengths (MMEB-like).

Naive baseline, as VLM2Vec does it: the processor is called per sample, batches are taken
in input order and padded to the batch maximum, and the model is the ForConditionalGeneration
with ``output_hidden_states=True`` (so the LM head computes full-vocabulary logits and every
layer's hidden states are kept); the last hidden layer is pooled at the last real token.

Both paths use the same weights, dtype, attention implementation, thread count and max
pixels; the script checks that they produce the same vectors before timing.

    .venv/bin/python benchmarks/encode_throughput.py            # default sizes (~minutes, 2 cores)
    .venv/bin/python benchmarks/encode_throughput.py --items 16 --text-layers 2   # quicker
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from vis_embed.model.runtime.embedder import Embedder
from vis_embed.model.network.embedding_model import EmbeddingModel
from vis_embed.model.network.pooling import last_token_pool
from vis_embed.model.prompts import build_prompt
from vis_embed.model.files.tiny import build_random_model

INSTRUCTION = "Find the image that shows the same object as the given description."
TEXTS = ["a red car", "the same person as in the photo, seen from the side at a wedding",
         "a small blue bicycle leaning on a wall next to the river bank at sunset, with trees "
         "and a bench in the background and two people walking their dog on the path"]
IMAGE_SIZES = [(224, 224), (448, 336), (160, 320), (320, 240), (512, 512)]


def make_items(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """Cycle text-only / image-only / image+text items of varied sizes and lengths."""
    rng = np.random.default_rng(seed)
    items = []
    for index in range(count):
        kind = index % 3
        width, height = IMAGE_SIZES[int(rng.integers(len(IMAGE_SIZES)))]
        image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        text = TEXTS[int(rng.integers(len(TEXTS)))]
        items.append({"text": text} if kind == 0 else {"image": image} if kind == 1
                     else {"image": image, "text": text})
    return items


class Timers:
    """Accumulates wall time of hooked modules and timed blocks by name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._starts: dict[str, float] = {}

    def hook(self, module: torch.nn.Module, name: str) -> None:
        module.register_forward_pre_hook(lambda *_: self._starts.__setitem__(name, time.perf_counter()))
        module.register_forward_hook(lambda *_: self._add(name))

    def _add(self, name: str) -> None:
        self.seconds[name] += time.perf_counter() - self._starts.pop(name)

    @contextlib.contextmanager
    def block(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.seconds[name] += time.perf_counter() - start

    def reset(self) -> None:
        self.seconds.clear()


def naive_encode(model: EmbeddingModel, items: list[dict[str, Any]], batch_size: int,
                 timers: Timers, padding: dict[str, int]) -> np.ndarray:
    """VLM2Vec-style: per-sample processor, input order, pad to batch max, hidden states via LM head."""
    processor, backbone = model.processor, model.backbone
    size = {"shortest_edge": model.min_pixels, "longest_edge": model.max_pixels}
    outputs = []
    for start in range(0, len(items), batch_size):
        with timers.block("pre-processing"):
            samples = []
            for item in items[start:start + batch_size]:
                prompt = build_prompt(processor, "image" in item, INSTRUCTION, item.get("text"),
                                      model.prompt_format)
                kwargs: dict[str, Any] = {"text": [prompt], "return_tensors": "pt"}
                if "image" in item:
                    kwargs.update(images=[item["image"].convert("RGB")], images_kwargs={"size": size})
                samples.append(processor(**kwargs))
            longest = max(s["input_ids"].shape[1] for s in samples)
            batch = {key: torch.zeros((len(samples), longest), dtype=torch.long)
                     for key in ("input_ids", "attention_mask", "mm_token_type_ids")}
            for row, sample in enumerate(samples):
                length = sample["input_ids"].shape[1]
                for key in batch:
                    batch[key][row, :length] = sample[key][0]
            images = [s for s in samples if "pixel_values" in s]
            if images:
                batch["pixel_values"] = torch.cat([s["pixel_values"] for s in images])
                batch["image_grid_thw"] = torch.cat([s["image_grid_thw"] for s in images])
            padding["real"] += int(batch["attention_mask"].sum())
            padding["total"] += batch["attention_mask"].numel()
        with torch.no_grad(), timers.block("model total"):
            out = backbone(**batch, output_hidden_states=True, return_dict=True)
            pooled = last_token_pool(out.hidden_states[-1], batch["attention_mask"])
        outputs.append(F.normalize(pooled.float(), dim=-1).numpy())
    return np.concatenate(outputs)


def our_encode(embedder: Embedder, items: list[dict[str, Any]], batch_size: int,
               timers: Timers, padding: dict[str, int]) -> np.ndarray:
    model = embedder.model
    original_prepare, original_collate = model.prepare_one, model.collate

    def timed_prepare(*args: Any, **kwargs: Any) -> Any:
        with timers.block("pre-processing"):
            return original_prepare(*args, **kwargs)

    def timed_collate(*args: Any, **kwargs: Any) -> Any:
        batch = original_collate(*args, **kwargs)
        padding["real"] += int(batch["attention_mask"].sum())
        padding["total"] += batch["attention_mask"].numel()
        return batch

    model.prepare_one, model.collate = timed_prepare, timed_collate  # instance-level, for timing only
    try:
        with timers.block("total"):
            return embedder.encode(items, instruction=INSTRUCTION, batch_size=batch_size)
    finally:
        del model.prepare_one, model.collate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--text-layers", type=int, default=2, help="decoder layers (2B has 28)")
    parser.add_argument("--vision-depth", type=int, default=2, help="vision blocks (2B has 32)")
    parser.add_argument("--max-pixels", type=int, default=224 * 224,
                        help="pixel budget per image (default 64 visual tokens)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    backbone, processor = build_random_model("qwen2-vl", preset="qwen2-vl-2b-shallow",
                                             num_layers=args.text_layers,
                                             vision_depth=args.vision_depth)
    model = EmbeddingModel(backbone, processor, max_pixels=args.max_pixels)
    embedder = Embedder(model)
    params = sum(p.numel() for p in backbone.parameters()) / 1e6
    timers = Timers()
    timers.hook(backbone.model.visual, "vision tower")
    timers.hook(backbone.model.language_model, "decoder")
    timers.hook(backbone.lm_head, "LM head (logits)")
    items = make_items(args.items)
    print(f"model: Qwen2-VL random, vocab 151936, hidden 1536, {args.text_layers} decoder layers, "
          f"vision depth {args.vision_depth}, {params:.0f}M params, float32, sdpa, "
          f"{torch.get_num_threads()} threads")
    print(f"load average at start: {os.getloadavg()[0]:.2f} (machine may be shared)")
    print(f"inputs: {len(items)} items (1/3 text-only, 1/3 image-only, 1/3 image+text), "
          f"batch size {args.batch_size}, max_pixels {args.max_pixels}")

    # Warm-up and agreement check on a few items.
    check = items[:6]
    ours_check = embedder.encode(check, instruction=INSTRUCTION, batch_size=args.batch_size)
    naive_check = naive_encode(model, check, args.batch_size, Timers(), defaultdict(int))
    agreement = float((ours_check * naive_check).sum(axis=1).min())
    print(f"agreement (min cosine ours vs naive on 6 items): {agreement:.6f}")

    results = {}
    for name, run in (("naive (VLM2Vec-style)", naive_encode), ("ours (Embedder.encode)", None)):
        best = float("inf")
        for _ in range(args.repeats):
            timers.reset()
            padding: dict[str, int] = defaultdict(int)
            start, cpu_start = time.perf_counter(), time.process_time()
            if run is None:
                our_encode(embedder, items, args.batch_size, timers, padding)
            else:
                run(model, items, args.batch_size, timers, padding)
            elapsed = time.perf_counter() - start
            if elapsed < best:
                best, breakdown, pad = elapsed, dict(timers.seconds), dict(padding)
                cpu = time.process_time() - cpu_start
        results[name] = best
        print(f"\n{name}: {len(items) / best:.2f} items/s ({best:.1f} s wall, {cpu:.1f} s CPU, "
              f"load avg {os.getloadavg()[0]:.2f})")
        for part in ("pre-processing", "vision tower", "decoder", "LM head (logits)"):
            seconds = breakdown.get(part, 0.0)
            print(f"  {part:<18} {seconds:7.2f} s  ({100 * seconds / best:4.1f}%)")
        other = best - sum(breakdown.get(p, 0.0) for p in
                           ("pre-processing", "vision tower", "decoder", "LM head (logits)"))
        print(f"  {'other':<18} {other:7.2f} s  ({100 * other / best:4.1f}%)")
        print(f"  padding: {pad['total'] - pad['real']} of {pad['total']} token slots are padding "
              f"({100 * (1 - pad['real'] / pad['total']):.1f}%)")
    naive, ours = results["naive (VLM2Vec-style)"], results["ours (Embedder.encode)"]
    print(f"\nspeed-up: {naive / ours:.2f}x (ours {len(items) / ours:.2f} items/s vs naive "
          f"{len(items) / naive:.2f} items/s)")


if __name__ == "__main__":
    main()
