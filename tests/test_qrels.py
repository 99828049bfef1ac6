"""The ``qrels`` layout (BEIR), graded ``ndcg_linear@k``, and TREC run files checked by ir_measures.

Done-when property: on a run of every retrieval layout (candidates, gallery, qrels) through
``vis-embed eval --save-runs`` with a tiny model, results.json's hit@1 and ndcg_linear@5 equal
ir_measures' Success@1 and nDCG@5 (trec_eval's linear gains) on the written run and qrels files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from urllib.parse import unquote

import ir_measures
import numpy as np
import pytest
import yaml
from eval_fakes import FakeEncoder, make_identity_benchmark, make_qrels_benchmark, write_jsonl
from ir_measures import Success, nDCG

from vis_embed.cli import main
from vis_embed.data import load_benchmark
from vis_embed.data.qrels import load_qrels_dataset
from vis_embed.errors import DataError
from vis_embed.evaluation import metrics
from vis_embed.evaluation.harness import Harness
from vis_embed.evaluation.settings import EvalSettings
from vis_embed.evaluation.trec_runs import RUN_DEPTH, TrecRun, trec_id, write_run_files


def _manifest(root: Path, datasets: list[dict], **top) -> Path:
    path = root / "benchmark.yaml"
    path.write_text(yaml.safe_dump({"name": "t", **top, "datasets": datasets}, sort_keys=False))
    return path


QRELS_ENTRY = {"name": "Pages", "benchmark": "MMEB-V2", "meta_task": "VDRv1", "layout": "qrels",
               "queries": "qrels/queries.jsonl", "corpus": "qrels/corpus.jsonl", "qrels": "qrels/qrels.jsonl",
               "query_instruction": "Find a document image that matches the given query:"}


# ------------------------------------------------------------------ loading


@pytest.mark.parametrize("tsv", [False, True])
def test_qrels_files_load_and_unjudged_queries_are_counted(tmp_path: Path, tsv: bool) -> None:
    files = make_qrels_benchmark(tmp_path, tsv=tsv)
    data = load_qrels_dataset(files["queries"], files["corpus"], files["qrels"])
    assert [q.id for q in data.queries] == ["t-red", "t-green", "t-blue", "i-yellow", "i-cyan", "i-magenta"]
    assert data.n_unjudged == 1  # t-none: grade 0 only
    assert data.judgements["t-red"] == {"doc red-0": 2, "doc red-1": 1}
    assert data.corpus[1].item == {"image": str(tmp_path / "pages" / "red_1.png"), "text": "page about red"}


@pytest.mark.parametrize(("row", "message"), [
    ({"query_id": "t-nobody", "corpus_id": "doc red-0", "score": 1}, r"qrels.jsonl:\d+: field 'query_id': unknown"),
    ({"query_id": "t-red", "corpus_id": "doc x", "score": 1}, r"qrels.jsonl:\d+: field 'corpus_id': unknown"),
    ({"query_id": "t-red", "corpus_id": "doc red-0", "score": 1}, r"field 'corpus_id': .*judged twice"),
    ({"query_id": "t-red", "corpus_id": "doc blue-0", "score": 1.5}, r"field 'score': expected an integer"),
    ({"query_id": "t-red", "corpus_id": "doc blue-0"}, r"field 'score': missing required field"),
])
def test_bad_qrels_rows_name_file_line_field(tmp_path: Path, row: dict, message: str) -> None:
    files = make_qrels_benchmark(tmp_path)
    with files["qrels"].open("a") as handle:
        handle.write(json.dumps(row) + "\n")
    with pytest.raises(DataError, match=message):
        load_qrels_dataset(files["queries"], files["corpus"], files["qrels"])


def test_a_dataset_without_any_relevant_document_is_an_error(tmp_path: Path) -> None:
    files = make_qrels_benchmark(tmp_path)
    write_jsonl(files["qrels"], [{"query_id": "t-red", "corpus_id": "doc red-0", "score": 0},
                                 {"query_id": "t-blue", "corpus_id": "doc red-1", "score": -1}])
    with pytest.raises(DataError, match=r"qrels.jsonl: no query has a relevant document"):
        load_qrels_dataset(files["queries"], files["corpus"], files["qrels"])


def test_duplicate_ids_and_bad_tsv_header_are_errors(tmp_path: Path) -> None:
    files = make_qrels_benchmark(tmp_path)
    corpus = [json.loads(line) for line in files["corpus"].read_text().splitlines()]
    write_jsonl(files["corpus"], corpus + [corpus[0]])
    with pytest.raises(DataError, match=rf"corpus.jsonl:{len(corpus) + 1}: field 'id': duplicate id"):
        load_qrels_dataset(files["queries"], files["corpus"], files["qrels"])
    write_jsonl(files["corpus"], corpus)
    tsv = tmp_path / "bad.tsv"
    tsv.write_text("qid\tdocid\trel\nt-red\tdoc red-0\t1\n")
    with pytest.raises(DataError, match=r"bad.tsv:1: expected the header"):
        load_qrels_dataset(files["queries"], files["corpus"], tsv)


def test_manifest_takes_qrels_files_and_checks_mmeb_v2_taxonomy(tmp_path: Path) -> None:
    make_qrels_benchmark(tmp_path / "qrels")
    spec = load_benchmark(_manifest(tmp_path, [QRELS_ENTRY])).datasets[0]
    assert (spec.benchmark, spec.modality, spec.split) == ("MMEB-V2", "visdoc", None)
    assert spec.qrels == tmp_path / "qrels" / "qrels.jsonl" and len(spec.load_qrels().queries) == 6
    with pytest.raises(DataError, match=r"field 'datasets\[0\].qrels': layout 'qrels' requires 'qrels'"):
        load_benchmark(_manifest(tmp_path, [{**QRELS_ENTRY, "qrels": None}]))
    with pytest.raises(DataError, match=r"field 'datasets\[0\].meta_task': MMEB-V2 task 'MSR-VTT' is V-RET"):
        load_benchmark(_manifest(tmp_path, [{**QRELS_ENTRY, "name": "MSR-VTT"}]))
    with pytest.raises(DataError, match=r"field 'datasets\[0\].split': required key missing"):
        load_benchmark(_manifest(tmp_path, [{**QRELS_ENTRY, "benchmark": "other"}]))
    with pytest.raises(DataError, match=r"field 'protocol': unknown protocol 'gme'"):
        load_benchmark(_manifest(tmp_path, [QRELS_ENTRY], protocol="gme"))


# ------------------------------------------------------------------ metrics


def test_ndcg_linear_uses_grades_as_gains_and_the_qrels_ideal() -> None:
    # ranked gains 0, 1, 2 (a grade-2 document third); a grade-3 document was never retrieved
    out = metrics.query_metrics(np.array([0.0, 1.0, 2.0]), n_positives=3, ideal_gains=[2, 1, 3])
    dcg = 1 / math.log2(3) + 2 / math.log2(4)
    ideal = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    assert out["ndcg_linear@5"] == pytest.approx(dcg / ideal)
    assert out["NDCG@5"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(4)) / (1 + 1 / math.log2(3) + 0.5))
    assert (out["hit@1"], out["MRR"], out["recall@5"]) == (0.0, 0.5, pytest.approx(2 / 3))
    # binary relevance: ndcg_linear@k is NDCG@k
    binary = metrics.query_metrics(np.array([False, True, False, True]))
    assert binary["ndcg_linear@10"] == pytest.approx(binary["NDCG@10"])


def test_pessimistic_ties_put_the_lower_grade_first() -> None:
    ranked = metrics.ranked_relevance(np.array([0.5, 0.5, 0.1]), np.array([2.0, 1.0, 0.0]))
    assert ranked.tolist() == [1.0, 2.0, 0.0]
    assert metrics.ranked_relevance(np.array([0.5, 0.5]), np.array([2.0, 1.0]), "first").tolist() == [2.0, 1.0]


def test_ndcg_linear_equals_ir_measures_on_a_hand_made_run() -> None:
    qrels = [ir_measures.Qrel("q", "a", 2), ir_measures.Qrel("q", "b", 1), ir_measures.Qrel("q", "c", 3)]
    run = [ir_measures.ScoredDoc("q", doc, score) for doc, score in (("x", 0.9), ("b", 0.8), ("a", 0.7))]
    expected = ir_measures.calc_aggregate([nDCG @ 5], qrels, run)[nDCG @ 5]
    ours = metrics.query_metrics(np.array([0.0, 1.0, 2.0]), n_positives=3, ideal_gains=[2, 1, 3])
    assert ours["ndcg_linear@5"] == pytest.approx(expected)


# ------------------------------------------------------------------ TREC files


def test_trec_ids_escape_whitespace_reversibly() -> None:
    for value in ("plain-id_1", "doc red-0", "tab\there", "100%", "ünï cödé", "new\nline"):
        encoded = trec_id(value)
        assert not any(ch.isspace() for ch in encoded) and unquote(encoded) == value
    assert trec_id("plain-id_1") == "plain-id_1"
    run = TrecRun(["d2", "d 1"])
    run.add("q 1", np.array([1, 0]), np.array([0.5, 0.25]), [("d 1", 2)])
    assert "".join(run.run_lines()) == "q%201 Q0 d%201 1 0.5 vis_embed\nq%201 Q0 d2 2 0.25 vis_embed\n"
    assert "".join(run.qrels_lines()) == "q%201 0 d%201 2\n"


def test_run_files_keep_the_first_run_depth_results_in_full_precision(tmp_path: Path) -> None:
    documents = [f"d{k}" for k in range(RUN_DEPTH + 5)]
    run = TrecRun(documents)
    scores = np.linspace(1.0, 0.0, len(documents))
    scores[1] = scores[0] - 1e-15  # a gap %.8g would have printed as a tie
    run.add("q", np.arange(len(documents)), scores, [("d0", 1)])
    run_path, qrels_path = write_run_files(run, tmp_path, "a/b")
    assert run_path == tmp_path / "runs" / "a_b.trec" and qrels_path.read_text() == "q 0 d0 1\n"
    lines = run_path.read_text().splitlines()
    assert len(lines) == RUN_DEPTH and float(lines[0].split()[4]) > float(lines[1].split()[4])
    assert lines[-1].split()[2:4] == [f"d{RUN_DEPTH - 1}", str(RUN_DEPTH)]
    assert not list((tmp_path / "runs").glob(".*"))  # no temporary left behind


def test_runs_are_written_only_with_save_runs(tmp_path: Path) -> None:
    files = make_qrels_benchmark(tmp_path / "qrels")
    specs = load_benchmark(_manifest(tmp_path, [QRELS_ENTRY])).datasets
    plain = Harness(FakeEncoder(), tmp_path / "plain", EvalSettings(show_progress=False, pictures=False)).run(specs)
    assert not (tmp_path / "plain" / "runs").exists() and "runs" not in plain["datasets"]["Pages"]
    saved = Harness(FakeEncoder(), tmp_path / "saved",
                    EvalSettings(show_progress=False, pictures=False, save_runs=True)).run(specs)
    entry = saved["datasets"]["Pages"]
    assert entry["runs"] == {"run": "runs/Pages.trec", "qrels": "runs/Pages.qrels"}
    assert entry["primary"] == "ndcg_linear@5" and entry["n_queries_without_relevant"] == 1
    assert saved["groups"]["VDRv1"] == saved["groups"]["VisDoc"] == saved["groups"]["MMEB-V2"] \
        == entry["metrics"]["ndcg_linear@5"]
    assert saved["counts"]["MMEB-V2"] == 1
    markdown = (tmp_path / "saved" / "results.md").read_text()
    assert "| VDRv1 (1) | VisDoc (1) | MMEB-V2 (1) |" in markdown
    assert "| Pages | VDRv1 | – | 6 | ndcg_linear@5 |" in markdown
    lines = (tmp_path / "saved" / "runs" / "Pages.trec").read_text().splitlines()
    assert len(lines) == 6 * 12 and lines[0].split()[1] == "Q0" and files["corpus"].exists()


def test_every_retrieval_layout_agrees_with_ir_measures(tiny_checkpoint, tmp_path: Path) -> None:
    identity = make_identity_benchmark(tmp_path / "id", n_views=2)
    make_qrels_benchmark(tmp_path / "qrels")
    manifest = _manifest(tmp_path, [
        {"name": "Cand", "benchmark": "MVEB", "meta_task": "ID-Rec", "split": "IND", "layout": "candidates",
         "path": "id/cand.jsonl", "image_root": "id/images"},
        {"name": "Gal", "benchmark": "MVEB", "meta_task": "Re-ID", "split": "OOD", "layout": "gallery",
         "queries": "id/queries.jsonl", "gallery": "id/gallery.jsonl", "image_root": "id/images"},
        QRELS_ENTRY,
    ])
    assert identity["images"].is_dir()
    out = tmp_path / "out"
    assert main(["eval", "--model", str(tiny_checkpoint("qwen2-vl")), "--benchmark", str(manifest), "--out",
                 str(out), "--device", "cpu", "--batch-size", "8", "--quiet", "--no-pictures", "--save-runs"]) == 0
    results = json.loads((out / "results.json").read_text())
    for name in ("Cand", "Gal", "Pages"):
        run = list(ir_measures.read_trec_run(str(out / "runs" / f"{name}.trec")))
        scores = [doc.score for doc in run]
        assert len(set(scores)) > len(scores) // 2, "the tiny model collapsed: ties would decide the ranks"
        qrels = list(ir_measures.read_trec_qrels(str(out / "runs" / f"{name}.qrels")))
        theirs = ir_measures.calc_aggregate([Success @ 1, nDCG @ 5], qrels, run)
        ours = results["datasets"][name]["metrics"]
        assert ours["hit@1"] == pytest.approx(100 * theirs[Success @ 1], abs=1e-9), name
        assert ours["ndcg_linear@5"] == pytest.approx(100 * theirs[nDCG @ 5], abs=1e-9), name


def test_mteb_scores_a_qrels_dataset_as_vis_embed_eval_does(tiny_checkpoint, tmp_path: Path) -> None:
    pytest.importorskip("mteb")
    make_qrels_benchmark(tmp_path / "qrels")
    manifest = _manifest(tmp_path, [QRELS_ENTRY])
    common = ["--model", str(tiny_checkpoint("qwen2-vl")), "--device", "cpu", "--batch-size", "8", "--quiet",
              "--benchmark", str(manifest)]
    assert main(["eval", *common, "--out", str(tmp_path / "eval"), "--no-pictures"]) == 0
    assert main(["mteb", *common, "--out", str(tmp_path / "mteb")]) == 0
    ours = json.loads((tmp_path / "eval" / "results.json").read_text())["datasets"]["Pages"]["metrics"]
    result = next(path for path in (tmp_path / "mteb").rglob("Pages.json"))
    theirs = json.loads(result.read_text())["scores"]["test"][0]
    assert theirs["ndcg_at_5"] == pytest.approx(round(ours["ndcg_linear@5"] / 100, 5), abs=1e-5)
    assert theirs["precision_at_1"] == pytest.approx(round(ours["hit@1"] / 100, 5), abs=1e-5)


def test_prep_check_reads_every_qrels_row(tmp_path: Path, capsys) -> None:
    files = make_qrels_benchmark(tmp_path / "qrels")
    manifest = _manifest(tmp_path, [QRELS_ENTRY])
    assert main(["prep", "check", str(manifest)]) == 0
    assert "Pages: MMEB-V2/VDRv1 qrels: 6 queries (1 without a relevant document), 12 documents, " \
           "13 judgements" in capsys.readouterr().out
    with files["qrels"].open("a") as handle:
        handle.write(json.dumps({"query_id": "t-red", "corpus_id": "nope", "score": 1}) + "\n")
    assert main(["prep", "check", str(manifest)]) == 2
    assert "qrels.jsonl:14: field 'corpus_id': unknown corpus id 'nope'" in capsys.readouterr().err


def test_qrels_datasets_get_bar_charts_and_grids(tmp_path: Path) -> None:
    make_qrels_benchmark(tmp_path / "qrels")
    specs = load_benchmark(_manifest(tmp_path, [QRELS_ENTRY])).datasets
    results = Harness(FakeEncoder(), tmp_path / "out", EvalSettings(show_progress=False)).run(specs)
    assert (tmp_path / "out" / "plots" / "VDRv1.png").is_file()
    assert (tmp_path / "out" / results["datasets"]["Pages"]["grid"]).is_file()
