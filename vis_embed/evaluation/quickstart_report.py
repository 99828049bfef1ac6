"""The quickstart's report: before/after tables, the training curve and ``OUT/report.md``.

Written by :func:`vis_embed.quickstart.pipeline.run_quickstart` from the two evaluations'
``results.json`` and the trainer's ``train_log.jsonl``; the per-meta-task bar charts and
retrieval grids it links are the evaluation's own (:mod:`vis_embed.evaluation.plots`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from vis_embed.data.results_file import ResultsFile
from vis_embed.data.taxonomy import BENCHMARK_SPLIT_KEYS, POOLED_SPLIT_KEYS, SPLITS
from vis_embed.evaluation.report import model_label
from vis_embed.io import atomic_path, atomic_write_text, read_jsonl

SMOOTHING_STEPS = 15  # moving-average window of the loss curve (the raw loss is drawn faintly)
STAGE_KEYS = ("Cls", "Ret", "ID-Rec", "Re-ID", "ID-Grd", "ID-Edit", *BENCHMARK_SPLIT_KEYS, *SPLITS, *POOLED_SPLIT_KEYS,
              "MMEB", "MVEB", "overall")


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

    rows = [row for _line, row in read_jsonl(log_path)]
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


Results = ResultsFile | Mapping[str, Any]  # a results.json, read or as the harness returns it


def comparison_markdown(before: Results, after: Results) -> str:
    """Before/after P@1 per group and per dataset, with the gain."""
    before, after = ResultsFile.of(before), ResultsFile.of(after)
    lines = ["| group | untrained P@1 | trained P@1 | gain |", "|---|---:|---:|---:|"]
    for key in STAGE_KEYS:
        old, new = before.groups.get(key), after.groups.get(key)
        if old is None and new is None:
            continue
        gain = None if old is None or new is None else new - old
        lines.append(f"| {key} | {_fmt(old)} | {_fmt(new)} | {'' if gain is None else f'{gain:+.1f}'} |")
    lines += ["", "| dataset | meta-task | split | untrained P@1 | trained P@1 |", "|---|---|---|---:|---:|"]
    for name, entry in after.datasets.items():
        earlier = before.datasets.get(name)
        old = None if earlier is None else earlier.metrics.get("P@1")
        new = entry.metrics.get("P@1")
        task, split = entry.meta_task or "", entry.split or ""
        lines.append(f"| {name} | {task} | {split} | {_fmt(old)} | {_fmt(new)} |")
    return "\n".join(lines)


def _bar_chart_section(out: Path, before: ResultsFile, after: ResultsFile) -> list[str]:
    """Per meta-task, the untrained chart beside the trained one (their titles name the model)."""
    charts = sorted((out / "after" / "plots").glob("*.png")) if (out / "after" / "plots").is_dir() else []
    if not charts:
        return []
    parts = ["## Precision@1 per meta-task", "",
             f"Left: {model_label(before.model)}; right: {model_label(after.model)}.", ""]
    for chart in charts:
        untrained = out / "before" / "plots" / chart.name
        pair = [f"![{chart.stem} untrained]({untrained.relative_to(out)})"] if untrained.is_file() else []
        parts.append(" ".join([*pair, f"![{chart.stem} trained]({chart.relative_to(out)})"]))
    return [*parts, ""]


def write_report(out: Path, before: Results, after: Results, curve: Path | None, stage_rows: list[str],
                 recipe_name: str = "tiny_cpu.yaml") -> Path:
    """OUT/report.md: the before/after tables, bar charts, training curve, grids and stage times;
    ``recipe_name``: the recipe trained with (the packaged ``tiny_cpu.yaml`` unless --recipe)."""
    before = ResultsFile.of(before, out / "before" / "results.json")
    after = ResultsFile.of(after, out / "after" / "results.json")
    grids = sorted((out / "after" / "grids").glob("*.png")) if (out / "after" / "grids").is_dir() else []
    parts = [
        "# vis_embed quickstart report", "",
        "A tiny random Qwen2-VL, evaluated on the synthetic identity benchmark before and after "
        f"LoRA training with the identity-aware schedule (recipe `{recipe_name}`). Held-out "
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
