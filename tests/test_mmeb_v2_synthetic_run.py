"""An MMEB-V2-shaped run end to end, offline: ``vis-embed synth --modalities image,video,document``
renders clip and page tasks (video candidates, a video gallery, a graded qrels page set), and
``vis-embed eval --save-runs`` scores them with a tiny model.  results.json's hit@1 and
ndcg_linear@5 must equal ir_measures on the run and qrels files the same run wrote."""

from __future__ import annotations

import json
from pathlib import Path

import ir_measures
import pytest
from ir_measures import Success, nDCG

from vis_embed.prep.synth import generate
from vis_embed.cli import main

NEW_TASKS = {"SynthVideoRet": ("V-RET", "gallery"), "SynthVideoCls": ("V-CLS", "candidates"),
             "SynthDocRet": ("VR", "qrels")}


def test_synthetic_mmeb_v2_run_agrees_with_ir_measures(tiny_checkpoint, tmp_path: Path) -> None:
    synth = generate(tmp_path / "synth", seed=0, size="tiny", workers=1, modalities="image,video,document")
    out = tmp_path / "out"
    args = ["eval", "--model", str(tiny_checkpoint("qwen2-vl")), "--benchmark", str(synth / "benchmark.yaml"),
            "--out", str(out), "--device", "cpu", "--batch-size", "8", "--quiet", "--no-pictures", "--save-runs",
            "--video-frames", "4", "--datasets", ",".join(NEW_TASKS)]
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["datasets"]) == set(NEW_TASKS)
    for name, (meta_task, layout) in NEW_TASKS.items():
        found = results["datasets"][name]
        assert (found["meta_task"], found["layout"], found["benchmark"]) == (meta_task, layout, "MMEB-V2")
        run = list(ir_measures.read_trec_run(str(out / "runs" / f"{name}.trec")))
        scores = [doc.score for doc in run]
        assert len(set(scores)) > len(scores) // 2, "the tiny model collapsed: ties would decide the ranks"
        qrels = list(ir_measures.read_trec_qrels(str(out / "runs" / f"{name}.qrels")))
        theirs = ir_measures.calc_aggregate([Success @ 1, nDCG @ 5], qrels, run)
        ours = found["metrics"]
        assert ours["hit@1"] == pytest.approx(100 * theirs[Success @ 1], abs=1e-9), name
        assert ours["ndcg_linear@5"] == pytest.approx(100 * theirs[nDCG @ 5], abs=1e-9), name
    # the page task is graded: some query has a grade-1 page beside its grade-2 one
    assert {qrel.relevance for qrel in ir_measures.read_trec_qrels(str(out / "runs" / "SynthDocRet.qrels"))} >= {1, 2}
    groups, counts = results["groups"], results["counts"]
    assert counts["Video"] == 2 and counts["VisDoc"] == 1 and counts["MMEB-V2"] == 3
    primaries = [results["datasets"][name]["metrics"][results["datasets"][name]["primary"]] for name in NEW_TASKS]
    assert groups["MMEB-V2"] == pytest.approx(sum(primaries) / 3)

