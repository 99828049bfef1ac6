"""The ``vis-embed`` command line: a thin dispatcher.

Each sub-command lives next to the concept it drives and exposes two functions,
``add_arguments(parser)`` and ``run(args) -> int``.  Modules are imported only when their
command runs, so ``vis-embed --help`` stays instant (torch is not imported).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from vis_embed.errors import VisEmbedError

# command name -> (module path, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "tiny-model": ("vis_embed.model.tiny", "write a tiny random Qwen-VL checkpoint"),
    "encode": ("vis_embed.model.encode_cli", "encode a JSONL of items into an .npy matrix"),
    "prep": ("data_prep.cli", "convert MMEB / identity folders / CSVs into vis_embed data"),
    "synth": ("data_prep.synth", "render the synthetic identity benchmark"),
    "schedule": ("vis_embed.sampling.cli", "pre-generate the identity-aware batch schedule"),
    "mine-negatives": ("vis_embed.sampling.mining_cli", "mine hard negatives with an embedding model"),
    "train": ("vis_embed.training.cli", "train from a recipe"),
    "merge": ("vis_embed.training.merge", "merge a LoRA adapter into a full checkpoint"),
    "eval": ("vis_embed.evaluation.cli", "evaluate a model on a benchmark manifest"),
    "report": ("vis_embed.evaluation.report", "compare results.json / score files side by side"),
    "quickstart": ("vis_embed.quickstart", "render, train and evaluate end to end on this machine"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vis-embed", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_module, help_text) in COMMANDS.items():
        subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        build_parser().parse_args(argv)  # prints help or a usage error and exits
        return 2
    name, rest = argv[0], argv[1:]
    # Idle OpenMP threads sleep instead of spinning: on small shared CPUs a spinning thread
    # steals the core its sibling needs (tiny-model steps measured up to 10x slower).  Must be
    # set before torch is imported, which the command modules below do lazily.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"vis-embed {name}", description=COMMANDS[name][1])
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    try:
        return int(module.run(args) or 0)
    except VisEmbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
