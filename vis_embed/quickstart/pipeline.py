"""The quickstart's orchestration: the whole toolkit, end to end, on a laptop-class CPU.

The command (arguments, the printed summary) is :mod:`vis_embed.quickstart.cli`; the report
(tables, training curve) is :mod:`vis_embed.evaluation.quickstart_report`.

Stages (each one is skipped when its output already exists, so an interrupted quickstart
resumes where it stopped; OUT/quickstart.json records the settings the folder was started with,
by their resolved values, and a rerun with other settings is refused, so no report mixes two runs'
stages; the settings, --steps and --set included, are checked before any stage starts):

1. render the small synthetic identity benchmark       -> OUT/synth/{train,benchmark}.yaml
2. build a tiny random Qwen2-VL checkpoint             -> OUT/model/
3. evaluate it untrained                                -> OUT/before/results.json
4. schedule + train with the tiny recipe               -> OUT/run/final/ (LoRA adapter)
5. evaluate the trained adapter                         -> OUT/after/results.json
6. write the report                                     -> OUT/report.md (+ OUT/train_curve.png)

Why LoRA and not full fine-tuning: on a random tiny model, LoRA on every linear layer of both
towers learned identity several times faster than full fine-tuning in our calibration runs
(docs/calibration.md); it is also what the paper trains.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from vis_embed.prep.synth import checked_size, generate
from vis_embed import resources
from vis_embed.config import dotted_leaves
from vis_embed.errors import ConfigError
from vis_embed.evaluation.quickstart_report import plot_training_curve, write_report
from vis_embed.io import atomic_write_json, read_json_value
from vis_embed.model.embedding_config import EMBEDDING_CONFIG_FILE
from vis_embed.model.network.adaptation import saved_adaptation
from vis_embed.model.files.tiny import build_tiny_checkpoint

if TYPE_CHECKING:
    from vis_embed.training.recipe import Recipe

# torch-heavy modules (evaluation.api, training.*) are imported inside the stages that use
# them, so that ``vis-embed quickstart --help`` answers at once.
T = TypeVar("T")
STAGE_TIMES = "stage_times.json"
SETTINGS_FILE = "quickstart.json"
log = logging.getLogger(__name__)


@contextmanager
def recipe_path(explicit: Path | None = None) -> Iterator[Path]:
    """The recipe to train with: ``explicit``, else the packaged tiny recipe (no checkout needed)."""
    if explicit is None:
        with resources.tiny_recipe_path() as packaged:
            yield packaged
        return
    if not Path(explicit).is_file():
        raise ConfigError(f"recipe {explicit} not found")
    yield Path(explicit)


def claim_output_folder(out: Path, settings: dict[str, Any]) -> None:
    """Make ``out`` this quickstart's folder, or refuse it.

    A finished stage is found by its output and not redone, so a folder started with other
    settings (:func:`quickstart_settings`) would give a report that mixes the two runs' stages;
    a folder of other files could hold a ``model/`` or ``before/results.json`` that is not the
    quickstart's.  Both are refused; the settings go into ``OUT/quickstart.json``."""
    marker = out / SETTINGS_FILE
    if not marker.is_file():
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ConfigError(f"--out {out}: is not empty and not a quickstart output folder (no {SETTINGS_FILE}); "
                              f"the quickstart would take what it finds there for its own stages' output: "
                              f"choose a new or empty folder")
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(marker, settings)
        return
    previous = read_json_value(marker)
    differing = [f"{key}: {previous.get(key)!r} -> {settings.get(key)!r}"
                 for key in dict.fromkeys([*previous, *settings]) if previous.get(key) != settings.get(key)]
    if differing:
        shown = "; ".join(differing[:8]) + (f" (and {len(differing) - 8} more)" if len(differing) > 8 else "")
        raise ConfigError(f"--out {out} holds a quickstart started with other settings ({shown}); "
                          f"its finished stages would be reused: rerun with the same settings to resume, "
                          f"or choose another --out")


def _own_recipe_paths(out: Path) -> dict[str, str]:
    """The recipe keys the quickstart sets to its stages' places in ``out``."""
    return {"model": str(out / "model"), "data": str(out / "synth" / "train.yaml"),
            "schedule": str(out / "schedule.parquet"), "output_dir": str(out / "run")}


def resolve_recipe(out: Path, seed: int, steps: int | None, recipe: Path | None, overrides: list[str]) -> Recipe:
    """The recipe the quickstart trains with: the file (the packaged tiny one by default), its
    places in ``out``, ``seed``, ``steps`` as max_steps, then ``overrides`` (``--set``).  Validated
    by :func:`vis_embed.training.recipe.load_recipe` (ConfigError naming the key)."""
    from vis_embed.training.recipe import load_recipe

    # each path as a quoted YAML string: --set values are YAML, where "qs #1/run" reads as "qs"
    settings = [f"{key}={json.dumps(value)}" for key, value in _own_recipe_paths(out).items()] + [f"seed={seed}"]
    if steps is not None:
        settings.append(f"max_steps={steps}")
    with recipe_path(recipe) as recipe_file:
        return load_recipe(recipe_file, settings + list(overrides))


def quickstart_settings(out: Path, seed: int, size: str, recipe: Recipe) -> dict[str, Any]:
    """What ``OUT/quickstart.json`` records and a rerun must match: seed, size and every resolved
    recipe value (``recipe.KEY``), so ``--steps 300`` is the default's 300 and a recipe file or
    ``--set`` giving the same values is the same run; the stages' places in ``out`` are left out
    (the same folder spelt another way is the same folder)."""
    from vis_embed.training.recipe import recipe_to_dict

    values = dotted_leaves(recipe_to_dict(recipe))
    for key, place in _own_recipe_paths(out).items():
        if values.get(key) == place:
            del values[key]
    return {"seed": seed, "size": size, **{f"recipe.{key}": value for key, value in values.items()}}


class StageClock:
    """Seconds per stage, kept in ``OUT/stage_times.json``.

    A resumed quickstart finds a finished stage's output in a fraction of a second; report.md
    must still show how long the stage took when it did the work (and say it was resumed),
    not the near-zero time of finding it done.
    """

    def __init__(self, out: Path, total: int, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock  # seconds (a test passes a fake one)
        self.path = out / STAGE_TIMES
        self.seconds: dict[str, float] = (read_json_value(self.path)
                                          if self.path.is_file() else {})
        self.resumed: list[str] = []
        self.total, self.number = total, 0

    def run(self, name: str, title: str, done_marker: Path | None, work: Callable[[], T]) -> T:
        """Run ``work`` (which skips itself when ``done_marker`` exists) and record its time
        (not for a stage without a marker: it redoes its work every time, e.g. the report)."""
        self.number += 1
        finished = done_marker is not None and done_marker.exists()
        log.info("\n== %d/%d %s%s", self.number, self.total, title, " (done in an earlier run)" if finished else "")
        started = self.clock()
        result = work()
        elapsed = self.clock() - started
        if finished:
            self.resumed.append(name)
        elif done_marker is not None:
            self.seconds[name] = elapsed
            atomic_write_json(self.path, self.seconds)
        log.info("   %s (%.1f s)", result if isinstance(result, Path) else done_marker, elapsed)
        return result

    def table(self) -> list[str]:
        """Markdown rows: the recorded seconds; a resumed stage says so."""
        rows = ["| stage | seconds |", "|---|---:|"]
        for name in dict.fromkeys([*self.seconds, *self.resumed]):
            seconds = self.seconds.get(name)
            note = " (resumed: done by an earlier run)" if name in self.resumed else ""
            rows.append(f"| {name}{note} | {'–' if seconds is None else f'{seconds:.1f}'} |")
        return rows


def render_data(out: Path, seed: int, size: str, show_progress: bool) -> Path:
    synth_dir = out / "synth"
    if (synth_dir / "synth.json").is_file():
        return synth_dir
    return Path(generate(synth_dir, seed=seed, size=size, show_progress=show_progress))


def build_quickstart_checkpoint(out: Path, seed: int) -> Path:
    """OUT/model: the tiny random Qwen2-VL checkpoint (built once; returns its folder)."""
    model_dir = out / "model"
    if (model_dir / "config.json").is_file():
        return model_dir
    return Path(build_tiny_checkpoint(model_dir, arch="qwen2-vl", seed=seed))


def evaluate(model_dir: Path, adapter: Path | None, benchmark: Path, out_dir: Path,
             show_progress: bool) -> dict[str, Any]:
    from vis_embed.evaluation.api import evaluate_model

    results_path = out_dir / "results.json"
    if results_path.is_file():
        return read_json_value(results_path)
    return evaluate_model(model_dir, benchmark, out_dir, adapter=adapter, show_progress=show_progress)


def train(recipe: Recipe, show_progress: bool) -> Path:
    from vis_embed.training.trainer import Trainer

    run_dir = Path(recipe.output_dir)
    final = run_dir / "final"
    if saved_adaptation(final) is not None:  # the run finished (final/ is written whole)
        return final
    resume = run_dir.is_dir()  # a started run continues (train refuses a started directory otherwise)
    return Trainer(recipe, resume=resume, show_progress=show_progress).train()


def run_quickstart(out: Path, seed: int = 0, steps: int | None = None, size: str = "small",
                   recipe: Path | None = None, overrides: list[str] | None = None,
                   show_progress: bool = True) -> dict[str, Any]:
    """Run every stage; return ``{"before", "after", "report", "timings", "resumed"}``.

    ``timings``: seconds per stage as recorded when the stage did its work (a resumed stage
    keeps its earlier time); ``resumed``: the stages found done by an earlier run.
    """
    out = Path(out)
    checked_size(seed, size)  # every setting is checked before the folder is claimed or a stage starts
    training = resolve_recipe(out, seed, steps, recipe, list(overrides or []))
    claim_output_folder(out, quickstart_settings(out, seed, size, training))
    run_dir = Path(training.output_dir)  # OUT/run (resolve_recipe), unless --set output_dir moved it
    clock = StageClock(out, total=6)
    synth_dir = clock.run("render data", "rendering the synthetic identity benchmark", out / "synth" / "synth.json",
                          lambda: render_data(out, seed, size, show_progress))
    model_dir = clock.run("build model", "building a tiny random Qwen2-VL", out / "model" / "config.json",
                          lambda: build_quickstart_checkpoint(out, seed))
    benchmark = synth_dir / "benchmark.yaml"
    before = clock.run("evaluate untrained", "evaluating the untrained model", out / "before" / "results.json",
                       lambda: evaluate(model_dir, None, benchmark, out / "before", show_progress))

    adapter = clock.run("schedule + train", "scheduling and training (LoRA, GradCache)",
                        run_dir / "final" / EMBEDDING_CONFIG_FILE, lambda: train(training, show_progress))
    after = clock.run("evaluate trained", "evaluating the trained adapter", out / "after" / "results.json",
                      lambda: evaluate(model_dir, adapter, benchmark, out / "after", show_progress))

    def write() -> Path:
        curve = plot_training_curve(run_dir / "train_log.jsonl", out / "train_curve.png")
        return write_report(out, before, after, curve, clock.table(),
                            recipe_name="tiny_cpu.yaml" if recipe is None else Path(recipe).name)

    report = clock.run("write report", "writing the report", None, write)
    return {"before": before, "after": after, "report": report, "timings": dict(clock.seconds),
            "resumed": clock.resumed}


