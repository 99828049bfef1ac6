"""Summarise the sampling ablation (eval/ablation_sampling.sh) into a Markdown table.

Reads the per-seed result files RESULTS/<variant>_seed<N>.json (eval/study_results.py; the
driver writes one after each run, and finished runs under OUT without one get one first) and writes
(atomically) P@1 (%) mean ± sample std over seeds per variant, the loss mask each run trained
with, the realised identity-repeat rate of each schedule (recomputed from the schedule
file, with the loss's own notion of "same identity"), and the paired difference of every
variant against the paper's baseline ``naive_unmasked`` with a 95% t-interval (paired by
seed).  Nothing is typed in by hand: every number comes from the result files.  A reading written
into TABLE between the ``<!-- reading -->`` and ``<!-- /reading -->`` markers is kept.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_results import (identity_repeat_rate, provenance_lines, read_seed_results,  # noqa: E402,F401
                           result_path, seed_result, write_seed_result)

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
READING_START, READING_END = "<!-- reading -->", "<!-- /reading -->"

# Two-sided 95% quantiles t_{0.975, df} of Student's t for df = 1..30 (tests/test_ablation_table.py
# checks them against scipy); larger df use the Cornish-Fisher expansion around the normal.
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)
_Z975 = 1.959964


def t_quantile_975(df: int) -> float:
    """t_{0.975, df}: the half-width factor of a two-sided 95% t-interval."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


@dataclass(frozen=True)
class PairedDifference:
    """Mean of ``a - b`` over pairs and its 95% t-interval (``None`` bounds with < 2 pairs)."""

    mean: float
    low: float | None
    high: float | None
    pairs: int

    @property
    def significant(self) -> bool:
        """The interval excludes 0."""
        return self.low is not None and (self.low > 0 or self.high < 0)


def paired_difference(a: list[float], b: list[float]) -> PairedDifference:
    """Paired t-interval of ``mean(a - b)``; ``a[i]`` and ``b[i]`` are one pair (one seed)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"need equally many values, at least one (got {len(a)} and {len(b)})")
    differences = [x - y for x, y in zip(a, b)]
    mean = statistics.mean(differences)
    if len(differences) < 2:
        return PairedDifference(mean, None, None, len(differences))
    half = t_quantile_975(len(differences) - 1) * statistics.stdev(differences) / math.sqrt(len(differences))
    return PairedDifference(mean, mean - half, mean + half, len(differences))


@dataclass
class Run:
    groups: dict[str, float]
    identity_mask: bool
    repeat_rate: float | None
    fn_share: float | None = None  # mean false-negative share of the softmax over training (train_log)


def run_from_record(record: dict[str, Any]) -> Run:
    """One run as the table needs it, from its per-seed result file (eval/study_results.py)."""
    return Run(record["metrics"], bool(record.get("identity_mask", True)), record.get("identity_repeat_rate"),
               (record.get("training") or {}).get("fn_share_mean"))


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


def _difference_cell(difference: PairedDifference) -> str:
    if difference.low is None:
        return f"{difference.mean:+.1f}"
    text = f"{difference.mean:+.1f} [{difference.low:+.1f}, {difference.high:+.1f}]"
    return f"**{text}**" if difference.significant else text


def summarise(runs: dict[str, dict[str, Run]]) -> tuple[str, str]:
    """The per-variant table and the paired-difference table (Markdown)."""
    lines = ["| variant | loss mask | seeds | " + " | ".join(COLUMNS) + " | identity repeats | FN share % |",
             "|---|---|---:|" + "---:|" * len(COLUMNS) + "---:|---:|"]
    for variant, by_seed in runs.items():
        masks = sorted({"on" if run.identity_mask else "off" for run in by_seed.values()})
        cells = [_cell([run.groups[c] for run in by_seed.values() if c in run.groups]) for c in COLUMNS]
        rates = [run.repeat_rate for run in by_seed.values() if run.repeat_rate is not None]
        lines.append(f"| {VARIANTS[variant]} (`{variant}`) | {'/'.join(masks)} | {len(by_seed)} | "
                     + " | ".join(cells) + f" | {_rate_cell(rates)} | {_share_cell(by_seed.values())} |")
    paired = ["| variant − `naive_unmasked` | pairs | " + " | ".join(PAIRED_COLUMNS) + " |",
              "|---|---:|" + "---:|" * len(PAIRED_COLUMNS)]
    baseline = runs.get(BASELINE, {})
    for variant, by_seed in runs.items():
        seeds = [s for s in by_seed if s in baseline]
        if variant == BASELINE or len(seeds) == 0:
            continue
        cells = [_difference_cell(paired_difference([by_seed[s].groups[c] for s in seeds],
                                                    [baseline[s].groups[c] for s in seeds]))
                 for c in PAIRED_COLUMNS]
        paired.append(f"| `{variant}` | {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines), "\n".join(paired)


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
    table, paired = summarise(runs)
    atomic_write_text(args.markdown, document(args, runs, table, paired, results,
                                              [r for by_seed in records.values() for r in by_seed.values()]))
    print(table + "\n\n" + paired)


def document(args: argparse.Namespace, runs: dict[str, dict[str, Run]], table: str, paired: str, results: Path,
             records: list[dict[str, Any]]) -> str:
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
        f"Paired difference against `{BASELINE}` (same seed = same model initialisation and, for "
        "`naive_masked`, the same batches): mean [95% t-interval] in P@1 points; **bold**: the interval "
        "excludes 0.", "",
        paired, "",
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
