"""``vis-embed train RECIPE.yaml [--set key.path=value ...] [--resume]``.

The same command runs under ``torchrun --nproc_per_node N -m vis_embed train ...`` (DDP, or
DeepSpeed when the recipe names a ``deepspeed`` config) and under the ``deepspeed`` launcher.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", help="recipe YAML (see recipes/ and docs/training.md)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a recipe key, e.g. --set lora.r=8 --set max_steps=100 (repeatable)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the newest OUTPUT_DIR/checkpoint-STEP at the next scheduled batch")
    parser.add_argument("--no-progress", action="store_true", help="log lines instead of a progress bar")
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None,
                        help=argparse.SUPPRESS)  # passed by the deepspeed launcher; LOCAL_RANK env is used


def run(args: argparse.Namespace) -> int:
    import os

    if args.local_rank is not None:
        os.environ.setdefault("LOCAL_RANK", str(args.local_rank))
    from vis_embed.training.recipe import load_recipe
    from vis_embed.training.trainer import Trainer

    recipe = load_recipe(args.recipe, args.overrides)
    trainer = Trainer(recipe, resume=args.resume, show_progress=False if args.no_progress else None)
    trainer.train()
    return 0
