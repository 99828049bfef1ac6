"""``vis-embed prep``: convert MMEB files and identity collections, re-sample and split.

Sub-commands::

    vis-embed prep mmeb-train SRC... --out DIR [--image-root DIR] [--split original]
    vis-embed prep mmeb-eval SRC... --out DIR [--image-root DIR]
    vis-embed prep identity-folder ROOT --out FILE.jsonl [--config train.yaml --name N]
    vis-embed prep identity-csv CSV --out FILE.jsonl [--image-root DIR] [--config ...]
    vis-embed prep resample SRC [SRC...] OUT_DIR [--max-identities 7500 --max-images-per-identity 4]
                                        (alias: split)
    vis-embed prep check train.yaml benchmark.yaml   (validate everything, print a summary)
    vis-embed prep mmeb-v2 --out DIR [--modality image,video,visdoc] [--tasks T1,T2] [--source-root DIR]
Each writes a JSON report next to its output and prints a one-line summary.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from vis_embed.errors import DataError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="prep_command", metavar="SUBCOMMAND", required=True)

    mmeb_train = sub.add_parser("mmeb-train", help="MMEB-train parquet/JSONL -> pairs files + train.yaml")
    mmeb_eval = sub.add_parser("mmeb-eval", help="MMEB-eval parquet/JSONL -> candidates files + benchmark.yaml")
    for command in (mmeb_train, mmeb_eval):
        command.add_argument("sources", nargs="+",
                             help="data files, dataset folders, a folder of dataset folders, or a Hugging "
                                  "Face dataset id (e.g. TIGER-Lab/MMEB-eval; needs --image-root)")
        command.add_argument("--hub", action="store_true",
                             help="read every source with datasets.load_dataset (hub ids are detected anyway; "
                                  "use for a local dataset folder in the hub layout)")
        command.add_argument("--subset", dest="subsets", action="append", default=None, metavar="CONFIG",
                             help="hub dataset config(s) to convert, repeatable (default: all)")
        command.add_argument("--out", type=Path, required=True, help="output folder")
        command.add_argument("--image-root", type=Path, default=None,
                             help="folder the image paths are relative to (default: each source's folder)")
        command.add_argument("--split", default=None,
                             help="shard prefix to use when a folder holds several (e.g. original, "
                                  "diverse_instruction, test)")
        command.add_argument("--format", dest="file_format", choices=("jsonl", "parquet"), default="jsonl",
                             help="format of the written data files (default: jsonl)")
        command.add_argument("--no-check-images", dest="check_images", action="store_false",
                             help="do not count missing image files")
    mmeb_eval.add_argument("--benchmark-name", default="mmeb", help="name of the written manifest (default: mmeb)")
    mmeb_eval.add_argument("--meta-task", default=None, help="for a dataset outside the MMEB-36 taxonomy")
    mmeb_eval.add_argument("--eval-split", choices=("IND", "OOD"), default=None,
                           help="for a dataset outside the MMEB-36 taxonomy")

    mmeb_v2 = sub.add_parser("mmeb-v2", help="the 78 MMEB-V2 tasks (image, video, visdoc) from their released "
                                             "hub sources -> DIR/<modality>/<task>/")
    mmeb_v2.add_argument("--out", type=Path, required=True, help="output folder (re-runs skip complete tasks)")
    mmeb_v2.add_argument("--modality", type=_comma_list, default=None,
                         help="comma-separated modalities to convert: image,video,visdoc (default: all)")
    mmeb_v2.add_argument("--tasks", type=_comma_list, default=None,
                         help="comma-separated task names (e.g. MSR-VTT,ViDoRe_arxivqa; default: every task "
                              "of the chosen modalities)")
    mmeb_v2.add_argument("--source-root", type=Path, default=None,
                         help="read every dataset from a local copy in the hub layout, ROOT/<owner>/<name> "
                              "(e.g. git clones of the dataset repos), instead of downloading")

    folder = sub.add_parser("identity-folder", help="ROOT/<identity>/*.jpg -> identity rows")
    folder.add_argument("root", type=Path, help="folder with one sub-folder of images per identity")
    csv_cmd = sub.add_parser("identity-csv", help="CSV (path, identity[, id, text, bbox]) -> identity rows")
    csv_cmd.add_argument("csv", type=Path, help="CSV with a header: path, identity[, id, text, bbox]")
    csv_cmd.add_argument("--image-root", type=Path, default=None,
                         help="folder the CSV paths are relative to (default: the CSV's folder)")
    for command in (folder, csv_cmd):
        command.add_argument("--out", type=Path, required=True, help="output .jsonl or .parquet file")
        command.add_argument("--config", type=Path, default=None,
                             help="also add/replace this dataset in a training data config YAML")
        command.add_argument("--name", default=None, help="dataset name in --config (default: output stem)")
        command.add_argument("--query-instruction", default=None, help="instruction stored with the queries")
        command.add_argument("--candidate-instruction", default=None, help="instruction stored with the candidates")
        command.add_argument("--identity-namespace", default=None,
                             help="identity namespace in --config: datasets with the same namespace share "
                                  "identities (default: the dataset name)")

    check = sub.add_parser("check", help="validate a training data config or benchmark manifest and "
                                         "print what it holds")
    check.add_argument("yaml_files", nargs="+", type=Path, help="data config or benchmark manifest YAML files")
    check.add_argument("--no-check-images", dest="check_images", action="store_false",
                       help="do not count missing image files")

    for name in ("resample", "split"):
        resample = sub.add_parser(name, help="cap identities/images, drop single-instance identities, "
                                             "identity-disjoint train/eval split",
                                  description="Several SOURCEs are tables that share identities (datasets "
                                              "with one identity_namespace): the held-out identities are drawn "
                                              "once over all of them, so no identity trains in one and is "
                                              "evaluated in another; each is written to OUT_DIR/<stem>/, with one "
                                              "train.yaml and benchmark.yaml. See docs/data.md.")
        resample.add_argument("source", type=Path, nargs="+",
                              help="identity (or pairs) .jsonl/.parquet file(s); several: split over their shared "
                                   "identities")
        resample.add_argument("out_dir", type=Path, help="output folder: new, empty or an earlier output of this "
                              "command, replaced whole (no file of an earlier run stays)")
        resample.add_argument("--eval-fraction", type=float, default=0.1,
                              help="fraction of identities held out for evaluation (default: 0.1)")
        resample.add_argument("--max-identities", type=int, default=None, help="cap on training identities")
        resample.add_argument("--max-images-per-identity", type=int, default=None,
                              help="cap on training rows per identity")
        resample.add_argument("--max-eval-identities", type=int, default=None, help="cap on held-out identities")
        resample.add_argument("--min-identities", type=int, default=10,
                              help="below this, fall back to a sample-level split (reported)")
        resample.add_argument("--seed", type=int, default=0, help="seed of the split and the caps (default: 0)")
        resample.add_argument("--format", dest="file_format", choices=("jsonl", "parquet"), default=None,
                              help="format of the written files (default: the source's)")
        resample.add_argument("--image-root", type=Path, default=None,
                              help="folder the rows' image paths are relative to (default: the source's folder)")
        resample.add_argument("--name", default=None, help="dataset name in the written YAMLs (default: source stem; "
                                                           "several sources: the benchmark's name, datasets keep "
                                                           "their stems)")
        resample.add_argument("--identity-namespace", default=None,
                              help="identity_namespace written into train.yaml (several sources: default --name, "
                                   "else the stems joined by '+')")
        resample.add_argument("--meta-task", default="ID-Rec", help="meta-task of the eval gallery dataset")


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _plain(value: Any) -> Any:
    """A parsed YAML value with its LineDicts as plain dicts (what yaml.safe_dump writes)."""
    if isinstance(value, dict):
        return {key: _plain(inner) for key, inner in value.items()}
    return [_plain(inner) for inner in value] if isinstance(value, list) else value


def _add_to_train_config(config_path: Path, entry: dict[str, Any]) -> None:
    """Add ``entry`` to a data config (replacing a dataset of the same name); create it if absent."""
    from vis_embed.prep.common import write_yaml

    from vis_embed.data.yaml_lines import load_yaml_with_lines

    doc: dict[str, Any] = {"datasets": []}
    if config_path.exists():
        doc = _plain(load_yaml_with_lines(config_path)) or {"datasets": []}  # bad YAML: FILE:LINE
        if (not isinstance(doc, dict) or not isinstance(doc.get("datasets"), list)
                or not all(isinstance(entry, dict) for entry in doc["datasets"])):
            raise DataError("expected a mapping with a 'datasets' list of entries", path=config_path,
                            field="datasets")
    doc["datasets"] = [d for d in doc["datasets"] if d.get("name") != entry["name"]] + [entry]
    write_yaml(config_path, doc)


def _identity_entry(args: argparse.Namespace) -> dict[str, Any]:
    from vis_embed.prep.common import relative_to

    entry: dict[str, Any] = {"name": args.name or args.out.stem, "kind": "identity",
                             "path": relative_to(args.out, args.config.parent)}
    for key in ("query_instruction", "candidate_instruction", "identity_namespace"):
        if getattr(args, key) is not None:
            entry[key] = getattr(args, key)
    return entry


def _check(yaml_path: Path, check_images: bool) -> None:
    """Load ``yaml_path`` fully (a manifest has a top-level ``name``) and print a summary."""
    from vis_embed.data import load_benchmark, load_train_config
    from vis_embed.data.yaml_lines import load_yaml_with_lines

    doc = load_yaml_with_lines(yaml_path)  # the loaders' own reading: bad YAML is a DataError naming FILE:LINE
    if isinstance(doc, dict) and "name" in doc:
        bench = load_benchmark(yaml_path)
        print(f"{yaml_path}: benchmark {bench.name!r}, {len(bench.datasets)} dataset(s)")
        for spec in bench.datasets:
            if spec.layout == "candidates":
                rows = spec.load_candidates(check_images=check_images)
                detail = f"{len(rows)} queries, {sum(len(q.candidates) for q in rows)} candidates"
            elif spec.layout == "gallery":
                data = spec.load_gallery(check_images=check_images)
                detail = f"{len(data.queries)} queries, {len(data.gallery)} gallery rows"
            elif spec.layout == "qrels":
                qrels = spec.load_qrels(check_images=check_images)
                detail = (f"{len(qrels.queries)} queries ({qrels.n_unjudged} without a relevant document), "
                          f"{len(qrels.corpus)} documents, {sum(map(len, qrels.judgements.values()))} judgements")
            else:
                detail = "manifest entry valid (rows are parsed by the evaluation protocol)"
            place = "/".join(part for part in (spec.benchmark, spec.meta_task, spec.split) if part)  # MMEB-V2: no split
            print(f"  {spec.name}: {place} {spec.layout}: {detail}")
        return
    cfg = load_train_config(yaml_path, check_images=check_images)
    print(f"{yaml_path}: {len(cfg.datasets)} training dataset(s), fingerprint {cfg.fingerprint()[:12]}")
    for ds in cfg.datasets:
        arrays = ds.arrays()
        singles = ds.single_instance_identities()
        excluded = f" ({singles} single-instance: never anchors, usable as hard negatives)" if singles else ""
        print(f"  {ds.name}: {ds.kind}, {len(ds)} rows, {len(arrays.identity_keys)} identities{excluded}, "
              f"{len(arrays.hard_negative_indices)} hard-negative links, weight {ds.weight:g}")


def run(args: argparse.Namespace) -> int:
    command = args.prep_command
    if command == "check":
        for yaml_path in args.yaml_files:
            _check(yaml_path, args.check_images)
        return 0
    if command in ("mmeb-train", "mmeb-eval"):
        from vis_embed.prep.mmeb import convert_mmeb_eval, convert_mmeb_train

        common = dict(image_root=args.image_root, split=args.split, file_format=args.file_format,
                      check_images=args.check_images, hub=args.hub, subsets=args.subsets)
        if command == "mmeb-train":
            report = convert_mmeb_train(args.sources, args.out, **common)
            print(f"wrote {len(report['datasets'])} pairs dataset(s), {report['rows']} rows, "
                  f"{report['negatives_kept_unlinked']} unlinked negatives kept, "
                  f"{report['missing_images']} missing images -> {args.out / 'train.yaml'}")
        else:
            report = convert_mmeb_eval(args.sources, args.out, benchmark_name=args.benchmark_name,
                                       meta_task=args.meta_task, eval_split=args.eval_split, **common)
            print(f"wrote {len(report['datasets'])} candidates dataset(s), "
                  f"{report['missing_images']} missing images -> {args.out / 'benchmark.yaml'}")
        return 0
    if command == "mmeb-v2":
        from vis_embed.prep.mmeb_v2 import convert_mmeb_v2

        summary = convert_mmeb_v2(args.out, modalities=args.modality, tasks=args.tasks,
                                  source_root=args.source_root)
        print(f"converted {len(summary['converted'])} task(s), skipped {len(summary['skipped_complete'])} "
              f"complete -> {args.out} (sources: {summary['provenance']})")
        return 0
    if command in ("identity-folder", "identity-csv"):
        from vis_embed.prep.identities import convert_identity_csv, convert_identity_folder

        if command == "identity-folder":
            report = convert_identity_folder(args.root, args.out)
        else:
            report = convert_identity_csv(args.csv, args.out, image_root=args.image_root)
        if args.config is not None:
            _add_to_train_config(args.config, _identity_entry(args))
        print(f"wrote {report['rows']} rows, {report['identities']} identities "
              f"({report['single_instance_identities']} with a single image) -> {args.out}")
        if report["single_instance_identities"]:
            print("note: single-instance identities are never anchors (no positive); they remain usable "
                  "as hard negatives, or drop them with `vis-embed prep resample`")
        return 0
    return _resample(args)


def _resample(args: argparse.Namespace) -> int:
    from vis_embed.prep.resample import ResampleOptions, resample_file
    from vis_embed.prep.resample_sources import resample_files

    options = ResampleOptions(eval_fraction=args.eval_fraction, max_identities=args.max_identities,
                              max_images_per_identity=args.max_images_per_identity,
                              max_eval_identities=args.max_eval_identities,
                              min_identities=args.min_identities, seed=args.seed)
    split = resample_file if len(args.source) == 1 else resample_files
    report = split(args.source[0] if len(args.source) == 1 else args.source, args.out_dir, options,
                   file_format=args.file_format, image_root=args.image_root, name=args.name,
                   meta_task=args.meta_task, identity_namespace=args.identity_namespace)
    print(json.dumps({k: report[k] for k in ("split_mode", "train", "eval",
                                             "dropped_single_instance_identities")}))
    if report["fallback_reason"]:
        print(f"warning: {report['fallback_reason']}")
    for stem, source_report in report.get("sources", {"": report}).items():
        _benchmark_notes(source_report, f" ({stem})" if stem else "")
    return 0


def _benchmark_notes(report: dict[str, Any], where: str) -> None:
    """What a source's benchmark left out, said on the console."""
    benchmark = report["benchmark"]
    if report["kind"] == "identity" and not benchmark["written"]:
        print(f"note{where}: {'not in' if where else 'no'} benchmark.yaml: {benchmark['reason']}")
    elif benchmark.get("identities_left_out_one_image"):
        print(f"note{where}: {benchmark['identities_left_out_one_image']} eval identities left out of "
              "benchmark.yaml (all their eval instances show one image file, so no query of theirs could be "
              "answered)")
