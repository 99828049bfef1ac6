"""Per-seed result files of the experiments: the only input of their tables.

One training + evaluation of a study's arm and seed becomes ``RESULTS/<arm>_seed<N>.json``
(committed under ``docs/results/<study>/``; docs/experiments.md)::

    {"schema": 2, "study", "arm", "seed",
     "metrics": {group: P@1 ...}        eval/results.json's groups
     "benchmark_version"                the evaluated benchmark's version (its manifest's `version`)
     "datasets": {name: {meta_task, split, benchmark, primary, score, metrics}}
     "evaluations": {NAME: datasets like the above}   further evaluations (--extra-eval), e.g. peer
     "loss_kind", "adaptation"
     "training": {steps, final_loss, final_loss_mean_last10pct, train_seconds,
                  fn_share_mean, fn_share_last10pct, fn_query_fraction_mean, fn_logit_gap_mean,
                  fn_own_image_share_mean, fn_logit_gap_other_mean,
                  fn_share_by_decile: [...]}     from run/train_log.jsonl
     "identity_mask", "temperature": {init, learnable, final}, "init_adapter",
     "sampling": {strategy, hard_negatives, interleave_batch_size}, "recipe_seed",
     "max_steps", "global_batch_size"   from run/recipe.yaml
     "schedule_hash": sha256 of the schedule file, "identity_repeat_rate",
     "provenance": vis_embed.provenance (commit, command, machine, versions, date)}

The drivers (eval/ablation_sampling.sh, eval/ablation_warm.sh, eval/ablation_plateau.sh) write
one right after each run, so its provenance is the run's; the table scripts read only these
files, and refuse to mix files of two benchmark versions.  Schema 1 files (written before
``sampling``, ``recipe_seed`` and ``benchmark_version`` were recorded) lack those keys: their
strategy and hard-negative count are in ``provenance.command`` and the driver's arm rule.

    python eval/study_results.py write --study S --arm A --seed N --run-dir DIR --out RESULTS \\
        [--data train.yaml] [--command "..."]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
from pathlib import Path
from typing import Any

import yaml

from vis_embed.data.taxonomy import benchmark_of_meta_task, group_means
from vis_embed.evaluation.harness import PRIMARY_METRIC
from vis_embed.io import atomic_write_json
from vis_embed.provenance import provenance

SCHEMA = 2


def result_path(results: Path, arm: str, seed: int | str) -> Path:
    return Path(results) / f"{arm}_seed{seed}.json"


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def identity_repeat_rate(schedule: Path, data: Any) -> float:
    """Share of scheduled members whose identity already occurs earlier in their batch.

    The identity is the data config's scoped key (``namespace::identity``); a row without
    identity repeats nothing.  Computed from the schedule file itself, independently of the
    scheduler's own report.
    """
    import pyarrow.parquet as pq

    table = pq.read_table(schedule, columns=["step", "dataset", "query_id"]).to_pydict()
    seen: dict[int, set[str]] = {}
    repeats = 0
    for step, name, query_id in zip(table["step"], table["dataset"], table["query_id"]):
        dataset = data.dataset(name)
        key = dataset.identity_key(dataset.get(query_id))
        if key is None:
            continue
        batch = seen.setdefault(step, set())
        repeats += key in batch
        batch.add(key)
    return repeats / max(1, len(table["step"]))


def dataset_score(entry: dict[str, Any]) -> dict[str, Any]:
    """What a table needs of one evaluated dataset: its task, split, benchmark and primary score."""
    primary = entry.get("primary", PRIMARY_METRIC)
    metrics = entry.get("metrics") or {}
    return {"meta_task": entry.get("meta_task"), "split": entry.get("split"), "benchmark": entry.get("benchmark"),
            "primary": primary, "score": metrics.get(primary),
            "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))}}


def benchmark_split_means(record: dict[str, Any], benchmark: str = "MVEB") -> dict[str, float]:
    """``{"MVEB IND": ..., "MVEB OOD": ...}``: one benchmark's trained-task and transfer means
    (the results' own IND / OOD groups mix every benchmark), by the project's group rule."""
    rows = [{"meta_task": d["meta_task"], "split": d["split"], "benchmark": d["benchmark"], "score": d["score"]}
            for d in record.get("datasets", {}).values()
            if d.get("primary") == PRIMARY_METRIC and d.get("score") is not None
            and (d.get("benchmark") or benchmark_of_meta_task(d["meta_task"])) == benchmark]
    groups = group_means(rows)
    return {f"{benchmark} {split}": groups[split] for split in ("IND", "OOD") if split in groups}


def _mean(values: list[float]) -> float | None:
    return statistics.mean(values) if values else None


def training_summary(log: Path, last_step: int | None = None) -> dict[str, Any]:
    """Loss and false-negative diagnostics of one run from its ``train_log.jsonl`` (with
    ``last_step``: its first ``last_step`` steps only, e.g. a checkpoint of a longer run)."""
    records = [json.loads(line) for line in Path(log).read_text(encoding="utf-8").splitlines() if line.strip()]
    if last_step is not None:
        records = [row for row in records if row.get("step", 0) < last_step]
    if not records:
        raise ValueError(f"{log}: no training steps logged")
    tail = records[-max(1, len(records) // 10):]

    def values(key: str, rows: list[dict[str, Any]] = records) -> list[float]:
        return [row[key] for row in rows if isinstance(row.get(key), (int, float))]

    count = len(records)  # ten equal parts of the run (one step each for runs under 10 steps)
    deciles = [records[count * k // 10: count * (k + 1) // 10] for k in range(10)] if count >= 10 \
        else [[row] for row in records]
    return {
        "steps": len(records),
        "final_loss": records[-1].get("loss"),
        "final_loss_mean_last10pct": _mean(values("loss", tail)),
        "train_seconds": sum(values("step_time_s")),
        "final_tau": records[-1].get("tau"),
        "fn_share_mean": _mean(values("fn_share")),
        "fn_share_last10pct": _mean(values("fn_share", tail)),
        "fn_query_fraction_mean": _mean(values("fn_query_fraction")),
        "fn_logit_gap_mean": _mean(values("fn_logit_gap")),
        "fn_own_image_share_mean": _mean(values("fn_own_image_share")),
        "fn_logit_gap_other_mean": _mean(values("fn_logit_gap_other")),
        "fn_share_by_decile": [_mean(values("fn_share", rows)) for rows in deciles],
    }


def seed_result(*, study: str, arm: str, seed: int, run_dir: Path | None, eval_dir: Path | None = None,
                schedule: Path | None = None, data: Any = None, command: str | None = None,
                extra_evals: dict[str, Path] | None = None, backfilled: bool = False,
                last_step: int | None = None) -> dict[str, Any]:
    """The result record of one finished run (``run_dir``: the trainer's output directory; None
    for an untrained reference model, then ``eval_dir`` is required).  ``extra_evals``: further
    evaluations of the same model by name (e.g. ``peer``), kept per dataset.  ``backfilled``:
    written after the fact for a run made earlier, so its provenance is not the run's own.
    ``last_step``: the record is of a checkpoint after that many steps (training summed up to it)."""
    if run_dir is None and eval_dir is None:
        raise ValueError("an untrained model's record needs its eval_dir")
    eval_dir = eval_dir or run_dir.parent / "eval"
    results = _read_json(eval_dir / "results.json")
    recipe = yaml.safe_load((run_dir / "recipe.yaml").read_text(encoding="utf-8")) if run_dir else {}
    temperature = recipe.get("temperature") or {}
    training = training_summary(run_dir / "train_log.jsonl", last_step) if run_dir else {}
    if schedule is None and recipe.get("schedule"):
        schedule = Path(recipe["schedule"])
    has_schedule = schedule is not None and schedule.is_file()
    sampling = recipe.get("sampling") or {}
    return {
        "schema": SCHEMA, "study": study, "arm": arm, "seed": int(seed),
        "metrics": results["groups"],
        "benchmark_version": benchmark_version(results, eval_dir / "results.json"),
        "datasets": _dataset_scores(results),
        "evaluations": {name: _dataset_scores(_read_json(Path(directory) / "results.json"))
                        for name, directory in (extra_evals or {}).items()},
        "training": training,
        "identity_mask": bool((recipe.get("loss") or {}).get("identity_mask", True)) if run_dir else None,
        "loss_kind": (recipe.get("loss") or {}).get("kind"), "adaptation": recipe.get("adaptation"),
        "temperature": {"init": temperature.get("init"), "learnable": temperature.get("learnable"),
                        "final": training.get("final_tau")},
        "init_adapter": recipe.get("init_adapter"),
        "sampling": {key: sampling.get(key) for key in ("strategy", "hard_negatives", "interleave_batch_size")}
        if run_dir else None,
        "recipe_seed": recipe.get("seed"),
        "max_steps": recipe.get("max_steps"), "global_batch_size": recipe.get("global_batch_size"),
        "schedule_hash": file_hash(schedule) if has_schedule else None,
        "identity_repeat_rate": identity_repeat_rate(schedule, data) if data is not None and has_schedule else None,
        "provenance": {**(provenance(command=command) if command else provenance()),
                       **({"backfilled": True} if backfilled else {})},
    }


def benchmark_version(results: dict[str, Any], path: Path | None = None) -> int | str | None:
    """The one benchmark version an evaluation's datasets carry (None: an unversioned manifest)."""
    versions = {entry.get("benchmark_version") for entry in (results.get("datasets") or {}).values()}
    if len(versions) > 1:
        raise ValueError(f"{path or 'results'}: datasets of several benchmark versions {sorted(map(str, versions))}")
    return next(iter(versions), None)


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _dataset_scores(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: dataset_score(entry) for name, entry in (results.get("datasets") or {}).items()}


def write_seed_result(results: Path, record: dict[str, Any]) -> Path:
    path = result_path(results, record["arm"], record["seed"])
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, record)
    return path


def read_seed_results(results: Path, arms: list[str] | None = None,
                      seeds: list[str] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """``{arm: {seed: record}}`` from ``RESULTS/*_seed*.json`` (arm order: ``arms``, else sorted).
    Records evaluated on two versions of the benchmark are refused (ValueError): one table never
    mixes them; re-run the older ones."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    versions: dict[str, list[str]] = {}
    for path in sorted(Path(results).glob("*_seed*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        arm, seed = record["arm"], str(record["seed"])
        if (arms is None or arm in arms) and (seeds is None or seed in seeds):
            found.setdefault(arm, {})[seed] = record
            versions.setdefault(str(record.get("benchmark_version")), []).append(path.name)
    if len(versions) > 1:
        listing = "; ".join(f"version {version}: {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
                            for version, names in sorted(versions.items()))
        raise ValueError(f"{results}: result files of several benchmark versions ({listing}); "
                         "re-run the older ones, a table never mixes them")
    order = arms if arms is not None else sorted(found)
    return {arm: dict(sorted(found[arm].items(), key=lambda item: int(item[0])))
            for arm in order if arm in found}


def provenance_lines(records: list[dict[str, Any]]) -> list[str]:
    """Markdown lines naming every commit / machine / date range the records came from."""
    from vis_embed.provenance import describe

    by_commit: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        info = record.get("provenance") or {}
        key = f"{info.get('commit')}{'+dirty' if info.get('dirty') else ''}"
        key += "+backfilled" if info.get("backfilled") else ""
        by_commit.setdefault(key, []).append(record)
    lines = []
    for group in by_commit.values():
        dates = sorted((r.get("provenance") or {}).get("date") or "" for r in group)
        first = dict(group[0].get("provenance") or {}, date=f"{dates[0]} .. {dates[-1]}")
        late = " (result files written later for runs made earlier: the run's own commit is unknown)" \
            if first.get("backfilled") else ""
        lines.append(f"- {len(group)} runs: {describe(first)}{late}")
    return lines


def fn_share_curve_rows(by_arm: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """Mean false-negative share (%) over the seeds in each tenth of the run, per arm."""
    lines = ["| arm | " + " | ".join(f"{10 * k}–{10 * (k + 1)}%" for k in range(10)) + " |",
             "|---|" + "---:|" * 10]
    for arm, by_seed in by_arm.items():
        curves = [r["training"].get("fn_share_by_decile") or [] for r in by_seed.values()]
        cells = []
        for k in range(10):
            values = [c[k] for c in curves if len(c) > k and c[k] is not None]
            cells.append(f"{100 * statistics.mean(values):.2f}" if values else "–")
        lines.append(f"| `{arm}` | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    write = sub.add_parser("write", help="write one run's result file")
    write.add_argument("--study", required=True)
    write.add_argument("--arm", required=True)
    write.add_argument("--seed", type=int, required=True)
    write.add_argument("--run-dir", type=Path, help="the trainer's output_dir (none: an untrained model)")
    write.add_argument("--eval-dir", type=Path, help="default: RUN_DIR/../eval")
    write.add_argument("--extra-eval", action="append", default=[], metavar="NAME=DIR",
                       help="another evaluation of the same model (repeatable), e.g. peer=DIR/eval_peer")
    write.add_argument("--schedule", type=Path, help="default: the recipe's schedule")
    write.add_argument("--data", type=Path, help="train.yaml: also count identity repeats in the schedule")
    write.add_argument("--command", help="the command that reproduces the study (default: this one)")
    write.add_argument("--out", type=Path, required=True, help="the study's results folder")
    write.add_argument("--last-step", type=int, help="a checkpoint after this many steps: sum the log up to it")
    args = parser.parse_args()
    data = None
    if args.data is not None:
        from vis_embed.data import load_train_config

        data = load_train_config(args.data)
    extra = dict(item.split("=", 1) for item in args.extra_eval)
    record = seed_result(study=args.study, arm=args.arm, seed=args.seed, run_dir=args.run_dir,
                         eval_dir=args.eval_dir, schedule=args.schedule, data=data, command=args.command,
                         extra_evals={name: Path(directory) for name, directory in extra.items()},
                         last_step=args.last_step)
    print(write_seed_result(args.out, record))


if __name__ == "__main__":
    main()
