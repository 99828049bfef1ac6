"""On a CPU: transformers' sdpa path against ours ("varlen") on the tiny architectures, side by
side in one run (issue 35 item 5, CPU part), and the decoder's padding at the batch rule
(issue 35 item 2).

For each architecture (random weights, ``vis_embed.model.files.tiny`` preset ``--preset``):

1. **forward rate** (benchmarks/model_rate.py): a batch of ``--batch`` square photos, images/s
   of ``EmbeddingModel.forward`` under each attention on the same weights, the attention
   operators one forward runs (torch profiler) and the smallest cosine between the two;
2. **encode of the mix**: ``Embedder.encode`` of the MMEB-like mix of encode_throughput.py
   (text-only, image-only and image+text items, several image sizes and text lengths) under
   each attention (the two taking turns in every repeat), best of ``--repeats``, items/s and
   the smallest cosine;
3. **padding**: over that encode, the share of the decoder's token slots that are padding
   (``Embedder``'s batch rule: length-sorted batches, closed early above 10% padding), and the
   share of the CPU path's vision-attention score work that is padding: segments packed into
   rows of the longest (short ones sharing a row), 1 - sum(L^2) / (rows x max L^2) per block
   call; beside it the share had each segment its own row (segments x max L^2, before packing).

    .venv/bin/python benchmarks/attention_compare.py --json OUT.json     # all three tiny archs
    .venv/bin/python benchmarks/attention_compare.py --quick             # smoke run (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode_throughput import INSTRUCTION, make_items  # noqa: E402
from model_rate import ATTENTIONS, alternating, describe_rates, rates_side_by_side  # noqa: E402

from vis_embed.model.network import packed_rows  # noqa: E402
from vis_embed.model.network.attention import VARLEN, set_attention  # noqa: E402
from vis_embed.model.runtime.embedder import Embedder  # noqa: E402
from vis_embed.model.network.embedding_model import EmbeddingModel  # noqa: E402
from vis_embed.model.files.tiny import ARCHS, build_random_model  # noqa: E402


class PaddingCounter:
    """Decoder token slots (real / total) of every collated batch, and the vision attention's
    padded work (real / total score entries) of every packed call, while in a ``with``."""

    def __init__(self, model: EmbeddingModel) -> None:
        self.model, self.slots, self.scores = model, [0, 0], [0, 0, 0]

    def __enter__(self) -> PaddingCounter:
        model, counter, original_collate = self.model, self, self.model.collate
        original_padded = packed_rows.padded_attention

        def collate(*args: Any, **kwargs: Any) -> Any:
            batch = original_collate(*args, **kwargs)
            counter.slots[0] += int(batch["attention_mask"].sum())
            counter.slots[1] += batch["attention_mask"].numel()
            return batch

        def padded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, max_len: int,
                   scaling: float | None) -> torch.Tensor:
            lengths = (cu[1:] - cu[:-1]).tolist()
            rows = packed_rows.first_fit_decreasing(lengths, max_len)[2]  # the rows the CPU path runs
            counter.scores[0] += sum(length ** 2 for length in lengths)
            counter.scores[1] += rows * max_len ** 2
            counter.scores[2] += len(lengths) * max_len ** 2
            return original_padded(q, k, v, cu, max_len, scaling)

        model.collate, packed_rows.padded_attention = collate, padded
        self._restore = lambda: (delattr(model, "collate"), setattr(packed_rows, "padded_attention", original_padded))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._restore()

    def shares(self) -> dict[str, float | None]:
        return {"decoder_padding": 1 - self.slots[0] / self.slots[1] if self.slots[1] else None,
                "vision_attention_padding": 1 - self.scores[0] / self.scores[1] if self.scores[1] else None,
                "vision_attention_padding_one_segment_per_row":
                    1 - self.scores[0] / self.scores[2] if self.scores[2] else None}


def encode_side_by_side(model: EmbeddingModel, items: list[dict[str, Any]], batch_size: int,
                        repeats: int, timed: bool = True) -> dict[str, Any]:
    embedder = Embedder(model)
    report: dict[str, Any] = {"items": len(items), "batch_size": batch_size}
    vectors = {}
    for name in ATTENTIONS if timed else ():
        set_attention(model.backbone, name)
        vectors[name] = embedder.encode(items, INSTRUCTION, batch_size=batch_size)
    if timed:
        seconds = alternating(lambda: embedder.encode(items, INSTRUCTION, batch_size=batch_size), model,
                              model.device, repeats, warmup=1)
        for name in ATTENTIONS:
            best = min(seconds[name])
            report[name] = {"items_per_s": len(items) / best, "seconds_best": best,
                            "seconds_median": statistics.median(seconds[name])}
    set_attention(model.backbone, VARLEN)
    with PaddingCounter(model) as counter:
        embedder.encode(items, INSTRUCTION, batch_size=batch_size)
    report.update(counter.shares())
    if not timed:
        return report
    report["min_cosine"] = float(np.min(np.sum(vectors["sdpa"] * vectors[VARLEN], axis=1)))
    report["speedup"] = report[VARLEN]["items_per_s"] / report["sdpa"]["items_per_s"]
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", nargs="+", default=list(ARCHS), choices=list(ARCHS))
    parser.add_argument("--preset", default="tiny", help="tiny-model preset (tiny: the test checkpoints)")
    parser.add_argument("--batch", type=int, default=8, help="photos in the forward-rate batch")
    parser.add_argument("--side", type=int, default=448, help="photo side in pixels (448: 256 visual tokens)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--items", type=int, default=48, help="items of the mix encoded")
    parser.add_argument("--batch-size", type=int, default=16, help="encode batch size")
    parser.add_argument("--max-pixels", type=int, default=200704, help="pixel budget of the mix's images")
    parser.add_argument("--padding-only", action="store_true", help="count the padding of the mix's encode only")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="few items and repeats (checks the script)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.batch, args.side, args.repeats, args.items, args.batch_size = 2, 112, 1, 6, 3
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    report: dict[str, Any] = {"environment": {
        "torch": torch.__version__, "transformers": transformers.__version__, "threads": torch.get_num_threads(),
        "load_average_at_start": os.getloadavg()[0], "preset": args.preset,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, "archs": {}}
    print(json.dumps(report["environment"]), flush=True)
    items = make_items(args.items)
    for arch in args.archs:
        backbone, processor = build_random_model(arch, args.preset)
        model = EmbeddingModel(backbone, processor, max_pixels=args.max_pixels)
        if args.padding_only:
            encode = encode_side_by_side(model, items, args.batch_size, args.repeats, timed=False)
            print(f"{arch} encode of the mix ({encode['items']} items, batch {encode['batch_size']}, max_pixels "
                  f"{args.max_pixels}): padding: decoder {encode['decoder_padding']:.1%} of token slots, vision "
                  f"attention {encode['vision_attention_padding']:.1%} of the packed score work ("
                  f"{encode['vision_attention_padding_one_segment_per_row']:.1%} with one segment per row)", flush=True)
            report["archs"][arch] = {"encode": encode}
            continue
        rates = rates_side_by_side(model, args.batch, args.repeats, args.side, peak_flops=None)
        print(describe_rates(f"{arch} forward", rates), flush=True)
        encode = encode_side_by_side(model, items, args.batch_size, args.repeats)
        print(f"{arch} encode of the mix ({encode['items']} items, batch {encode['batch_size']}): "
              + ", ".join(f"{name} {encode[name]['items_per_s']:.2f} items/s" for name in ATTENTIONS)
              + f" (ours / sdpa {encode['speedup']:.2f}x, min cosine {encode['min_cosine']:.6f}); padding: decoder "
              f"{encode['decoder_padding']:.1%} of token slots, vision attention "
              f"{encode['vision_attention_padding']:.1%} of the packed score work ("
              f"{encode['vision_attention_padding_one_segment_per_row']:.1%} with one segment per row)", flush=True)
        report["archs"][arch] = {"forward": rates, "encode": encode}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
