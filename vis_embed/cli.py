"""The ``vis-embed`` command line: a thin dispatcher.

Each sub-command lives next to the concept it drives, in a command-line module that imports
nothing heavy at module level, and exposes two functions: ``add_arguments(parser)`` and
``run(args) -> int`` (a module holding several commands names them
``add_<command>_arguments`` / ``run_<command>``; see :data:`COMMANDS`).  Only the chosen
command's module is imported, and torch only when the command runs, so ``vis-embed --help``
and ``vis-embed COMMAND --help`` are instant.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from vis_embed import __version__
from vis_embed.errors import VisEmbedError

# command name -> (target, one-line help).  target "package.module" exposes add_arguments /
# run; "package.module:name" exposes add_<name>_arguments / run_<name>.
COMMANDS: dict[str, tuple[str, str]] = {
    "tiny-model": ("vis_embed.model.cli:tiny_model", "write a tiny random Qwen-VL checkpoint"),
    "encode": ("vis_embed.model.cli:encode", "encode a JSONL of items into an .npy matrix"),
    "prep": ("vis_embed.prep.cli", "convert MMEB / identity folders / CSVs into vis_embed data"),
    "synth": ("vis_embed.prep.synth.cli", "render the synthetic identity benchmark"),
    "schedule": ("vis_embed.sampling.cli", "pre-generate the identity-aware batch schedule"),
    "mine-negatives": ("vis_embed.mining.cli", "mine hard negatives with an embedding model"),
    "train": ("vis_embed.training.cli:train", "train from a recipe"),
    "merge": ("vis_embed.training.cli:merge", "merge a LoRA adapter into a full checkpoint"),
    "export": ("vis_embed.model.files.export_cli", "export as a sentence-transformers / vLLM model directory"),
    "eval": ("vis_embed.evaluation.cli:eval", "evaluate a model on a benchmark manifest"),
    "mteb": ("vis_embed.integrations.mteb_cli", "evaluate with mteb's evaluator (manifest datasets or mteb tasks)"),
    "index": ("vis_embed.gallery.cli:index", "build a persistent faiss index of encoded vectors"),
    "search": ("vis_embed.gallery.cli:search", "encode queries and search a persistent index"),
    "report": ("vis_embed.evaluation.cli:report", "compare results.json / score files side by side (Markdown)"),
    "serve": ("vis_embed.serving.cli", "serve embeddings over HTTP (OpenAI-compatible /v1/embeddings)"),
    "quickstart": ("vis_embed.quickstart.cli", "render, train and evaluate end to end on this machine"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vis-embed", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"vis-embed {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_target, help_text) in COMMANDS.items():
        subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


def load_command(name: str) -> tuple[Callable[[argparse.ArgumentParser], None], Callable[[Any], int]]:
    """``(add_arguments, run)`` of command ``name``; imports only its command-line module."""
    module_name, _, command = COMMANDS[name][0].partition(":")
    module = importlib.import_module(module_name)
    if not command:
        return module.add_arguments, module.run
    return getattr(module, f"add_{command}_arguments"), getattr(module, f"run_{command}")


class _StderrHandler(logging.StreamHandler):
    """Writes to the ``sys.stderr`` of the moment (a handler that kept the stream it was made
    with would write to a replaced one, e.g. under pytest's capture)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def show_library_logs() -> None:
    """A command shows what the library logs at INFO and above on stderr (what a run is doing:
    stages, resumption, the schedule it built); stdout stays the command's result.  Library
    users configure logging themselves: only the command line installs this handler (once)."""
    logger = logging.getLogger("vis_embed")  # the dataset builders (vis_embed.prep) included
    if not any(isinstance(handler, _StderrHandler) for handler in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


def _os_error_message(exc: OSError) -> str:
    """``PATH: reason`` of an OSError a command did not turn into a DataError itself.  A rename
    names the destination, the user's path (the source is the writer's temporary file)."""
    path = exc.filename2 if exc.filename2 is not None else exc.filename
    reason = exc.strerror or str(exc)
    return reason if path is None else f"{os.fsdecode(path)}: {reason}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        build_parser().parse_args(argv)  # prints help, the version or a usage error, and exits
        return 2
    name, rest = argv[0], argv[1:]
    # Idle OpenMP threads sleep instead of spinning: on small shared CPUs a spinning thread
    # steals the core its sibling needs (tiny-model steps measured up to 10x slower).  Must be
    # set before torch is imported, which the commands do lazily.  This is the package's only
    # place that sets it: library users choose their own threading.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    show_library_logs()
    add_arguments, run = load_command(name)
    parser = argparse.ArgumentParser(prog=f"vis-embed {name}", description=COMMANDS[name][1])
    add_arguments(parser)
    args = parser.parse_args(rest)
    try:
        return int(run(args) or 0)
    except VisEmbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path the system refused: an output that is a folder, a file where a folder goes
        print(f"error: {_os_error_message(exc)}", file=sys.stderr)
        return 2
    except MemoryError as exc:  # numpy names the size it could not allocate: what the user asked for is too big
        print(f"error: out of memory: {exc or 'an allocation failed'}; ask for less (e.g. fewer steps, a smaller "
              "batch)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def run_as_program(argv: list[str] | None = None) -> NoReturn:
    """``vis-embed`` and ``python -m vis_embed``: run the command, then exit with its code.

    A rank of a ``torchrun`` job whose command has left the process group (``encode`` and
    ``eval`` do, once every rank's output is written) ends with ``os._exit`` after flushing
    its output.  Why: at interpreter shutdown the gloo backend's C++ threads could abort such a
    finished rank ("terminate called without an active exception"; torch 2.14, 3 of 9 two-rank
    evaluations on a loaded 2-core machine, none in 15 with this exit), and torchrun then
    reports the whole job as failed although its results are complete.  Every file is closed
    by then; what is skipped is Python's own teardown.
    """
    code = main(argv)
    distributed = sys.modules.get("torch.distributed")
    left_group = distributed is not None and distributed.is_available() and not distributed.is_initialized()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and left_group:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    run_as_program()
