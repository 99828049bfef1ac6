"""The cold-start sampling ablation at a plateau (eval/ablation_plateau.sh; docs/ablation_plateau.md).

``plateau-step``  the pre-registered training length from the pilot (RESULTS/pilot/): the first
                  evaluated step at which both pilot arms' training loss (mean over the last tenth
                  of the steps so far) is within ``--tolerance`` of its value at the pilot's end,
                  held inside [``--min-steps``, ``--max-steps``]
``table``         the results block of TABLE (between ``<!-- results -->`` and ``<!-- /results -->``;
                  the hand-written pre-registration around it is kept) from the result files only:
                  each arm's mean ± sample std; ``identity`` − ``naive_unmasked`` paired by seed
                  (pre-registered: the pair shares the LoRA initialisation and the scheduler's
                  seed, eval/intervals.py's ``paired_design``) for MVEB, its trained sets and its
                  transfer sets apart, with the power of each (eval/power.py); the false-negative
                  share per tenth of training; the pilot's curves.  No arm files: "not run yet".
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from intervals import compare, difference_cell, paired_design, runs_cell  # noqa: E402
from power import design_of, detectable_cell, power_cell  # noqa: E402
from study_results import fn_share_curve_rows, provenance_lines, read_seed_results  # noqa: E402

from vis_embed.io import atomic_write_text  # noqa: E402

ARMS = {"naive_unmasked": "naive interleaved, no loss mask (the paper's baseline)",
        "identity": "identity-aware + loss mask (the paper's method)"}
BASELINE, ARM = "naive_unmasked", "identity"
# small-dense trains objects and persons only (docs/synth.md): of MVEB's five synthetic sets,
# these two are trained tasks; the vehicle family, grounding and edits are transfer
TRAINED_SETS = ("SynthRec", "SynthReID")
TRANSFER_SETS = ("SynthVehicleReID", "SynthGrd", "SynthEdit")
COLUMNS = ("MVEB", "MVEB trained", "MVEB transfer", "ID-Rec", "Re-ID", "ID-Grd", "ID-Edit", "overall")
DIFFERENCE_COLUMNS = ("MVEB", "MVEB trained", "MVEB transfer", "ID-Rec", "Re-ID", "overall")
MVEB_EFFECT = 5.0  # the pre-registered effect (docs/ablation_plateau.md)
START, END = "<!-- results -->", "<!-- /results -->"
PILOT_ARM = re.compile(r"^pilot-(?P<variant>[a-z_]+)-step(?P<step>\d+)$")


def scores(record: dict[str, Any]) -> dict[str, float]:
    """The metric groups, plus MVEB's trained and transfer sets as means of their P@1."""
    values = dict(record["metrics"])
    datasets = record.get("datasets", {})
    for name, sets in (("MVEB trained", TRAINED_SETS), ("MVEB transfer", TRANSFER_SETS)):
        found = [datasets[s]["score"] for s in sets if datasets.get(s, {}).get("score") is not None]
        if len(found) == len(sets):
            values[name] = statistics.mean(found)
    return values


def pilot_curves(results: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """``{variant: {step: record}}`` of the pilot's evaluated checkpoints."""
    curves: dict[str, dict[int, dict[str, Any]]] = {}
    for arm, by_seed in read_seed_results(results / "pilot").items():
        match = PILOT_ARM.match(arm)
        if match:
            for record in by_seed.values():
                curves.setdefault(match["variant"], {})[int(match["step"])] = record
    return curves


def plateau_step(curves: dict[str, dict[int, dict[str, Any]]], tolerance: float = 0.05,
                 min_steps: int = 600, max_steps: int = 800) -> tuple[int, int | None]:
    """(the steps the arms train, the step the rule found or None): the first step at which every
    pilot arm's loss is within ``tolerance`` (relative) of its loss at the pilot's last step.  The
    last step itself is the reference, not a finding: met only there, the rule is not met."""
    if set(curves) != set(ARMS):
        raise ValueError(f"the pilot needs both arms {sorted(ARMS)}, has {sorted(curves)}")
    steps = sorted(set.intersection(*(set(curve) for curve in curves.values())))

    def loss(variant: str, step: int) -> float:
        return curves[variant][step]["training"]["final_loss_mean_last10pct"]

    found = next((step for step in steps[:-1]
                  if all(loss(v, step) <= (1 + tolerance) * loss(v, steps[-1]) for v in curves)), None)
    return min(max(found if found is not None else max_steps, min_steps), max_steps), found


def _cell(values: list[float], digits: int = 1) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def arm_rows(by_arm: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    lines = ["| arm | seeds | steps | " + " | ".join(COLUMNS) + " | final loss | FN share % (mean / last 10%) |",
             "|---|---:|---:|" + "---:|" * len(COLUMNS) + "---:|---:|"]
    for arm, by_seed in by_arm.items():
        runs = list(by_seed.values())
        steps = sorted({r["training"].get("steps") for r in runs})
        cells = [_cell([scores(r)[c] for r in runs if c in scores(r)]) for c in COLUMNS]
        training = [r["training"] for r in runs]
        loss = _cell([t["final_loss_mean_last10pct"] for t in training if t.get("final_loss_mean_last10pct")], 3)
        share = " / ".join(_cell([100 * t[key] for t in training if t.get(key) is not None], 2)
                           for key in ("fn_share_mean", "fn_share_last10pct"))
        lines.append(f"| {ARMS.get(arm, arm)} (`{arm}`) | {len(runs)} | {'/'.join(map(str, steps))} | "
                     + " | ".join(cells) + f" | {loss} | {share} |")
    return lines


def difference_rows(by_arm: dict[str, dict[str, dict[str, Any]]]) -> tuple[list[str], list[str]]:
    """``identity`` − ``naive_unmasked``: the intervals, and the power of each (pairing by seed
    pre-registered: eval/intervals.py's paired_design with by_seed)."""
    arm, baseline = by_arm.get(ARM, {}), by_arm.get(BASELINE, {})
    paired = paired_design(arm, baseline, by_seed=True)
    columns = {c: ({s: scores(r)[c] for s, r in arm.items() if c in scores(r)},
                   {s: scores(r)[c] for s, r in baseline.items() if c in scores(r)}) for c in DIFFERENCE_COLUMNS}
    differences = [compare(*columns[c], paired) for c in DIFFERENCE_COLUMNS]
    head = f"| `{ARM}` − `{BASELINE}` | {runs_cell(differences[0])} | {'paired' if paired else 'Welch'} | "
    intervals = ["| comparison | runs | interval | " + " | ".join(DIFFERENCE_COLUMNS) + " |",
                 "|---|---:|---|" + "---:|" * len(DIFFERENCE_COLUMNS),
                 head + " | ".join(difference_cell(d) for d in differences) + " |"]
    power = ["| comparison | runs | interval | " + " | ".join(DIFFERENCE_COLUMNS) + f" | MVEB {MVEB_EFFECT:+g} |",
             "|---|---:|---|" + "---:|" * (len(DIFFERENCE_COLUMNS) + 1)]
    if differences[0].low is not None:
        designs = {c: design_of(*columns[c], paired) for c in DIFFERENCE_COLUMNS}
        power.append(head + " | ".join(detectable_cell(designs[c]) for c in DIFFERENCE_COLUMNS)
                     + f" | {power_cell(designs['MVEB'], MVEB_EFFECT)} |")
    return intervals, power


def pilot_rows(curves: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    lines = ["| step | " + " | ".join(f"`{v}` loss (last tenth) | `{v}` MVEB trained | `{v}` MVEB" for v in ARMS)
             + " |", "|---:|" + "---:|---:|---:|" * len(ARMS)]
    for step in sorted(set().union(*(set(c) for c in curves.values()))):
        cells = []
        for variant in ARMS:
            record = curves.get(variant, {}).get(step)
            values = scores(record) if record else {}
            loss = (record or {}).get("training", {}).get("final_loss_mean_last10pct")
            cells += [f"{loss:.3f}" if loss is not None else "–",
                      *(f"{values[c]:.1f}" if c in values else "–" for c in ("MVEB trained", "MVEB"))]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return lines


def results_block(results: Path, command: str, recipe: Path) -> str:
    """The generated part of the page, markers included."""
    by_arm = read_seed_results(results, list(ARMS))
    curves = pilot_curves(results)
    parts = [START]
    if curves:
        steps, found = plateau_step(curves)
        parts += ["", "### Pilot: the loss and held-out curves (seed of `PILOT_SEED`, not an analysed seed)", "",
                  *pilot_rows(curves), "",
                  f"Plateau rule (pre-registered above): {'met at step ' + str(found) if found else 'not met'}; "
                  f"it sets **{steps} steps** for the arms (what each arm ran: the *steps* column).", ""]
    if not by_arm.get(ARM) or not by_arm.get(BASELINE):
        parts += ["", "**Not run yet.** No per-seed result files of both arms in "
                  f"`{results}`: the tables below appear once `eval/ablation_plateau.sh` has run.", ""]
    else:
        intervals, power = difference_rows(by_arm)
        every = [r for runs in by_arm.values() for r in runs.values()]
        every += [r for curve in curves.values() for r in curve.values()]
        parts += ["", "P@1 (%) on held-out identities, mean ± sample std over seeds; *MVEB trained*: mean of "
                  f"{', '.join(TRAINED_SETS)}; *MVEB transfer*: mean of {', '.join(TRANSFER_SETS)} (never "
                  "trained on in small-dense); *FN share*: the false negatives' share of a query's softmax "
                  "denominator (docs/training.md).", "", *arm_rows(by_arm), "",
                  "Difference: mean [95% interval] in P@1 points; **bold**: the interval excludes 0.", "",
                  *intervals, "",
                  "Power (eval/power.py, the per-seed SDs of the differences as the true spread): the difference "
                  f"each column resolves with probability 0.8, and the probability of resolving {MVEB_EFFECT:+g} "
                  "MVEB.", "", *power, "",
                  "False-negative share (%) over training, mean over seeds, per tenth of the run:", "",
                  *fn_share_curve_rows(by_arm), "",
                  f"Built by `eval/ablation_plateau_table.py table` from `{results}`; the runs' provenance:", "",
                  *provenance_lines(every), "", "Command:", "", "```bash", command, "```", "",
                  f"Recipe: `{recipe}` (steps, strategy, mask and seed set by the driver).", ""]
    return "\n".join([*parts, END])


def document(results: Path, markdown: Path, command: str, recipe: Path) -> str:
    """TABLE with its results block rebuilt; the pre-registration around it is kept."""
    text = markdown.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise ValueError(f"{markdown}: no {START} ... {END} block to fill")
    head, rest = text.split(START, 1)
    return head + results_block(results, command, recipe) + rest.split(END, 1)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    step = sub.add_parser("plateau-step", help="print the steps the arms train (the pilot's plateau rule)")
    step.add_argument("--results", type=Path, required=True)
    step.add_argument("--tolerance", type=float, default=0.05)
    step.add_argument("--min-steps", type=int, default=600)
    step.add_argument("--max-steps", type=int, default=800)
    table = sub.add_parser("table", help="rebuild TABLE's results block from the result files")
    table.add_argument("--results", type=Path, required=True)
    table.add_argument("--out", type=Path, required=True)
    table.add_argument("--command", required=True)
    table.add_argument("--recipe", type=Path, default=Path("recipes/ablation_dense.yaml"))
    args = parser.parse_args()
    if args.action == "plateau-step":
        try:
            print(plateau_step(pilot_curves(args.results), args.tolerance, args.min_steps, args.max_steps)[0])
        except ValueError as exc:
            raise SystemExit(f"error: {exc}: run MODE=pilot first, or set STEPS") from None
        return
    atomic_write_text(args.out, document(args.results, args.out, args.command, args.recipe))


if __name__ == "__main__":
    main()
