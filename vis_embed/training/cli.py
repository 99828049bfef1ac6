"""The training commands: ``vis-embed train`` and ``vis-embed merge``.

``vis-embed train RECIPE.yaml [--set key.path=value ...] [--resume | --overwrite]`` also runs under
``torchrun --nproc_per_node N -m vis_embed train ...`` (DDP, or DeepSpeed when the recipe names
a ``deepspeed`` config) and under the ``deepspeed`` launcher.

``vis-embed merge ADAPTER --out DIR [--base MODEL] [--dtype ...]`` folds a LoRA adapter into the
base weights (:func:`vis_embed.training.merge.merge_adapter`).

The dispatcher (:mod:`vis_embed.cli`) reaches them as ``vis_embed.training.cli:train`` and
``...:merge`` (``add_<command>_arguments`` / ``run_<command>``).  The library modules are
imported inside ``run_*``: the dispatcher imports this module to build the parser, and
``--help`` must not pay for torch (the torch-free recipe module is imported here, for the keys
``--resume`` may change).
"""

from __future__ import annotations

import argparse
import os

from vis_embed.model.embedding_config import add_embedding_config_arguments
from vis_embed.training.recipe import RESUME_MAY_CHANGE


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", help="recipe YAML (see recipes/ and docs/training.md)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a recipe key, e.g. --set adaptation.lora.r=8 --set max_steps=100 (repeatable)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the newest OUTPUT_DIR/checkpoint-STEP at the next scheduled batch "
                             f"(the recipe must match the checkpoint's, except {', '.join(RESUME_MAY_CHANGE)})")
    parser.add_argument("--overwrite", action="store_true",
                        help="start again in an OUTPUT_DIR that already holds a run, removing its "
                             "checkpoints, final/ and log (without it or --resume such a directory is refused)")
    parser.add_argument("--no-progress", action="store_true", help="log lines instead of a progress bar")
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None,
                        help=argparse.SUPPRESS)  # passed by the deepspeed launcher; LOCAL_RANK env is used


def run_train(args: argparse.Namespace) -> int:
    if args.local_rank is not None:
        os.environ.setdefault("LOCAL_RANK", str(args.local_rank))
    from vis_embed.training.recipe import load_recipe
    from vis_embed.training.trainer import Trainer

    recipe = load_recipe(args.recipe, args.overrides)
    trainer = Trainer(recipe, resume=args.resume, overwrite=args.overwrite,
                      show_progress=False if args.no_progress else None)
    trainer.train()
    return 0


def add_merge_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("adapter", help="adapter directory (OUTPUT_DIR/final or a checkpoint-STEP)")
    parser.add_argument("--base", default=None,
                        help="base model (default: base_model_name_or_path in adapter_config.json)")
    parser.add_argument("--out", required=True, help="directory of the merged checkpoint")
    add_embedding_config_arguments(parser, only=["dtype"], help_overrides={
        "dtype": "dtype of the merged weights (default: checkpoint, the base checkpoint's own; auto: by device, "
                 "bfloat16 on CUDA and float32 elsewhere)"})


def run_merge(args: argparse.Namespace) -> int:
    from vis_embed.training.merge import merge_adapter

    out = merge_adapter(args.adapter, args.out, base=args.base, dtype=args.dtype or "checkpoint")
    print(f"merged checkpoint written to {out}")
    return 0
