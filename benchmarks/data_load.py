"""Data loading and conversion throughput: how long validation and converters take at scale.

Builds synthetic files in a temporary folder (image files are empty: the loader only
checks that they exist, it does not decode them) and times

* ``load_train_config`` on an identity dataset (JSONL and Parquet, with the image check),
* ``TrainDataset.arrays()`` (the scheduler's view),
* the MMEB-train converter (Parquet in the published column layout -> pairs JSONL),
* the MMEB-eval converter (queries x candidates, ImageNet-like text candidates).

    .venv/bin/python benchmarks/data_load.py                 # defaults: 100K rows
    .venv/bin/python benchmarks/data_load.py --rows 662000   # MMEB-train size
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path


def _timed(label: str, fn, count: int, unit: str):
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    print(f"{label:<46} {seconds:7.2f} s   {count / seconds:>10,.0f} {unit}/s")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--eval-queries", type=int, default=1000)
    parser.add_argument("--candidates", type=int, default=1000)
    args = parser.parse_args()

    import pyarrow as pa
    import pyarrow.parquet as pq

    from vis_embed.prep.mmeb import convert_mmeb_eval, convert_mmeb_train
    from vis_embed.data import load_train_config, write_table

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        images = tmp / "images"
        images.mkdir()
        rows = []
        for k in range(args.rows):
            (images / f"{k}.jpg").touch()
            rows.append({"id": f"r{k}", "image": f"{k}.jpg", "identity": f"id{k // 4}",
                         **({"hard_negatives": [f"r{(k + 4) % args.rows}"]} if k % 2 else {})})
        for suffix in ("jsonl", "parquet"):
            write_table(tmp / f"rec.{suffix}", rows)
            (tmp / f"{suffix}.yaml").write_text(
                f"datasets:\n  - {{name: rec, kind: identity, path: rec.{suffix}, image_root: images}}\n")
            cfg = _timed(f"load_train_config identity ({suffix})",
                         lambda s=suffix: load_train_config(tmp / f"{s}.yaml"), args.rows, "rows")
        _timed("TrainDataset.arrays()", cfg.datasets[0].arrays, args.rows, "rows")
        _timed("TrainDataConfig.fingerprint()", cfg.fingerprint, args.rows, "rows")

        schema = pa.schema([(c, pa.string()) for c in ("qry", "qry_image_path", "pos_text",
                                                       "pos_image_path", "neg_text", "neg_image_path")])
        train_rows = [{"qry": "<|image_1|>\nRepresent the given image for classification\n",
                       "qry_image_path": f"{k}.jpg", "pos_text": f"label {k % 1000}", "pos_image_path": "",
                       "neg_text": f"label {(k + 1) % 1000}", "neg_image_path": ""} for k in range(args.rows)]
        (tmp / "mmeb" / "ImageNet_1K").mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(train_rows, schema=schema),
                       tmp / "mmeb" / "ImageNet_1K" / "original-00000-of-00001.parquet")
        _timed("convert_mmeb_train (parquet -> jsonl)",
               lambda: convert_mmeb_train([tmp / "mmeb"], tmp / "out", image_root=images),
               args.rows, "rows")

        eval_schema = pa.schema([("qry_text", pa.string()), ("qry_img_path", pa.string()),
                                 ("tgt_text", pa.list_(pa.string())), ("tgt_img_path", pa.list_(pa.string()))])
        labels = [f"label {c}" for c in range(args.candidates)]
        eval_rows = [{"qry_text": "<|image_1|>\nRepresent the given image for classification\n",
                      "qry_img_path": f"{k}.jpg", "tgt_text": labels[k % 7:] + labels[:k % 7],
                      "tgt_img_path": [""] * args.candidates} for k in range(args.eval_queries)]
        (tmp / "mmeb_eval" / "ImageNet-1K").mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(eval_rows, schema=eval_schema),
                       tmp / "mmeb_eval" / "ImageNet-1K" / "test-00000-of-00001.parquet")
        _timed(f"convert_mmeb_eval ({args.candidates} candidates/query)",
               lambda: convert_mmeb_eval([tmp / "mmeb_eval"], tmp / "out_eval", image_root=images),
               args.eval_queries, "queries")
        from vis_embed.data import load_benchmark

        spec = load_benchmark(tmp / "out_eval" / "benchmark.yaml").datasets[0]
        _timed("load_candidates", spec.load_candidates, args.eval_queries, "queries")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak_mib:,.0f} MiB")


if __name__ == "__main__":
    main()
