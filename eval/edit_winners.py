"""Which candidate wins the synthetic ID-Edit queries (issue 38: why ID-Edit scores below chance).

SynthEdit (vis_embed/prep/synth/planner.py, ``eval_edit``) lists each query's candidates in a fixed
order: the right edit (the positive), the contrary edit of the same object, the same edit of its
look-alike, then right edits of other objects.  Benchmark version 1 also listed the unedited
source (the query's own image, without the instruction) second; it is recognised as the
candidate whose image is the query's, so both versions are read right.  P@1 below
1 / candidates means some hard candidate wins more often than a uniform pick would; this
counts, per model, the share of queries each role wins.  The JSON report carries the
benchmark's version and ``provenance`` (commit, command, machine, date) of the measurement.

    .venv/bin/python eval/edit_winners.py --model OUT/model --benchmark OUT/synth/benchmark.yaml \
        --adapter OUT/naive_unmasked-0/run/final OUT/naive_unmasked-1/run/final ... [--json F]

With no ``--adapter`` the untrained model is measured; ``--untrained`` adds it beside adapters.
Instructions and the image root come from the benchmark manifest's SynthEdit entry.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vis_embed.io import atomic_write_json  # noqa: E402
from vis_embed.model.runtime.embedder import Embedder  # noqa: E402

ROLES = ("edit (positive)", "unedited source", "contrary edit", "look-alike's edit")
OTHER = "another object's edit"
ORDER = (ROLES[0], ROLES[2], ROLES[3])  # the candidates' order once the source (if listed) is set aside


def candidate_roles(row: dict[str, Any]) -> list[str]:
    """Each candidate's role: the query's own image is the unedited source; the others, in order,
    the positive, the contrary edit, the look-alike's edit, then other objects' edits."""
    roles, rank = [], 0
    for candidate in row["candidates"]:
        if candidate.get("image") == row["query"].get("image"):
            roles.append(ROLES[1])
            continue
        roles.append(ORDER[rank] if rank < len(ORDER) else OTHER)
        rank += 1
    return roles


def edit_entry(benchmark: Path, name: str) -> dict[str, Any]:
    manifest = yaml.safe_load(benchmark.read_text(encoding="utf-8"))
    entries = manifest["datasets"] if isinstance(manifest, dict) else manifest
    for entry in entries:
        if entry.get("name") == name:
            return entry
    raise SystemExit(f"{benchmark}: no dataset named {name!r}")


def winners(embedder: Embedder, rows: list[dict[str, Any]], entry: dict[str, Any], base: Path) -> dict[str, Any]:
    """Share of queries won by each candidate role, and P@1."""
    queries = embedder.encode([row["query"] for row in rows], entry.get("query_instruction"), base_dir=base)
    pool = sorted({candidate["image"] for row in rows for candidate in row["candidates"]})
    index = {image: i for i, image in enumerate(pool)}
    pool_vectors = embedder.encode([{"image": image} for image in pool], entry.get("candidate_instruction"),
                                   base_dir=base)
    counts: dict[str, int] = {role: 0 for role in (*ROLES, OTHER)}
    for row, query in zip(rows, queries):
        scores = pool_vectors[[index[candidate["image"]] for candidate in row["candidates"]]] @ query
        counts[candidate_roles(row)[int(np.argmax(scores))]] += 1
    shares = {role: count / len(rows) for role, count in counts.items()}
    return {"queries": len(rows), "candidates": len(rows[0]["candidates"]), "share_won": shares,
            "p_at_1": shares[ROLES[0]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--benchmark", type=Path, required=True, help="the synth benchmark.yaml")
    parser.add_argument("--dataset", default="SynthEdit")
    parser.add_argument("--adapter", type=Path, nargs="*", default=[])
    parser.add_argument("--untrained", action="store_true", help="also the model without an adapter")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    entry = edit_entry(args.benchmark, args.dataset)
    base = args.benchmark.parent
    path = base / entry["path"]
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    image_root = base / entry.get("image_root", ".")
    runs: list[Path | None] = ([None] if args.untrained or not args.adapter else []) + list(args.adapter)
    from vis_embed.provenance import provenance

    manifest = yaml.safe_load(args.benchmark.read_text(encoding="utf-8"))
    report: dict[str, Any] = {"dataset": str(path), "benchmark_version": manifest.get("version"),
                              "provenance": provenance(), "runs": {}}
    for adapter in runs:
        embedder = Embedder.from_pretrained(args.model, adapter=adapter, device="cpu")
        result = winners(embedder, rows, entry, image_root)
        label = str(adapter) if adapter else "untrained"
        report["runs"][label] = result
        print(f"{label}: P@1 {result['p_at_1']:.1%} of {result['queries']} ({result['candidates']} candidates); "
              + ", ".join(f"{role} {share:.1%}" for role, share in result["share_won"].items()), flush=True)
    if len(report["runs"]) > 1:
        shares = np.array([[run["share_won"][role] for role in (*ROLES, OTHER)] for run in report["runs"].values()])
        report["mean_share_won"] = dict(zip((*ROLES, OTHER), shares.mean(axis=0).tolist()))
        report["min_max_share_won"] = {role: [float(shares[:, j].min()), float(shares[:, j].max())]
                                       for j, role in enumerate((*ROLES, OTHER))}
        print("mean over runs: " + ", ".join(f"{role} {share:.1%}" for role, share in report["mean_share_won"].items()))
    if args.json:
        atomic_write_json(args.json, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
