"""The warm-start false-negative study (eval/ablation_warm.sh): its time plan, its warm start, its table.

``plan``       the study's planned wall time from the timed probe (exit 1 over the budget)
``best-base``  the base checkpoint (step) with the highest held-out ID-Rec (RESULTS/base/)
``table``      TABLE from the result files only (RESULTS/*.json, RESULTS/base/, RESULTS/pilot/):
               per tau, each arm's mean ± sample std of ID-Rec, MVEB IND (trained tasks) and
               MVEB OOD (transfer) separately, MMEB, overall, final loss and the false-negative
               diagnostics; 95% intervals against ``naive_unmasked``: paired by seed for an arm on
               the same schedule files (``naive_masked``, checked by hash), Welch's unpaired
               interval for an arm on other batches (eval/intervals.py);
               the false-negative share over training (tenths of the run) per arm; the base
               run's checkpoints and the pilot.  A reading between the ``<!-- reading -->``
               markers of an existing TABLE is kept.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ablation_table import kept_reading  # noqa: E402
from intervals import compare, difference_cell, runs_cell, same_batches  # noqa: E402
from power import design_of, detectable_cell  # noqa: E402
from study_results import (benchmark_split_means, fn_share_curve_rows, provenance_lines,  # noqa: E402
                           read_seed_results)

from vis_embed.io import atomic_write_text  # noqa: E402

ARMS = {"naive_unmasked": "naive interleaved, no loss mask (the paper's baseline)",
        "naive_masked": "the same batches + loss mask",
        "identity": "identity-aware + loss mask"}
BASELINE = "naive_unmasked"
COLUMNS = ("ID-Rec", "MVEB IND", "MVEB OOD", "MMEB", "overall")
SELECTION_METRIC = "ID-Rec"


# ------------------------------------------------------------------ plan
def plan(probe: Path, *, base_steps: int, base_evals: int, runs: int, steps: int, jobs: int) -> dict[str, float]:
    """Seconds of each stage, from the probe's step times, start-up overhead and evaluation time."""
    log = [json.loads(line) for line in (probe / "run" / "train_log.jsonl").read_text().splitlines() if line]
    times = [row["step_time_s"] for row in log]
    per_step = statistics.mean(times[1:] if len(times) > 1 else times)  # step 0 pays one-off costs
    overhead = max(0.0, float((probe / "train_seconds").read_text()) - sum(times))  # load, schedule, save
    evaluation = float((probe / "eval_seconds").read_text())
    # base_evals: the adapters the base stage evaluates (its checkpoints, final/ included);
    # base_steps 0: the base run is already done (a MODE=full run after the pilot)
    base = base_steps * per_step + overhead + base_evals * evaluation if base_steps else 0.0
    one_run = steps * per_step + overhead + evaluation
    return {"seconds_per_step": per_step, "overhead_s": overhead, "eval_s": evaluation, "base_s": base,
            "one_run_s": one_run, "runs": runs, "runs_s": runs * one_run / max(1, jobs),
            "total_s": base + runs * one_run / max(1, jobs)}


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


# ------------------------------------------------------------------ base
def base_checkpoints(results: Path) -> list[tuple[int, dict[str, Any]]]:
    """(step, record) of every evaluated base checkpoint, by step."""
    records = read_seed_results(results / "base")
    # one record per checkpoint, under the base run's seed (BASE_SEED; files written before the
    # driver recorded it say 0)
    return sorted((int(arm.removeprefix("base-step")), next(iter(by_seed.values())))
                  for arm, by_seed in records.items())


def best_base_step(results: Path) -> int:
    """The checkpoint with the highest held-out ID-Rec (the earliest of equals)."""
    checkpoints = base_checkpoints(results)
    if not checkpoints:
        raise SystemExit(f"no base checkpoint results in {results / 'base'}")
    return max(checkpoints, key=lambda item: (item[1]["metrics"].get(SELECTION_METRIC, float("-inf")), -item[0]))[0]


# ------------------------------------------------------------------ table
def scores(record: dict[str, Any]) -> dict[str, float]:
    """The table's columns of one run: the result's groups plus MVEB's IND / OOD means."""
    return {**record["metrics"], **benchmark_split_means(record, "MVEB")}


def split_arm(arm: str) -> tuple[str, str]:
    """``"naive_masked-tau0.02"`` -> ("naive_masked", "0.02")."""
    variant, _, tau = arm.rpartition("-tau")
    return variant, tau


def _stat(values: list[float], digits: int) -> str:
    """mean ± sample std with ``digits`` decimals (ablation_table._cell's rule, digits chosen)."""
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def _fn_cell(records: list[dict[str, Any]], key: str, scale: float = 100.0, digits: int = 2) -> str:
    return _stat([r["training"][key] * scale for r in records if r["training"].get(key) is not None], digits)


def arm_rows(by_arm: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    lines = ["| arm | seeds | " + " | ".join(COLUMNS) + " | final loss | FN share % (mean / last 10%) "
             "| queries with FN % | FN logit − positive | final tau |",
             "|---|---:|" + "---:|" * len(COLUMNS) + "---:|---:|---:|---:|---:|"]
    for arm, by_seed in by_arm.items():
        runs = list(by_seed.values())
        cells = [_stat([scores(r)[c] for r in runs if c in scores(r)], 1) for c in COLUMNS]
        loss = _fn_cell(runs, "final_loss_mean_last10pct", 1.0, 3)
        share = f"{_fn_cell(runs, 'fn_share_mean')} / {_fn_cell(runs, 'fn_share_last10pct')}"
        taus = [r["temperature"]["final"] for r in runs if r.get("temperature", {}).get("final") is not None]
        variant, _tau = split_arm(arm)
        lines.append(f"| {ARMS.get(variant, variant)} (`{arm}`) | {len(runs)} | " + " | ".join(cells)
                     + f" | {loss} | {share} | {_fn_cell(runs, 'fn_query_fraction_mean', 100.0, 1)} | "
                     f"{_fn_cell(runs, 'fn_logit_gap_mean', 1.0)} | {_stat(taus, 4)} |")
    return lines


def paired_rows(by_arm: dict[str, dict[str, dict[str, Any]]], tau: str) -> tuple[list[str], list[str]]:
    """Each arm − the baseline: paired by seed where the arm trained on the baseline's batches
    (same schedule hash for every seed), else Welch over every seed of each (eval/intervals.py);
    and the power rows: the difference each column's design resolves with probability 0.8."""
    baseline = by_arm.get(f"{BASELINE}-tau{tau}", {})
    lines = [f"| arm − `{BASELINE}-tau{tau}` | runs | interval | " + " | ".join(COLUMNS) + " | same batches |",
             "|---|---:|---|" + "---:|" * len(COLUMNS) + "---|"]
    power = [f"| arm − `{BASELINE}-tau{tau}` | runs | interval | " + " | ".join(COLUMNS) + " |",
             "|---|---:|---|" + "---:|" * len(COLUMNS)]
    for arm, by_seed in by_arm.items():
        seeds = [s for s in by_seed if s in baseline]
        if split_arm(arm)[0] == BASELINE or not baseline:
            continue
        paired = same_batches(by_seed, baseline)
        cells, differences, resolved = [], [], []
        for column in COLUMNS:
            values = {s: scores(r)[column] for s, r in by_seed.items() if column in scores(r)}
            reference = {s: scores(r)[column] for s, r in baseline.items() if column in scores(r)}
            difference = compare(values, reference, paired) if values and reference else None
            differences.append(difference)
            cells.append(difference_cell(difference) if difference is not None else "–")
            resolved.append(detectable_cell(design_of(values, reference, paired))
                            if difference is not None and difference.low is not None else "–")
        same = sum(by_seed[s].get("schedule_hash") is not None
                   and by_seed[s].get("schedule_hash") == baseline[s].get("schedule_hash") for s in seeds)
        first = next((d for d in differences if d is not None), None)
        head = f"| `{arm}` | {runs_cell(first) if first else '–'} | {'paired' if paired else 'Welch'} | "
        lines.append(head + " | ".join(cells) + f" | {same}/{len(seeds)} |")
        power.append(head + " | ".join(resolved) + " |")
    return lines, power


def base_rows(results: Path) -> list[str]:
    checkpoints = base_checkpoints(results)
    if not checkpoints:
        return ["(no base results)"]
    best = best_base_step(results)
    lines = ["| base step | " + " | ".join(COLUMNS) + " | warm start |", "|---:|" + "---:|" * len(COLUMNS) + "---|"]
    for step, record in checkpoints:
        values = scores(record)
        cells = [f"{values[c]:.1f}" if c in values else "–" for c in COLUMNS]
        lines.append(f"| {step} | " + " | ".join(cells) + f" | {'**yes**' if step == best else ''} |")
    return lines


def pilot_rows(results: Path) -> list[str]:
    records = read_seed_results(results / "pilot")
    if not records:
        return []
    lines = ["| from base step | tau | FN share % (mean / last 10%) | own image % of FN mass | FN logit − positive "
             "(all / not own image) | final loss / tau (unmasked) | ID-Rec unmasked | ID-Rec masked | "
             "MVEB IND masked − unmasked | MVEB OOD masked − unmasked |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    starts: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
    for arm, by_seed in records.items():  # arm: from<step>-<variant>-tau<tau>
        head, _, tau = arm.rpartition("-tau")
        step, _, variant = head.removeprefix("from").partition("-")
        starts.setdefault((int(step), tau), {})[variant] = by_seed["0"]
    for (step, tau), pair in sorted(starts.items()):
        unmasked, masked = pair.get("naive_unmasked"), pair.get("naive_masked")
        if unmasked is None or masked is None:
            continue
        u, m = scores(unmasked), scores(masked)
        t = unmasked["training"]
        share = f"{100 * (t.get('fn_share_mean') or 0):.2f} / {100 * (t.get('fn_share_last10pct') or 0):.2f}"
        diff = [f"{m[c] - u[c]:+.1f}" if c in m and c in u else "–" for c in ("MVEB IND", "MVEB OOD")]
        # a learnable tau that diverges shows here first (loss up, tau at its clamp): LEARN_002=false then
        stability = f"{_stat([t['final_loss_mean_last10pct']], 3)} / {_stat([t['final_tau']], 4)}" \
            if t.get("final_loss_mean_last10pct") is not None and t.get("final_tau") is not None else "–"
        own = _fn_cell([unmasked], "fn_own_image_share_mean")
        gaps = " / ".join(_fn_cell([unmasked], key, 1.0) for key in ("fn_logit_gap_mean", "fn_logit_gap_other_mean"))
        lines.append(f"| {step} | {tau} | {share} | {own} | {gaps} | {stability} | "
                     f"{u.get('ID-Rec', float('nan')):.1f} | {m.get('ID-Rec', float('nan')):.1f} | "
                     + " | ".join(diff) + " |")
    return lines


def document(results: Path, markdown: Path, command: str, recipe: Path, base_recipe: Path) -> str:
    records = read_seed_results(results)
    by_tau: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for arm in sorted(records, key=lambda a: (split_arm(a)[1], list(ARMS).index(split_arm(a)[0])
                                              if split_arm(a)[0] in ARMS else 99)):
        by_tau.setdefault(split_arm(arm)[1], {})[arm] = records[arm]
    every = [r for by_seed in records.values() for r in by_seed.values()]
    every += [r for _, r in base_checkpoints(results)]
    every += [r for by_seed in read_seed_results(results / "pilot").values() for r in by_seed.values()]
    parts = ["# Warm-start false-negative study", "",
             "Every arm continues from one adapter trained identity-aware (the base checkpoint with the highest "
             "held-out ID-Rec, below) for the same steps, with a fresh optimiser; only the batch schedule, the loss "
             "mask, the temperature and the seed change. P@1 (%): mean ± sample std over seeds. *MVEB IND*: MVEB's "
             "trained tasks, *MVEB OOD*: its transfer tasks (separate means). *FN share*: mean share of a query's "
             "softmax denominator taken by its false negatives (same label, not its positive), over the unmasked "
             "denominator (docs/training.md); *queries with FN*: share of queries with at least one; *FN logit − "
             "positive*: their mean logit minus the positive's.", "",
             "## Base run (the warm start)", "", *base_rows(results), ""]
    pilot = pilot_rows(results)
    if pilot:
        parts += ["## Pilot (seed 0, from each base checkpoint)", "", *pilot, ""]
    for tau, by_arm in by_tau.items():
        learnable = {str(r.get("temperature", {}).get("learnable")) for b in by_arm.values() for r in b.values()}
        differences, power = paired_rows(by_arm, tau)
        parts += [f"## tau {tau} (learnable: {'/'.join(sorted(learnable))})", "", *arm_rows(by_arm), "",
                  "Difference against the baseline: mean [95% interval] in P@1 points; **bold**: the interval "
                  "excludes 0. *paired*: an arm on the baseline's batches (`naive_masked`: same schedule file, "
                  "seed by seed), paired t-interval over the seeds (*runs*: pairs); *Welch*: an arm on other "
                  "batches (identity-aware), difference of means with Welch's unpaired interval over every "
                  "seed of each (*runs*: arm vs baseline); *same batches*: seeds whose schedule files have "
                  "the same hash.", "", *differences, "",
                  "Power (eval/power.py: two-sided 95% t-intervals as above, the per-seed SDs taken as the true "
                  "spread): the difference (either sign, P@1 points) each comparison resolves with probability "
                  "0.8.", "", *power, "",
                  "False-negative share (%) over training, mean over seeds, per tenth of the run:", "",
                  *fn_share_curve_rows(by_arm), ""]
    parts += [kept_reading(markdown), "",
              f"Built by `eval/ablation_warm_table.py table` from the per-seed result files in `{results}` "
              "(docs/experiments.md); the runs' provenance (commit, machine, date):", "",
              *provenance_lines(every), "", "Command:", "", "```bash", command, "```", ""]
    for title, path in (("Arms' recipe", recipe), ("Base recipe", base_recipe)):
        if path.is_file():
            parts += [f"{title} (`{path}`):", "", "```yaml", path.read_text(encoding="utf-8").rstrip(), "```", ""]
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("plan")
    p.add_argument("--probe", type=Path, required=True)
    for name in ("--base-steps", "--base-evals", "--runs", "--steps", "--jobs"):
        p.add_argument(name, type=int, required=True)
    p.add_argument("--budget-hours", type=float, default=6.0)
    b = sub.add_parser("best-base")
    b.add_argument("--results", type=Path, required=True)
    t = sub.add_parser("table")
    t.add_argument("--results", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--command", default="bash eval/ablation_warm.sh")
    t.add_argument("--recipe", type=Path, default=Path("recipes/ablation_warm.yaml"))
    t.add_argument("--base-recipe", type=Path, default=Path("recipes/ablation_dense.yaml"))
    args = parser.parse_args()
    if args.action == "plan":
        estimate = plan(args.probe, base_steps=args.base_steps, base_evals=args.base_evals, runs=args.runs,
                        steps=args.steps, jobs=args.jobs)
        print(f"plan: {estimate['seconds_per_step']:.2f} s/step, {estimate['overhead_s']:.0f} s start-up, "
              f"{estimate['eval_s']:.0f} s per evaluation (probe); base {_hours(estimate['base_s'])}; "
              f"{args.runs} runs x {_hours(estimate['one_run_s'])} / {args.jobs} jobs = {_hours(estimate['runs_s'])}; "
              f"total {_hours(estimate['total_s'])} (budget {args.budget_hours:g} h)")
        raise SystemExit(0 if estimate["total_s"] <= args.budget_hours * 3600 else 1)
    if args.action == "best-base":
        print(best_base_step(args.results))
        return
    atomic_write_text(args.out, document(args.results, args.out, args.command, args.recipe, args.base_recipe))
    print(args.out)


if __name__ == "__main__":
    main()
