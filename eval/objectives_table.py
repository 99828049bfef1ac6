"""Summarise the peer-objectives comparison (eval/objectives_comparison.sh) into docs/objectives.md.

Reads the per-seed result files RESULTS/<combo>_seed<N>.json and RESULTS/untrained_seed0.json
(eval/study_results.py: the synthetic benchmark's groups plus the ``peer`` evaluation; the
driver writes one after each run, and finished runs under OUT without one get one first) and
writes (atomically) per combination the mean ± sample std over seeds of the synthetic benchmark's
P@1 groups and of the peer metrics (each dataset's primary one), then the difference of each
combination against ``infonce_lora`` with a 95% t-interval: paired by seed where the two trained
on the same schedule files (same hashes), Welch's unpaired one otherwise (eval/intervals.py).  Every
number comes from those files; the statistics helpers are eval/ablation_table.py's.  A reading
written into TABLE between the ``<!-- reading -->`` and ``<!-- /reading -->`` markers is kept.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ablation_table import _cell, kept_reading  # noqa: E402
from intervals import Difference, compare, difference_cell, runs_cell, same_batches  # noqa: E402
from study_results import (provenance_lines, read_seed_results, result_path, seed_result,  # noqa: E402
                           write_seed_result)

from vis_embed.io import atomic_write_text  # noqa: E402

COMBOS = {
    "infonce_lora": "InfoNCE + LoRA (VisME)",
    "two_tier_lora": "two-tier + LoRA (NearID)",
    "two_tier_margin_lora": "two-tier margin variant + LoRA (pre-issue-27 two_tier)",
    "hinge_lora": "triplet hinge + LoRA (DreamSim)",
    "infonce_head": "InfoNCE + projection head (TLL / linear probe)",
}
REFERENCE = "infonce_lora"
# (column title, results file, where in it): groups of the synthetic manifest, peer metrics by dataset.
SYNTH_COLUMNS = ("ID-Rec", "Re-ID", "ID-Grd", "ID-Edit", "NearID", "MVEB", "MMEB", "overall")
PEER_COLUMNS = {"SSR": ("PeerNearID", "SSR"), "PA": ("PeerNearID", "pairwise_acc"), "2AFC": ("Peer2AFC", "2AFC"),
                "TLL R@1": ("PeerTLL", "R@1"), "TLL R@5": ("PeerTLL", "R@5"), "ID-Sim AP": ("PeerIDSimAP", "AP")}
PAIRED_COLUMNS = ("ID-Rec", "Re-ID", "NearID", "MVEB", "overall", "SSR", "PA", "2AFC", "TLL R@1", "ID-Sim AP")


def record_scores(record: dict[str, Any]) -> dict[str, float]:
    """Every column of one evaluated model, from its result file (eval/study_results.py)."""
    scores = {column: float(record["metrics"][column]) for column in SYNTH_COLUMNS if column in record["metrics"]}
    peer = (record.get("evaluations") or {}).get("peer", {})
    for column, (dataset, metric) in PEER_COLUMNS.items():
        value = peer.get(dataset, {}).get("metrics", {}).get(metric)
        if value is not None:
            scores[column] = float(value)
    return scores


def backfill_results(out: Path, results: Path, combos: list[str], seeds: list[str], command: str) -> None:
    """Result files for finished runs under OUT that have none yet (made before the driver
    wrote them; their provenance is then this command's, not the run's own)."""
    wanted = [("untrained", "0", out / "base", None)] + [
        (combo, seed, out / f"{combo}-{seed}", out / f"{combo}-{seed}" / "run") for combo in combos for seed in seeds]
    for arm, seed, directory, run_dir in wanted:
        done = all((directory / name / "results.json").is_file() for name in ("eval", "eval_peer"))
        if not done or result_path(results, arm, seed).is_file():
            continue
        write_seed_result(results, seed_result(study="objectives", arm=arm, seed=int(seed), run_dir=run_dir,
                                               eval_dir=directory / "eval", command=command, backfilled=True,
                                               extra_evals={"peer": directory / "eval_peer"}))


def _row(title: str, seeds: int | str, runs: list[dict[str, float]], columns: tuple[str, ...]) -> str:
    cells = [_cell([run[column] for run in runs if column in run]) for column in columns]
    return f"| {title} | {seeds} | " + " | ".join(cells) + " |"


def _difference(runs: dict[str, dict[str, float]], reference: dict[str, dict[str, float]], column: str,
                paired: bool) -> Difference | None:
    """The difference in one column (None when a side has none): paired over the seeds where
    both have it when the combination trained on ``infonce_lora``'s batches, else Welch."""
    values = {seed: scores[column] for seed, scores in runs.items() if column in scores}
    baseline = {seed: scores[column] for seed, scores in reference.items() if column in scores}
    if paired:
        values = {seed: value for seed, value in values.items() if seed in baseline}
    return compare(values, baseline, paired) if values and baseline else None


def summarise(runs: dict[str, dict[str, dict[str, float]]], base: dict[str, float] | None,
              schedules: dict[str, dict[str, str | None]] | None = None) -> tuple[str, str, str]:
    """(synthetic-benchmark table, peer-protocol table, difference table), Markdown.

    ``schedules``: each run's schedule file hash (``{combo: {seed: hash}}``).  A combination is
    paired with ``infonce_lora`` by seed only where the seeds trained on the same schedule files
    (eval/intervals.py's ``same_batches``: the driver writes one schedule per combination and
    seed, equal by seed only while the scheduler's code is); otherwise, or without hashes, Welch."""
    tables = []
    for columns in (SYNTH_COLUMNS, tuple(PEER_COLUMNS)):
        lines = ["| combination | seeds | " + " | ".join(columns) + " |", "|---|---:|" + "---:|" * len(columns)]
        if base is not None:
            lines.append(_row("untrained model (reference)", "–", [base], columns))
        lines += [_row(f"{COMBOS[combo]} (`{combo}`)", len(by_seed), list(by_seed.values()), columns)
                  for combo, by_seed in runs.items()]
        tables.append("\n".join(lines))
    paired = ["| combination − `infonce_lora` | runs | interval | " + " | ".join(PAIRED_COLUMNS) + " |",
              "|---|---:|---|" + "---:|" * len(PAIRED_COLUMNS)]
    reference = runs.get(REFERENCE, {})
    hashes = {combo: {seed: {"schedule_hash": (schedules or {}).get(combo, {}).get(seed)} for seed in by_seed}
              for combo, by_seed in runs.items()}
    for combo, by_seed in runs.items():
        if combo == REFERENCE or not by_seed or not reference:
            continue
        same = same_batches(hashes[combo], hashes[REFERENCE])
        differences = [_difference(by_seed, reference, column, same) for column in PAIRED_COLUMNS]
        first = next((d for d in differences if d is not None), None)
        if first is None:
            continue
        cells = [difference_cell(d) if d is not None else "–" for d in differences]
        paired.append(f"| `{combo}` | {runs_cell(first)} | {'paired' if same else 'Welch'} | "
                      + " | ".join(cells) + " |")
    return tables[0], tables[1], "\n".join(paired)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", help="the runs' folder: finished runs without a result file "
                        "get one first (the table itself reads only the result files)")
    parser.add_argument("--seeds", nargs="+", default=["0", "1", "2"])
    parser.add_argument("--combos", nargs="+", default=list(COMBOS), choices=list(COMBOS))
    parser.add_argument("--synth-size", default="small", help="the `vis-embed synth --size` the runs used")
    parser.add_argument("--recipe", type=Path, default=Path("recipes/ablation_sampling.yaml"))
    parser.add_argument("--hard-negatives", type=int, default=5)
    parser.add_argument("--command", default="bash eval/objectives_comparison.sh",
                        help="the command that reproduces it")
    parser.add_argument("--out", dest="markdown", type=Path, default=Path("docs/objectives.md"))
    parser.add_argument("--results", type=Path, help="per-seed result files (default: docs/results/<TABLE stem>)")
    args = parser.parse_args()
    results = args.results or Path("docs/results") / args.markdown.stem
    if args.out is not None:
        backfill_results(args.out, results, args.combos, args.seeds, args.command)
    records = read_seed_results(results, args.combos, args.seeds)
    runs = {combo: {seed: record_scores(record) for seed, record in by_seed.items()}
            for combo, by_seed in records.items()}
    untrained = read_seed_results(results, ["untrained"]).get("untrained", {}).get("0")
    every = [r for by_seed in records.values() for r in by_seed.values()] + ([untrained] if untrained else [])
    schedules = {combo: {seed: record.get("schedule_hash") for seed, record in by_seed.items()}
                 for combo, by_seed in records.items()}
    synth, peer, paired = summarise(runs, record_scores(untrained) if untrained else None, schedules)
    text = "\n".join([
        "# Peer objectives and adaptation styles on one benchmark", "",
        f"Same tiny random Qwen2-VL, same synthetic data (`vis-embed synth --size {args.synth_size} --seed 0`), "
        f"same identity-aware schedule with up to {args.hard_negatives} designated hard negatives per anchor "
        f"(one schedule per seed, the same file for every combination), same steps and optimiser (`{args.recipe}`); "
        "only `loss.kind` and `adaptation` change. Mean ± sample std over training seeds "
        f"{', '.join(args.seeds)}; all scores in %, on identities never seen in training.", "",
        "Synthetic benchmark (MVEB/MMEB-style P@1 per meta-task; *NearID* = P@1 of the query's own object "
        "against its look-alike):", "", synth, "",
        "Peer protocols on the same eval images (`eval/objectives_peers.py`): NearID *SSR* and pairwise "
        "accuracy *PA*, DreamSim-style *2AFC*, TLL asymmetric recall, ID-Sim pair *AP*:", "", peer, "",
        f"Difference against `{REFERENCE}`: mean [95% t-interval] in points; **bold**: the interval excludes 0. "
        "*paired*: the combination trained on the same batches (same schedule file hash, seed by seed: same "
        "initialisation and batches), paired t-interval over seeds (*runs*: pairs); *Welch*: other batches, "
        "Welch's unpaired interval over every seed of each (*runs*: combination vs reference; eval/intervals.py).",
        "", paired, "",
        kept_reading(args.markdown), "",
        f"Built from the per-seed result files in `{results}` (docs/experiments.md) by "
        "`eval/objectives_table.py`; the runs' provenance (commit, machine, date):", "",
        *provenance_lines(every), "", "Command:", "",
        "```bash", args.command, "```", "",
    ])
    atomic_write_text(args.markdown, text)
    print(synth + "\n\n" + peer + "\n\n" + paired)


if __name__ == "__main__":
    main()
