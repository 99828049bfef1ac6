"""P@1 against bytes per vector on the synthetic benchmark: Matryoshka widths x index precisions,
for adapters trained with and without ``loss.matryoshka_dims`` (docs/galleries.md).

    vis-embed quickstart --out qs_plain                                             # the tiny recipe
    vis-embed quickstart --out qs_matryoshka --recipe recipes/tiny_cpu_matryoshka.yaml
    .venv/bin/python benchmarks/matryoshka_table.py --run plain=qs_plain --run matryoshka=qs_matryoshka \\
        --out matryoshka_table

Each ``--run NAME=DIR`` is a quickstart output (``DIR/model``, ``DIR/run/final``,
``DIR/synth/benchmark.yaml``).  Every run's items are encoded once (the evaluation cache holds
full-width vectors; ``--dim`` cuts them after the cache), then ``vis-embed eval`` is run for
every width of ``--dims`` (default: full, 1/2, 1/4, 1/8) and every ``--indexes`` entry
(``exact``, ``int8``, ``binary``, ``binary+4`` = binary with ``--rescore 4``) on the
``--datasets`` (default: SynthRec, the held-out ID-Rec gallery).  Prints a Markdown table:
bytes per vector of the searched codes, P@1 and its share of the same run's full-width
float P@1; writes every results.json under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from vis_embed.evaluation.api import evaluate_encoder, load_specs  # noqa: E402
from vis_embed.evaluation.settings import EvalSettings  # noqa: E402
from vis_embed.model.runtime.embedder import load_embedder  # noqa: E402


def parse_index(entry: str) -> tuple[str, int]:
    kind, _, rescore = entry.partition("+")
    return kind, int(rescore or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", required=True, metavar="NAME=QUICKSTART_DIR")
    parser.add_argument("--dims", default=None, help="comma-separated widths (default: full, /2, /4, /8)")
    parser.add_argument("--indexes", default="exact,int8,binary,binary+4")
    parser.add_argument("--datasets", default="SynthRec")
    parser.add_argument("--depth", type=int, default=10,
                        help="gallery ranking depth (default 10): a rescore shortlists K x depth rows; the eval "
                             "default (the whole gallery up to 10k) would make binary+K re-rank every row of a "
                             "small gallery, i.e. exact search by construction")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    for run in args.run:
        name, _, directory = run.partition("=")
        directory = Path(directory)
        specs, fingerprint = load_specs(directory / "synth" / "benchmark.yaml")
        adapter = directory / "run" / "final"  # absent: the untrained model (a smoke run)
        embedder = load_embedder(directory / "model", adapter if adapter.is_dir() else None)
        width = embedder.embedding_dim
        dims = [int(d) for d in args.dims.split(",")] if args.dims else [width, width // 2, width // 4, width // 8]
        reference = None
        for dim in dims:
            for entry in args.indexes.split(","):
                kind, rescore = parse_index(entry.strip())
                out = args.out / name / f"dim{dim}_{entry.strip()}"
                settings = EvalSettings(datasets=args.datasets.split(","), index=kind, rescore=rescore, dim=dim,
                                        depth=args.depth, cache_dir=args.out / name / "cache", pictures=False,
                                        show_progress=False)
                results = evaluate_encoder(embedder, specs, fingerprint, out, settings, model_name=name)
                dataset = next(iter(results["datasets"].values()))
                p_at_1 = dataset["metrics"]["P@1"]
                reference = p_at_1 if reference is None else reference  # the first row: full width, exact
                rows.append({"run": name, "dim": dim, "index": entry.strip(),
                             "bytes_per_vector": dataset["bytes_per_vector"], "P@1": p_at_1,
                             "share_of_full_float": p_at_1 / reference if reference else None})
        embedder.close()
    print("| run | dim | index | bytes/vector | P@1 (%) | of full-width float |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        share = "-" if row["share_of_full_float"] is None else f"{100 * row['share_of_full_float']:.1f}%"
        print(f"| {row['run']} | {row['dim']} | {row['index']} | {row['bytes_per_vector']} | "
              f"{row['P@1']:.1f} | {share} |")
    (args.out / "table.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
