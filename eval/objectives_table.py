"""Summarise the peer-objectives comparison (eval/objectives_comparison.sh) into docs/objectives.md.

Reads OUT/<combo>-<seed>/{eval,eval_peer}/results.json (and OUT/base/ for the untrained model)
and writes (atomically) per combination the mean ± sample std over seeds of the synthetic
benchmark's P@1 groups and of the peer protocols' primary metrics, then the paired difference
of each combination against ``infonce_lora`` with a 95% t-interval (paired by seed).  Every
number comes from those files; the statistics helpers are eval/ablation_table.py's.  A reading
written into TABLE between the ``<!-- reading -->`` and ``<!-- /reading -->`` markers is kept.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ablation_table import _cell, _difference_cell, kept_reading, paired_difference  # noqa: E402

from vis_embed.io import atomic_write_text  # noqa: E402

COMBOS = {
    "infonce_lora": "InfoNCE + LoRA (VisME)",
    "two_tier_lora": "two-tier + LoRA (NearID)",
    "hinge_lora": "triplet hinge + LoRA (DreamSim)",
    "infonce_head": "InfoNCE + projection head (TLL / linear probe)",
}
REFERENCE = "infonce_lora"
# (column title, results file, where in it): groups of the synthetic manifest, peer metrics by dataset.
SYNTH_COLUMNS = ("ID-Rec", "Re-ID", "ID-Grd", "ID-Edit", "NearID", "MVEB", "MMEB", "overall")
PEER_COLUMNS = {"SSR": ("PeerNearID", "SSR"), "PA": ("PeerNearID", "pairwise_acc"), "2AFC": ("Peer2AFC", "2AFC"),
                "TLL R@1": ("PeerTLL", "R@1"), "TLL R@5": ("PeerTLL", "R@5"), "ID-Sim AP": ("PeerIDSimAP", "AP")}
PAIRED_COLUMNS = ("ID-Rec", "Re-ID", "NearID", "MVEB", "overall", "SSR", "PA", "2AFC", "TLL R@1", "ID-Sim AP")


def load_scores(directory: Path) -> dict[str, float] | None:
    """Every column of one evaluated model, or None when either evaluation is missing."""
    synth, peer = directory / "eval" / "results.json", directory / "eval_peer" / "results.json"
    if not synth.is_file() or not peer.is_file():
        return None
    groups = json.loads(synth.read_text(encoding="utf-8"))["groups"]
    datasets = json.loads(peer.read_text(encoding="utf-8"))["datasets"]
    scores = {column: float(groups[column]) for column in SYNTH_COLUMNS if column in groups}
    for column, (dataset, metric) in PEER_COLUMNS.items():
        value = datasets.get(dataset, {}).get("metrics", {}).get(metric)
        if value is not None:
            scores[column] = float(value)
    return scores


def _row(title: str, seeds: int | str, runs: list[dict[str, float]], columns: tuple[str, ...]) -> str:
    cells = [_cell([run[column] for run in runs if column in run]) for column in columns]
    return f"| {title} | {seeds} | " + " | ".join(cells) + " |"


def _paired_cell(runs: dict[str, dict[str, float]], reference: dict[str, dict[str, float]], seeds: list[str],
                 column: str) -> str:
    """Paired difference in one column over the seeds where both sides have it ("–" when none)."""
    both = [seed for seed in seeds if column in runs[seed] and column in reference[seed]]
    if not both:
        return "–"
    return _difference_cell(paired_difference([runs[s][column] for s in both], [reference[s][column] for s in both]))


def summarise(runs: dict[str, dict[str, dict[str, float]]], base: dict[str, float] | None) -> tuple[str, str, str]:
    """(synthetic-benchmark table, peer-protocol table, paired-difference table), Markdown."""
    tables = []
    for columns in (SYNTH_COLUMNS, tuple(PEER_COLUMNS)):
        lines = ["| combination | seeds | " + " | ".join(columns) + " |", "|---|---:|" + "---:|" * len(columns)]
        if base is not None:
            lines.append(_row("untrained model (reference)", "–", [base], columns))
        lines += [_row(f"{COMBOS[combo]} (`{combo}`)", len(by_seed), list(by_seed.values()), columns)
                  for combo, by_seed in runs.items()]
        tables.append("\n".join(lines))
    paired = ["| combination − `infonce_lora` | pairs | " + " | ".join(PAIRED_COLUMNS) + " |",
              "|---|---:|" + "---:|" * len(PAIRED_COLUMNS)]
    reference = runs.get(REFERENCE, {})
    for combo, by_seed in runs.items():
        seeds = [seed for seed in by_seed if seed in reference]
        if combo == REFERENCE or not seeds:
            continue
        cells = [_paired_cell(by_seed, reference, seeds, column) for column in PAIRED_COLUMNS]
        paired.append(f"| `{combo}` | {len(seeds)} | " + " | ".join(cells) + " |")
    return tables[0], tables[1], "\n".join(paired)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seeds", nargs="+", default=["0", "1", "2"])
    parser.add_argument("--combos", nargs="+", default=list(COMBOS), choices=list(COMBOS))
    parser.add_argument("--synth-size", default="small", help="the `vis-embed synth --size` the runs used")
    parser.add_argument("--recipe", type=Path, default=Path("recipes/ablation_sampling.yaml"))
    parser.add_argument("--hard-negatives", type=int, default=5)
    parser.add_argument("--command", default="bash eval/objectives_comparison.sh",
                        help="the command that reproduces it")
    parser.add_argument("--out", dest="markdown", type=Path, default=Path("docs/objectives.md"))
    args = parser.parse_args()
    runs = {}
    for combo in args.combos:
        by_seed = {seed: scores for seed in args.seeds if (scores := load_scores(args.out / f"{combo}-{seed}"))}
        if by_seed:
            runs[combo] = by_seed
    synth, peer, paired = summarise(runs, load_scores(args.out / "base"))
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
        f"Paired difference against `{REFERENCE}` (same seed = same initialisation and the same batches): "
        "mean [95% t-interval] in points; **bold**: the interval excludes 0.", "", paired, "",
        kept_reading(args.markdown), "",
        f"Produced on {dt.date.today().isoformat()} ({platform.machine()}, 2-core CPU sandbox, no GPU) by:", "",
        "```bash", args.command, "```", "",
    ])
    atomic_write_text(args.markdown, text)
    print(synth + "\n\n" + peer + "\n\n" + paired)


if __name__ == "__main__":
    main()
