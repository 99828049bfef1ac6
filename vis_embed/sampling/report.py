"""The schedule report: what the scheduler did per dataset, as JSON and as a printed table.

Per dataset: rows, identities, identities excluded from anchoring (single instance),
expected vs realised slot share, expected vs realised identity draw frequencies (total
variation distance and a chi-square statistic over anchor draws), and hard-negative
coverage.  Global: fallbacks taken (truncated hard-negative groups, extra candidate rounds).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vis_embed.sampling.types import ROLE_ANCHOR, IdentityDraws, Schedule, ScheduleStats

_TOP_IDENTITIES = 5


def build_report(schedule: Schedule, stats: ScheduleStats) -> dict[str, Any]:
    """The report (JSON-ready) of an identity-aware schedule, from its rows and the planner's stats."""
    settings = schedule.settings
    m, k = settings.interleave_batch_size, settings.hard_negatives
    slot_dataset = schedule.dataset.reshape(-1, m)[:, 0]
    total_slots = len(slot_dataset)
    is_anchor = schedule.role == ROLE_ANCHOR
    group = np.cumsum(is_anchor) - 1
    hn_per_group = np.bincount(group[~is_anchor], minlength=int(is_anchor.sum()))
    anchor_dataset = schedule.dataset[is_anchor]
    anchor_rows = schedule.query_row[is_anchor]  # rows within their own dataset
    anchor_identity = stats.member_identity[is_anchor]
    designated = stats.member_designated_negatives[is_anchor]
    usable = stats.member_usable_negatives[is_anchor]

    datasets = []
    for d, source in enumerate(stats.datasets):
        mine = anchor_dataset == d
        entry: dict[str, Any] = {
            "name": source.name, "kind": source.kind, "rows": source.num_rows,
            "weight": source.weight, "identities": source.num_identities,
            "excluded_identities": source.excluded_identities,
            "usable_identities": source.usable_identities,
            "skipped": source.skipped,
            "expected_slot_share": float(source.expected_slots / settings.num_slots),
            "proportional_slot_share": source.proportional_share,
            "realised_slot_share": float((slot_dataset == d).sum() / total_slots),
            "members": int((schedule.dataset == d).sum()),
            "anchors": int(mine.sum()),
            "hard_negative_members": int(((schedule.dataset == d) & ~is_anchor).sum()),
        }
        if source.identity_draws is not None:
            entry["draw_frequencies"] = _identity_frequencies(source.identity_draws, anchor_identity[mine],
                                                              stats.identity_labels)
        elif source.kind == "pairs" and source.skipped is None:
            drawn = np.unique(anchor_rows[mine])
            entry["epochs"] = float(mine.sum() / max(source.num_rows, 1))
            entry["rows_never_anchor"] = int(source.num_rows - len(drawn))
        entry["hard_negatives"] = {
            "anchors_with_designated": int((designated[mine] > 0).sum()),
            "anchors_with_usable": int((usable[mine] > 0).sum()),
            "anchors_with_k": int(((usable[mine] > 0) & (hn_per_group[mine] >= k)).sum()) if k else 0,
            "mean_per_anchor_with_usable": float(hn_per_group[mine][usable[mine] > 0].mean())
            if (usable[mine] > 0).any() else 0.0,
            # anchors that got min(k, usable) of their negatives; the others by cause
            "anchors_with_all_wanted": int(((usable[mine] > 0) & (hn_per_group[mine] >= np.minimum(k, usable[mine])))
                                           .sum()) if k else 0,
            "shortfalls": source.hard_negative_shortfalls,
            "designated_dropped": source.hard_negatives_dropped,
        }
        datasets.append(entry)
    return {
        "settings": settings.to_json(),
        "slots_per_batch": settings.num_slots,
        "max_slots_per_dataset": stats.max_slots_per_dataset,
        "fallbacks": {
            "hard_negative_groups_truncated": stats.hard_negative_groups_truncated,
            "extra_candidate_rounds": stats.extra_candidate_rounds,
            "skipped_datasets": [s.name for s in stats.datasets if s.skipped],
        },
        "datasets": datasets,
    }


def _identity_frequencies(draws: IdentityDraws, anchor_identity: np.ndarray,
                          labels: Any) -> dict[str, Any]:
    """Expected (∝ instances, capped at one per slot) vs realised anchor identity frequencies."""
    codes = draws.codes
    expected = draws.inclusion / draws.inclusion.sum()
    realised_counts = np.bincount(np.searchsorted(codes, anchor_identity),
                                  minlength=len(codes)) if len(anchor_identity) else np.zeros(len(codes))
    count = int(realised_counts.sum())
    realised = realised_counts / max(count, 1)
    expected_counts = expected * count
    nonzero = expected_counts > 0
    chi2 = float((((realised_counts - expected_counts) ** 2)[nonzero] / expected_counts[nonzero]).sum())
    proportional = draws.instances / draws.instances.sum()
    top = np.argsort(-draws.instances, kind="stable")[:_TOP_IDENTITIES]
    return {
        "anchor_draws": count,
        "capped_identities": draws.capped,
        "total_variation": float(0.5 * np.abs(realised - expected).sum()),
        "chi2": chi2, "chi2_dof": int(nonzero.sum() - 1),
        "most_frequent": [{"identity": str(labels.get(int(codes[i]), codes[i])),
                           "instances": int(draws.instances[i]),
                           "proportional_share": float(proportional[i]),
                           "expected_share": float(expected[i]),
                           "realised_share": float(realised[i])} for i in top],
    }


def format_report(report: dict[str, Any]) -> str:
    """A fixed-width table of the report for the terminal."""
    header = (f"{'dataset':<24} {'kind':<8} {'rows':>9} {'idents':>8} {'excl':>6} {'share':>7} "
              f"{'slots exp':>9} {'slots got':>9} {'anchors':>9} {'TV':>6} {'HN cov':>7} {'HN/anc':>6}")
    lines = [header, "-" * len(header)]
    wants_negatives = report["settings"].get("hard_negatives", 0) > 0
    for entry in report["datasets"]:
        hn = entry["hard_negatives"]
        # "-" where a figure does not apply (no identity draws in a pairs dataset; no hard
        # negatives asked for or none designated), never a nan cell.
        with_negatives = wants_negatives and hn["anchors_with_usable"] > 0
        coverage = f"{hn['anchors_with_all_wanted'] / hn['anchors_with_usable']:.1%}" if with_negatives else "-"
        per_anchor = f"{hn['mean_per_anchor_with_usable']:.2f}" if with_negatives else "-"
        tv = entry.get("draw_frequencies", {}).get("total_variation")
        tv_cell = "-" if tv is None or math.isnan(tv) else f"{tv:.3f}"
        name = entry["name"] if entry["skipped"] is None else f"{entry['name']} (skipped)"
        lines.append(
            f"{name[:24]:<24} {entry['kind']:<8} {entry['rows']:>9} {entry['identities']:>8} "
            f"{entry['excluded_identities']:>6} {entry['proportional_slot_share']:>7.4f} "
            f"{entry['expected_slot_share']:>9.4f} "
            f"{entry['realised_slot_share']:>9.4f} {entry['anchors']:>9} {tv_cell:>6} "
            f"{coverage:>7} {per_anchor:>6}")
    fallbacks = report["fallbacks"]
    lines.append("")
    lines.append(f"slots per batch: {report['slots_per_batch']} (at most {report['max_slots_per_dataset']} "
                 f"per dataset); hard-negative groups truncated at a slot's end: "
                 f"{fallbacks['hard_negative_groups_truncated']}; extra candidate rounds: "
                 f"{fallbacks['extra_candidate_rounds']}; skipped datasets: "
                 f"{', '.join(fallbacks['skipped_datasets']) or 'none'}")
    shortfalls: dict[str, int] = {}
    for entry in report["datasets"]:
        for cause, count in entry["hard_negatives"]["shortfalls"].items():
            shortfalls[cause] = shortfalls.get(cause, 0) + count
    lines.append("anchors short of hard negatives, by cause: "
                 + (", ".join(f"{cause} {count}" for cause, count in shortfalls.items()) or "none"))
    lines.append("excl: single-instance identities (never anchors); share: configured (weight x size); "
                 "slots exp/got: expected vs realised share of slots; TV: total variation between expected "
                 "and realised anchor identity frequencies; HN cov: anchors with usable hard negatives that "
                 "got min(k, usable) of them; -: does not apply")
    return "\n".join(lines)
