"""``vis-embed mteb``: evaluate a model with mteb's evaluator (argument parsing only).

    vis-embed mteb --model Qwen/Qwen2-VL-2B-Instruct --adapter runs/visme/final \\
        --benchmark eval/synth/benchmark.yaml --out mteb_results
    vis-embed mteb --model M --tasks CUB200I2IRetrieval,CIRRIT2IRetrieval --out mteb_results

Writes mteb's standard result files, one JSON per task, under
OUT/results/<model name>/<revision>/ (mteb's ``ResultCache`` layout; the revision is the
model's weights+adapter+prompt fingerprint).  ``--benchmark`` turns the manifest's retrieval
datasets into local mteb tasks (:mod:`vis_embed.integrations.mteb_tasks`); ``--tasks`` names
registered mteb / MIEB tasks, whose data comes from the Hugging Face Hub.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from vis_embed.errors import ConfigError, VisEmbedError
from vis_embed.vectors.options import add_dim_argument
from vis_embed.model.cli import add_model_loading_arguments, model_settings
from vis_embed.model.defaults import add_model_reference_arguments, add_preparation_arguments

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_reference_arguments(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--tasks", default=None, help="comma-separated registered mteb task names (data from the hub)")
    source.add_argument("--benchmark", type=Path, default=None,
                        help="benchmark manifest YAML: its candidates / gallery datasets become local mteb tasks")
    parser.add_argument("--datasets", default=None, help="with --benchmark: comma-separated dataset names (default: "
                                                         "every retrieval dataset)")
    parser.add_argument("--out", required=True, type=Path, help="output folder (mteb's results/ layout inside)")
    parser.add_argument("--instructions", type=Path, default=None,
                        help="YAML mapping TASK: {query: ..., document: ...} overriding the tasks' instructions")
    parser.add_argument("--name", default=None, help="model name in the result files (default: from --model)")
    parser.add_argument("--batch-size", type=int, default=16, help="items per forward pass (default: 16)")
    # --prompt-format, --max-pixels, --max-length, --dtype, --decode, ..., --device, --compile: the
    # loading flags every inference command has (generated from EmbeddingConfig; not given = the
    # model's recorded value), and --workers
    add_model_loading_arguments(parser)
    add_dim_argument(parser)
    add_preparation_arguments(parser)
    parser.add_argument("--save-predictions", action="store_true",
                        help="also write each task's ranked results to OUT/predictions/ (mteb's prediction files)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _names(value: str | None) -> list[str] | None:
    return [name.strip() for name in value.split(",") if name.strip()] if value else None


def _registered_tasks(names: list[str]) -> list:
    """Registered mteb tasks with their data loaded; an unreachable hub is a one-line error."""
    import mteb

    tasks = []
    for name in names:
        try:
            tasks.extend(mteb.get_tasks(tasks=[name]))
        except KeyError as exc:
            raise ConfigError(f"--tasks: {str(exc).strip(chr(34)).removeprefix('KeyError: ')}") from None
    for task in tasks:
        try:
            task.load_data()
        except OSError as exc:  # ConnectionError, the hub's LocalEntryNotFoundError, ... are OSErrors
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise VisEmbedError(f"mteb task {task.metadata.name} needs its data from the Hugging Face Hub "
                                f"({task.metadata.dataset['path']}), which cannot be reached: {detail}") from None
    return tasks


def _selected_tasks(args: argparse.Namespace) -> list:
    """The manifest's local tasks (--benchmark) or the registered ones with their data (--tasks)."""
    if args.benchmark is not None:
        from vis_embed.integrations.mteb_tasks import manifest_tasks

        tasks = manifest_tasks(args.benchmark, _names(args.datasets))
        if not tasks:
            raise ConfigError(f"{args.benchmark}: no dataset with a candidates or gallery layout")
        return tasks
    tasks = _registered_tasks(_names(args.tasks) or [])
    if not tasks:
        raise ConfigError("--tasks: no task named")
    return tasks


def run(args: argparse.Namespace) -> int:
    from vis_embed.integrations import require

    require("mteb", "mteb", "vis-embed mteb")
    if args.batch_size <= 0:
        raise ConfigError("--batch-size must be positive")
    if args.datasets and args.benchmark is None:
        raise ConfigError("--datasets selects datasets of --benchmark")
    import mteb

    from vis_embed.integrations.mteb import VisEmbedMtebModel, load_instructions

    instructions = load_instructions(args.instructions) if args.instructions else None  # checked before loading
    tasks = _selected_tasks(args)
    unused = sorted(set(instructions or {}) - {task.metadata.name for task in tasks})
    if unused:  # a typo would otherwise silently fall back to the task's own instructions
        log.warning("--instructions %s: no task named %s in this run", args.instructions, ", ".join(unused))
    model = VisEmbedMtebModel.from_pretrained(
        args.model, args.adapter, instructions=instructions, name=args.name, batch_size=args.batch_size,
        show_progress=not args.quiet, workers=args.workers, dim=args.dim, **model_settings(args))
    cache = mteb.ResultCache(cache_path=args.out)
    result = mteb.evaluate(model, tasks, cache=cache, overwrite_strategy="always", co2_tracker=False,
                           encode_kwargs={"batch_size": args.batch_size, "show_progress_bar": not args.quiet},
                           show_progress_bar=not args.quiet,
                           prediction_folder=args.out / "predictions" if args.save_predictions else None)
    meta = model.mteb_model_meta
    for task_result in result.task_results:
        path = cache.get_task_result_path(task_result.task_name, meta)
        print(f"{task_result.task_name}: {task_result.get_score():.4f} -> {path}")
    return 0
