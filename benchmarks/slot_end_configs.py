"""Hard negatives at slot ends on the configurations of docs/scheduling.md (issue 38).

For each configuration (a pairs dataset whose row i designates rows i+1 .. i+d; M, k, slots,
steps) and seed: anchors wanting negatives, anchors short of min(k, designated) while one of
their designated negatives was not in the batch (counted from the schedule's rows alone, as
tests/test_schedule_slot_end.py does:
``vis_embed.sampling.audit``), and the report's ``slot_end`` count.  Counts, so
deterministic per seed; no timing.

    .venv/bin/python benchmarks/slot_end_configs.py [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse

import numpy as np

from vis_embed.sampling import ScheduleSettings, SubDataset, plan_schedule
from vis_embed.sampling.audit import short_beside_a_free_negative

# (rows, designated d, M, k, slots, steps)
CONFIGS = [(120, 6, 18, 5, 4, 30), (90, 6, 18, 5, 3, 30), (200, 5, 12, 3, 4, 30),
           (150, 7, 16, 4, 3, 30), (400, 8, 20, 5, 4, 25)]


def edits(rows: int, designated: int) -> SubDataset:
    return SubDataset(name="edits", kind="pairs", ids=[f"e{i}" for i in range(rows)], identities=np.arange(rows),
                      hard_negatives=[[(i + j) % rows for j in range(1, designated + 1)] for i in range(rows)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    for rows, designated, m, k, slots, steps in CONFIGS:
        dataset = edits(rows, designated)
        cells = []
        for seed in args.seeds:
            schedule = plan_schedule([dataset], ScheduleSettings(steps=steps, global_batch_size=slots * m,
                                                                 interleave_batch_size=m, hard_negatives=k, seed=seed))
            wanting, missed = short_beside_a_free_negative(schedule, dataset, k, slots * m)
            slot_end = schedule.report["datasets"][0]["hard_negatives"]["shortfalls"]["slot_end"]
            cells.append(f"seed {seed}: {missed} of {wanting} short beside a free negative, slot_end {slot_end}")
        print(f"{rows} rows, d = {designated}, M = {m}, k = {k}, {slots} slots, {steps} steps: " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
