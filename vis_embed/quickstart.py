"""``vis-embed quickstart``: the whole toolkit, end to end, on a laptop-class CPU.

Stages (each one is skipped when its output already exists, so an interrupted quickstart
resumes where it stopped):

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

import argparse
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from data_prep.synth import generate
from vis_embed import resources
from vis_embed.data.taxonomy import BENCHMARK_SPLIT_KEYS, POOLED_SPLIT_KEYS, SPLITS
from vis_embed.errors import ConfigError
from vis_embed.evaluation.report import model_label
from vis_embed.io import atomic_path, atomic_write_json, atomic_write_text
from vis_embed.model.tiny import build_tiny_checkpoint

# torch-heavy modules (evaluation.api, training.*) are imported inside the stages that use
# them, so that ``vis-embed quickstart --help`` answers at once.
T = TypeVar("T")
STAGE_TIMES = "stage_times.json"
SMOOTHING_STEPS = 15  # moving-average window of the loss curve (the raw loss is drawn faintly)
STAGE_KEYS = ("Cls", "Ret", "ID-Rec", "Re-ID", "ID-Grd", "ID-Edit", *BENCHMARK_SPLIT_KEYS, *SPLITS, *POOLED_SPLIT_KEYS,
              "MMEB", "MVEB", "overall")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("quickstart_out"), help="output folder")
    parser.add_argument("--seed", type=int, default=0, help="seed of data, model and training")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the tiny recipe's)")
    parser.add_argument("--size", default="small", help="synthetic benchmark size (tiny | small | full)")
    parser.add_argument("--recipe", type=Path, default=None,
                        help="training recipe (default: the tiny recipe shipped with vis_embed, "
                             "a copy of recipes/tiny_cpu.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a recipe key (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


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


class StageClock:
    """Seconds per stage, kept in ``OUT/stage_times.json``.

    A resumed quickstart finds a finished stage's output in a fraction of a second; report.md
    must still show how long the stage took when it did the work (and say it was resumed),
    not the near-zero time of finding it done.
    """

    def __init__(self, out: Path, total: int) -> None:
        self.path = out / STAGE_TIMES
        self.seconds: dict[str, float] = (json.loads(self.path.read_text(encoding="utf-8"))
                                          if self.path.is_file() else {})
        self.resumed: list[str] = []
        self.total, self.number = total, 0

    def run(self, name: str, title: str, done_marker: Path | None, work: Callable[[], T]) -> T:
        """Run ``work`` (which skips itself when ``done_marker`` exists) and record its time
        (not for a stage without a marker: it redoes its work every time, e.g. the report)."""
        self.number += 1
        finished = done_marker is not None and done_marker.exists()
        print(f"\n== {self.number}/{self.total} {title}{' (done in an earlier run)' if finished else ''}", flush=True)
        started = time.perf_counter()
        result = work()
        elapsed = time.perf_counter() - started
        if finished:
            self.resumed.append(name)
        elif done_marker is not None:
            self.seconds[name] = elapsed
            atomic_write_json(self.path, self.seconds)
        print(f"   {result if isinstance(result, Path) else done_marker} ({elapsed:.1f} s)", flush=True)
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
        return json.loads(results_path.read_text(encoding="utf-8"))
    return evaluate_model(model_dir, benchmark, out_dir, adapter=adapter, show_progress=show_progress)


def train(out: Path, model_dir: Path, synth_dir: Path, seed: int, steps: int | None,
          recipe_file: Path, overrides: list[str], show_progress: bool) -> Path:
    from vis_embed.training.recipe import load_recipe
    from vis_embed.training.trainer import Trainer

    run_dir = out / "run"
    final = run_dir / "final"
    if (final / "adapter_config.json").is_file():
        return final
    settings = [f"model={model_dir}", f"data={synth_dir / 'train.yaml'}",
                f"schedule={out / 'schedule.parquet'}", f"output_dir={run_dir}", f"seed={seed}"]
    if steps is not None:
        settings.append(f"max_steps={steps}")
    recipe = load_recipe(recipe_file, settings + list(overrides))
    resume = run_dir.is_dir()  # a started run continues (train refuses a started directory otherwise)
    return Trainer(recipe, resume=resume, show_progress=show_progress).train()


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` values (fewer at the start, so no step is dropped)."""
    sums = np.concatenate([[0.0], np.cumsum(np.asarray(values, dtype=np.float64))])
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    return ((sums[ends] - sums[starts]) / (ends - starts)).tolist()


def plot_training_curve(log_path: Path, out_path: Path) -> Path | None:
    """The loss (raw, faint, and its moving average) against the step, from the trainer's
    ``train_log.jsonl``; a temperature panel only when tau was learned (a fixed tau is a flat line)."""
    if not log_path.is_file():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in log_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    steps, losses, taus = ([row[key] for row in rows] for key in ("step", "loss", "tau"))
    tau_learned = max(taus) - min(taus) > 1e-6 * max(abs(tau) for tau in taus)
    figure, axes = plt.subplots(1, 2 if tau_learned else 1, figsize=(10, 3.5) if tau_learned else (6, 3.5),
                                squeeze=False)
    loss_axis = axes[0][0]
    window = min(SMOOTHING_STEPS, len(losses))
    loss_axis.plot(steps, losses, linewidth=0.6, alpha=0.3, color="tab:blue", label="per step")
    loss_axis.plot(steps, moving_average(losses, window), linewidth=1.6, color="tab:blue",
                   label=f"mean of the last {window} steps")
    title = "training loss" if tau_learned else f"training loss (tau fixed at {taus[0]:.3f})"
    loss_axis.set(xlabel="step", ylabel="InfoNCE loss", title=title)
    loss_axis.legend(loc="upper right", fontsize=8)
    if tau_learned:
        axes[0][1].plot(steps, taus, color="tab:orange")
        axes[0][1].set(xlabel="step", ylabel="tau", title="temperature (learned)")
    figure.tight_layout()
    with atomic_path(out_path) as tmp:
        figure.savefig(tmp, dpi=110)
    plt.close(figure)
    return out_path


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def comparison_markdown(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Before/after P@1 per group and per dataset, with the gain."""
    lines = ["| group | untrained P@1 | trained P@1 | gain |", "|---|---:|---:|---:|"]
    for key in STAGE_KEYS:
        old, new = before["groups"].get(key), after["groups"].get(key)
        if old is None and new is None:
            continue
        gain = None if old is None or new is None else new - old
        lines.append(f"| {key} | {_fmt(old)} | {_fmt(new)} | {'' if gain is None else f'{gain:+.1f}'} |")
    lines += ["", "| dataset | meta-task | split | untrained P@1 | trained P@1 |", "|---|---|---|---:|---:|"]
    for name, entry in after["datasets"].items():
        old = before["datasets"].get(name, {}).get("metrics", {}).get("P@1")
        new = entry.get("metrics", {}).get("P@1")
        lines.append(f"| {name} | {entry.get('meta_task', '')} | {entry.get('split', '')} | {_fmt(old)} | {_fmt(new)} |")
    return "\n".join(lines)


def _bar_chart_section(out: Path, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Per meta-task, the untrained chart beside the trained one (their titles name the model)."""
    charts = sorted((out / "after" / "plots").glob("*.png")) if (out / "after" / "plots").is_dir() else []
    if not charts:
        return []
    parts = ["## Precision@1 per meta-task", "",
             f"Left: {model_label(before.get('model', {}))}; right: {model_label(after.get('model', {}))}.", ""]
    for chart in charts:
        untrained = out / "before" / "plots" / chart.name
        pair = [f"![{chart.stem} untrained]({untrained.relative_to(out)})"] if untrained.is_file() else []
        parts.append(" ".join([*pair, f"![{chart.stem} trained]({chart.relative_to(out)})"]))
    return [*parts, ""]


def write_report(out: Path, before: dict[str, Any], after: dict[str, Any], curve: Path | None,
                 stage_rows: list[str]) -> Path:
    """OUT/report.md: the before/after tables, bar charts, training curve, grids and stage times."""
    grids = sorted((out / "after" / "grids").glob("*.png")) if (out / "after" / "grids").is_dir() else []
    parts = [
        "# vis_embed quickstart report", "",
        "A tiny random Qwen2-VL, evaluated on the synthetic identity benchmark before and after "
        "LoRA training with the identity-aware schedule (recipe `tiny_cpu.yaml`). Held-out "
        "identities only: nothing evaluated here was seen in training.", "",
        "## Precision@1 (%)", "", comparison_markdown(before, after), "",
    ]
    parts += _bar_chart_section(out, before, after)
    if curve is not None:
        parts += ["## Training curve", "", f"![training loss]({curve.relative_to(out)})", ""]
    if grids:
        parts += ["## Retrieval examples after training (green = correct identity)", ""]
        parts += [f"![{grid.stem}]({grid.relative_to(out)})" for grid in grids]
        parts.append("")
    parts += ["## Time per stage", "", *stage_rows]
    report = out / "report.md"
    atomic_write_text(report, "\n".join(parts) + "\n")
    return report


def run_quickstart(out: Path, seed: int = 0, steps: int | None = None, size: str = "small",
                   recipe: Path | None = None, overrides: list[str] | None = None,
                   show_progress: bool = True) -> dict[str, Any]:
    """Run every stage; return ``{"before", "after", "report", "timings", "resumed"}``.

    ``timings``: seconds per stage as recorded when the stage did its work (a resumed stage
    keeps its earlier time); ``resumed``: the stages found done by an earlier run.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
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
                        out / "run" / "final" / "adapter_config.json", schedule_and_train)
    after = clock.run("evaluate trained", "evaluating the trained adapter", out / "after" / "results.json",
                      lambda: evaluate(model_dir, adapter, benchmark, out / "after", show_progress))

    def write() -> Path:
        curve = plot_training_curve(out / "run" / "train_log.jsonl", out / "train_curve.png")
        return write_report(out, before, after, curve, clock.table())

    report = clock.run("write report", "writing the report", None, write)
    return {"before": before, "after": after, "report": report, "timings": dict(clock.seconds),
            "resumed": clock.resumed}


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
