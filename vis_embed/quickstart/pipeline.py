"""The quickstart's orchestration: the whole toolkit, end to end, on a laptop-class CPU.

The command (arguments, the printed summary) is :mod:`vis_embed.quickstart.cli`; the report
(tables, training curve) is :mod:`vis_embed.evaluation.quickstart_report`.

Stages (each one is skipped when its output already exists, so an interrupted quickstart
resumes where it stopped; OUT/quickstart.json records the settings the folder was started with,
and a rerun with other settings is refused, so no report mixes two runs' stages):

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

import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from vis_embed.prep.synth import generate
from vis_embed import resources
from vis_embed.errors import ConfigError
from vis_embed.evaluation.quickstart_report import plot_training_curve, write_report
from vis_embed.io import atomic_write_json, read_json_value
from vis_embed.model.embedding_config import EMBEDDING_CONFIG_FILE
from vis_embed.model.network.adaptation import saved_adaptation
from vis_embed.model.files.tiny import build_tiny_checkpoint

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
    settings (seed, size, steps, recipe, --set) would give a report that mixes the two runs'
    stages; a folder of other files could hold a ``model/`` or ``before/results.json`` that
    is not the quickstart's.  Both are refused; the settings go into ``OUT/quickstart.json``."""
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
        raise ConfigError(f"--out {out} holds a quickstart started with other settings ({'; '.join(differing)}); "
                          f"its finished stages would be reused: rerun with the same settings to resume, "
                          f"or choose another --out")


def _recipe_digest(explicit: Path | None) -> str:
    """sha256 of the recipe file the quickstart trains with (the packaged one by default)."""
    with recipe_path(explicit) as recipe_file:
        return hashlib.sha256(recipe_file.read_bytes()).hexdigest()


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


def train(out: Path, model_dir: Path, synth_dir: Path, seed: int, steps: int | None,
          recipe_file: Path, overrides: list[str], show_progress: bool) -> Path:
    from vis_embed.training.recipe import load_recipe
    from vis_embed.training.trainer import Trainer

    run_dir = out / "run"
    final = run_dir / "final"
    if saved_adaptation(final) is not None:  # the run finished (final/ is written whole)
        return final
    settings = [f"model={model_dir}", f"data={synth_dir / 'train.yaml'}",
                f"schedule={out / 'schedule.parquet'}", f"output_dir={run_dir}", f"seed={seed}"]
    if steps is not None:
        settings.append(f"max_steps={steps}")
    recipe = load_recipe(recipe_file, settings + list(overrides))
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
    claim_output_folder(out, {"seed": seed, "size": size, "steps": steps, "recipe_sha256": _recipe_digest(recipe),
                              "overrides": list(overrides or [])})
    clock = StageClock(out, total=6)
    synth_dir = clock.run("render data", "rendering the synthetic identity benchmark", out / "synth" / "synth.json",
                          lambda: render_data(out, seed, size, show_progress))
    model_dir = clock.run("build model", "building a tiny random Qwen2-VL", out / "model" / "config.json",
                          lambda: build_quickstart_checkpoint(out, seed))
    benchmark = synth_dir / "benchmark.yaml"
    before = clock.run("evaluate untrained", "evaluating the untrained model", out / "before" / "results.json",
                       lambda: evaluate(model_dir, None, benchmark, out / "before", show_progress))

    def schedule_and_train() -> Path:
        with recipe_path(recipe) as recipe_file:
            return train(out, model_dir, synth_dir, seed, steps, recipe_file, list(overrides or []), show_progress)

    adapter = clock.run("schedule + train", "scheduling and training (LoRA, GradCache)",
                        out / "run" / "final" / EMBEDDING_CONFIG_FILE, schedule_and_train)
    after = clock.run("evaluate trained", "evaluating the trained adapter", out / "after" / "results.json",
                      lambda: evaluate(model_dir, adapter, benchmark, out / "after", show_progress))

    def write() -> Path:
        curve = plot_training_curve(out / "run" / "train_log.jsonl", out / "train_curve.png")
        return write_report(out, before, after, curve, clock.table(),
                            recipe_name="tiny_cpu.yaml" if recipe is None else Path(recipe).name)

    report = clock.run("write report", "writing the report", None, write)
    return {"before": before, "after": after, "report": report, "timings": dict(clock.seconds),
            "resumed": clock.resumed}


