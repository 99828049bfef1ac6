"""``vis-embed synth OUT_DIR [--seed S] [--size small|full|tiny|small-skewed|small-dense]
[--modalities image,video,document]``
(arguments only; the renderer is :mod:`vis_embed.prep.synth.build`)."""

from __future__ import annotations

import argparse

from vis_embed.prep.synth.build import generate
from vis_embed.prep.synth.sizes import SIZES
from vis_embed.prep.synth.modalities import DEFAULT_MODALITIES, MODALITIES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out_dir", metavar="OUT_DIR",
                        help="output folder (created; a previous synth output there is replaced)")
    parser.add_argument("--seed", type=int, default=0, help="random seed; same seed -> identical files")
    parser.add_argument("--size", choices=list(SIZES), default="small",
                        help="small: 112 px, ~1.2K train identities, renders in seconds (the quickstart's); "
                             "full: 224 px, 7.5K train identities; tiny: for tests; "
                             "small-skewed: small with skewed train identity sizes (most 2 images, 2%% 20-60); "
                             "small-dense: small's evaluation, training in 14 identity sub-datasets of 24 "
                             "identities in look-alike families x 10 images (the dense sampling ablation)")
    parser.add_argument("--modalities", default=",".join(DEFAULT_MODALITIES), metavar="LIST",
                        help=f"comma-separated, from {','.join(MODALITIES)}; image (the training data and image tasks) "
                             "must be in it. video adds "
                             "clip retrieval and clip classification, document adds text -> page retrieval "
                             "with graded qrels (docs/synth.md); default: %(default)s")
    parser.add_argument("--workers", type=int, default=None,
                        help="rendering processes (default: min(4, CPU count)); never changes the output")


def run(args: argparse.Namespace) -> int:
    out_dir = generate(args.out_dir, seed=args.seed, size=args.size, workers=args.workers,
                       show_progress=True, modalities=args.modalities)
    print(f"training data config: {out_dir / 'train.yaml'}")
    print(f"benchmark manifest:   {out_dir / 'benchmark.yaml'}")
    return 0
