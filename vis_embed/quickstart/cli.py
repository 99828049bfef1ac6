"""``vis-embed quickstart``: arguments, and the summary it prints (the work is
:func:`vis_embed.quickstart.pipeline.run_quickstart`; the stages it logs appear on stderr)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from vis_embed.evaluation.quickstart_report import comparison_markdown
from vis_embed.quickstart.pipeline import run_quickstart


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("quickstart_out"),
                        help="output folder: new, empty, or an earlier quickstart's, same settings (resumes)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data, model and training")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the tiny recipe's)")
    parser.add_argument("--size", default="small",
                        help="synthetic benchmark size: small (default) or full; tiny has too few identities for "
                             "the packaged recipe's 32-member slots (give --recipe with a smaller "
                             "interleave_batch_size)")
    parser.add_argument("--recipe", type=Path, default=None,
                        help="training recipe (default: the tiny recipe shipped with vis_embed, "
                             "a copy of recipes/tiny_cpu.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a recipe key (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    result = run_quickstart(args.out, seed=args.seed, steps=args.steps, size=args.size, recipe=args.recipe,
                            overrides=args.overrides, show_progress=not args.quiet)
    before, after = result["before"]["groups"], result["after"]["groups"]
    print("\n" + comparison_markdown(result["before"], result["after"]).split("\n\n")[0])
    if "ID-Rec" in before and "ID-Rec" in after:
        print(f"\nID-Rec P@1: {before['ID-Rec']:.1f} -> {after['ID-Rec']:.1f} "
              f"({after['ID-Rec'] - before['ID-Rec']:+.1f} points)")
    print(f"\nquickstart finished in {time.perf_counter() - started:.0f} s; report: {result['report']}")
    return 0
