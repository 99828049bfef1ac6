"""Summarise the sampling ablation (eval/ablation_sampling.sh) into a Markdown table.

Reads the per-seed result files RESULTS/<variant>_seed<N>.json (eval/study_results.py; the
driver writes one after each run, and finished runs under OUT without one get one first) and writes
(atomically) P@1 (%) mean ± sample std over seeds per variant, the loss mask each run trained
with, the realised identity-repeat rate of each schedule (recomputed from the schedule
file, with the loss's own notion of "same identity"), and the difference of every variant
against the paper's baseline ``naive_unmasked`` with a 95% interval: paired by seed for a
variant on the same batches, Welch's unpaired one otherwise (eval/intervals.py).  Nothing is
typed in by hand: every number comes from the result files.  A reading written into TABLE
between the ``<!-- reading -->`` and ``<!-- /reading -->`` markers is kept.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from intervals import compare, difference_cell, runs_cell, same_batches  # noqa: E402
from power import design_of, detectable_cell, power_cell  # noqa: E402
from study_results import (fn_share_curve_rows, identity_repeat_rate, provenance_lines,  # noqa: E402,F401
                           read_seed_results, result_path, seed_result, write_seed_result)

from vis_embed.io import atomic_write_text  # noqa: E402

VARIANTS = {
    "naive_unmasked": "naive interleaved, no loss mask (the paper's baseline)",
    "naive_masked": "naive interleaved + loss mask",
    "naive": "naive interleaved + loss mask",  # the first ablation's name for naive_masked
    "identity": "identity-aware",
    "identity_hn": "identity-aware + hard negatives",
}
BASELINE = "naive_unmasked"
COLUMNS = ("ID-Rec", "Re-ID", "ID-Grd", "ID-Edit", "NearID", "MVEB", "MMEB", "overall")
PAIRED_COLUMNS = ("ID-Rec", "Re-ID", "MVEB", "overall")
MVEB_EFFECTS = (5.0, 12.0)  # the power table's MVEB effects: 5 points, and the paper's identity-aware gain
READING_START, READING_END = "<!-- reading -->", "<!-- /reading -->"

@dataclass
class Run:
    groups: dict[str, float]
    identity_mask: bool
    repeat_rate: float | None
    fn_share: float | None = None  # mean false-negative share of the softmax over training (train_log)
    schedule_hash: str | None = None  # the schedule file's hash: same hash, same batches


def run_from_record(record: dict[str, Any]) -> Run:
    """One run as the table needs it, from its per-seed result file (eval/study_results.py)."""
    return Run(record["metrics"], bool(record.get("identity_mask", True)), record.get("identity_repeat_rate"),
               (record.get("training") or {}).get("fn_share_mean"), record.get("schedule_hash"))


def backfill_results(out: Path, results: Path, study: str, variants: list[str], seeds: list[str],
                     data: Any | None, command: str) -> None:
    """Result files for finished runs under OUT that have none yet (runs made before the
    driver wrote them); their provenance is then this command's, not the run's own."""
    for variant in variants:
        for seed in seeds:
            directory = out / f"{variant}-{seed}"
            if result_path(results, variant, seed).is_file() or not (directory / "eval" / "results.json").is_file():
                continue
            write_seed_result(results, seed_result(study=study, arm=variant, seed=int(seed), run_dir=directory / "run",
                                                   schedule=directory / "schedule.parquet", data=data,
                                                   command=command, backfilled=True))


def _cell(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def _rate_cell(rates: list[float]) -> str:
    if not rates:
        return "–"
    if min(rates) == max(rates):
        return f"{100 * rates[0]:.1f}%"
    return f"{100 * statistics.mean(rates):.1f}% ({100 * min(rates):.1f}–{100 * max(rates):.1f})"


def _share_cell(runs: Any) -> str:
    """Mean over seeds of each run's mean false-negative share (%); "–" for runs logged before it existed."""
    shares = [run.fn_share for run in runs if run.fn_share is not None]
    return f"{100 * statistics.mean(shares):.2f}" if shares else "–"


def summarise(runs: dict[str, dict[str, Run]]) -> tuple[str, str, str]:
    """The per-variant table, the difference table and the power of each difference (Markdown)."""
    lines = ["| variant | loss mask | seeds | " + " | ".join(COLUMNS) + " | identity repeats | FN share % |",
             "|---|---|---:|" + "---:|" * len(COLUMNS) + "---:|---:|"]
    for variant, by_seed in runs.items():
        masks = sorted({"on" if run.identity_mask else "off" for run in by_seed.values()})
        cells = [_cell([run.groups[c] for run in by_seed.values() if c in run.groups]) for c in COLUMNS]
        rates = [run.repeat_rate for run in by_seed.values() if run.repeat_rate is not None]
        lines.append(f"| {VARIANTS[variant]} (`{variant}`) | {'/'.join(masks)} | {len(by_seed)} | "
                     + " | ".join(cells) + f" | {_rate_cell(rates)} | {_share_cell(by_seed.values())} |")
    paired = ["| variant − `naive_unmasked` | runs | interval | " + " | ".join(PAIRED_COLUMNS) + " |",
              "|---|---:|---|" + "---:|" * len(PAIRED_COLUMNS)]
    power = ["| variant − `naive_unmasked` | runs | interval | " + " | ".join(PAIRED_COLUMNS) + " | "
             + " | ".join(f"MVEB {effect:+g}" for effect in MVEB_EFFECTS) + " |",
             "|---|---:|---|" + "---:|" * (len(PAIRED_COLUMNS) + len(MVEB_EFFECTS))]
    baseline = runs.get(BASELINE, {})
    for variant, by_seed in runs.items():
        if variant == BASELINE or not baseline or not by_seed:
            continue
        hashes = ({s: {"schedule_hash": r.schedule_hash} for s, r in by_seed.items()},
                  {s: {"schedule_hash": r.schedule_hash} for s, r in baseline.items()})
        same = same_batches(*hashes)
        columns = {c: ({s: r.groups[c] for s, r in by_seed.items() if c in r.groups},
                       {s: r.groups[c] for s, r in baseline.items() if c in r.groups}) for c in PAIRED_COLUMNS}
        differences = [compare(*columns[c], same) for c in PAIRED_COLUMNS]
        head = f"| `{variant}` | {runs_cell(differences[0])} | {'paired' if same else 'Welch'} | "
        paired.append(head + " | ".join(difference_cell(d) for d in differences) + " |")
        if differences[0].low is not None:  # a power needs a spread: >= 2 runs a side
            designs = {c: design_of(*columns[c], same) for c in PAIRED_COLUMNS}
            power.append(head + " | ".join(detectable_cell(designs[c]) for c in PAIRED_COLUMNS) + " | "
                         + " | ".join(power_cell(designs["MVEB"], effect) for effect in MVEB_EFFECTS) + " |")
    return "\n".join(lines), "\n".join(paired), "\n".join(power)


def kept_reading(markdown: Path) -> str:
    """The hand-written reading of a previous TABLE (between the markers), or a placeholder."""
    if markdown.is_file():
        text = markdown.read_text(encoding="utf-8")
        if READING_START in text and READING_END in text:
            return text[text.index(READING_START): text.index(READING_END) + len(READING_END)]
    return f"{READING_START}\n(reading not written yet)\n{READING_END}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", help="the runs' folder: finished runs without a result file "
                        "get one first (the table itself reads only the result files)")
    parser.add_argument("--seeds", nargs="+", default=["0", "1", "2"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--synth-size", default="small", help="the `vis-embed synth --size` the runs used")
    parser.add_argument("--recipe", type=Path, default=Path("recipes/ablation_sampling.yaml"))
    parser.add_argument("--command", default="bash eval/ablation_sampling.sh", help="the command that reproduces it")
    parser.add_argument("--out", dest="markdown", type=Path, default=Path("docs/ablation.md"))
    parser.add_argument("--results", type=Path, help="per-seed result files (default: docs/results/<TABLE stem>)")
    args = parser.parse_args()
    results = args.results or Path("docs/results") / args.markdown.stem
    if args.out is not None:
        from vis_embed.data import load_train_config

        train_yaml = args.out / "synth" / "train.yaml"
        data = load_train_config(train_yaml) if train_yaml.is_file() else None
        backfill_results(args.out, results, args.markdown.stem, args.variants, args.seeds, data, args.command)
    records = read_seed_results(results, args.variants, args.seeds)
    runs = {variant: {seed: run_from_record(record) for seed, record in by_seed.items()}
            for variant, by_seed in records.items()}
    table, paired, power = summarise(runs)
    atomic_write_text(args.markdown, document(args, runs, (table, paired, power), results, records))
    print(table + "\n\n" + paired)


def document(args: argparse.Namespace, runs: dict[str, dict[str, Run]], tables: tuple[str, str, str], results: Path,
             by_arm: dict[str, dict[str, dict[str, Any]]]) -> str:
    table, paired, power = tables
    records = [r for by_seed in by_arm.values() for r in by_seed.values()]
    naive = {arm: by_seed for arm, by_seed in by_arm.items() if arm.startswith("naive")}
    seeds = sorted({seed for by_seed in runs.values() for seed in by_seed}, key=int)
    return "\n".join([
        "# Sampling ablation in miniature (the paper's Table 2)"
        + ("" if args.synth_size == "small" else f": {args.synth_size} data"), "",
        f"Same tiny random Qwen2-VL, same synthetic data (`vis-embed synth --size {args.synth_size} --seed 0`), "
        "same steps; only the batch schedule and the loss mask change. P@1 (%) on held-out identities, "
        f"mean ± sample std over training seeds {', '.join(seeds)}. *Identity repeats*: share of "
        "batch members whose identity is already in their batch (the false negatives of an unmasked "
        "loss), recomputed from each run's schedule file; mean (min–max) over seeds. *FN share*: mean share "
        "of a query's softmax denominator taken by same-label candidates over training (`fn_share` of "
        "train_log.jsonl, docs/training.md), mean over seeds.", "",
        table, "",
        f"Difference against `{BASELINE}`: mean [95% interval] in P@1 points; **bold**: the interval "
        "excludes 0. *paired*: the variant trained on the same batches (same schedule file hash, seed "
        "by seed), so the paired t-interval over seeds (*runs*: pairs); *Welch*: other batches, so the "
        "difference of means with Welch's unpaired interval over every seed of each (*runs*: variant "
        "vs baseline; eval/intervals.py).", "",
        paired, "",
        "Power of each comparison (eval/power.py: two-sided 95% t-intervals as above, the per-seed SDs "
        "taken as the true spread): per column, the difference (either sign, P@1 points) the design "
        "resolves with probability 0.8; *MVEB +5 / +12*: the probability that the MVEB interval excludes 0 "
        "when the true difference is 5 or 12 points (12: the paper's identity-aware gain).", "",
        power, "",
        *(["False-negative share (%) of the naive arms over training, mean over seeds, per tenth of the run "
           "(the identity-aware arms have none):", "", *fn_share_curve_rows(naive), ""]
          if any(r.get("training", {}).get("fn_share_by_decile") for b in naive.values() for r in b.values())
          else []),
        kept_reading(args.markdown), "",
        f"Built from the per-seed result files in `{results}` (docs/experiments.md) by "
        "`eval/ablation_table.py`; the runs' provenance (commit, machine, date):", "",
        *provenance_lines(records), "",
        "Command:", "",
        "```bash", args.command, "```", "",
        f"Recipe (`{args.recipe}`):", "", "```yaml", args.recipe.read_text(encoding="utf-8").rstrip(), "```", "",
    ])


if __name__ == "__main__":
    main()
