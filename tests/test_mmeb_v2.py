"""MMEB-V2: the benchmark manifest, the group keys, and the peers' columns recomputed from the
shipped per-task score files (expected values computed here, independently of the library)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from vis_embed import resources
from vis_embed.cli import main
from vis_embed.data import load_benchmark
from vis_embed.data.taxonomy import group_counts, group_means
from vis_embed.errors import DataError
from vis_embed.evaluation.mmeb_v2_scores import data_version, mmeb_v2_notes, mmeb_v2_summary
from vis_embed.evaluation.report import vlm2vec_groups

MANIFEST = Path(__file__).resolve().parents[1] / "eval" / "mmeb_v2.yaml"
# VLM2Vec's experiments/report_score_v2.py: the 18 video tasks (the score files also hold
# MomentSeeker_1k8, which is not one of them)
VIDEO_18 = ["DiDeMo", "MSR-VTT", "MSVD", "VATEX", "YouCook2", "QVHighlight", "Charades-STA", "MomentSeeker",
            "K700", "SmthSmthV2", "HMDB51", "UCF101", "Breakfast", "MVBench", "Video-MME", "NExTQA", "EgoSchema",
            "ActivityNetQA"]
VIDEO_RET = ["DiDeMo", "MSR-VTT", "MSVD", "VATEX", "YouCook2"]
PAGE_SETS = ["ViDoSeek-page", "ViDoSeek-doc", "MMLongBench-page", "MMLongBench-doc"]


def _peer_files() -> dict[str, dict]:
    return {entry.name.removesuffix(".json"): json.loads(entry.read_text()) for entry in resources.mmeb_score_files()}


def _mean(values: list[float]) -> float:
    return 100.0 * sum(values) / len(values)


def _materialised(tmp_path: Path) -> Path:
    """The manifest in ``tmp_path/eval`` with empty placeholder data files where its paths point
    (``tmp_path/data/mmeb_v2/...``, as the converter writes them), so load_benchmark validates all of it."""
    document = yaml.safe_load(MANIFEST.read_text())
    (tmp_path / "eval").mkdir()
    for entry in document["datasets"]:
        for key in ("path", "queries", "corpus", "qrels"):
            if key in entry:
                target = (tmp_path / "eval" / entry[key]).resolve()
                assert target.is_relative_to(tmp_path / "data" / "mmeb_v2"), entry[key]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()
    return Path(shutil.copy(MANIFEST, tmp_path / "eval" / "mmeb_v2.yaml"))


def test_manifest_has_the_78_tasks_of_the_peers_score_files(tmp_path: Path) -> None:
    bench = load_benchmark(_materialised(tmp_path))
    assert bench.protocol == "vlm2vec" and len(bench.datasets) == 78
    by_modality: dict[str, list[str]] = {}
    for spec in bench.datasets:
        by_modality.setdefault(spec.modality, []).append(spec.name)
        assert spec.benchmark == "MMEB-V2"
    assert {m: len(names) for m, names in by_modality.items()} == {"image": 36, "video": 18, "visdoc": 24}
    for name, scores in _peer_files().items():
        metrics = scores["metrics"]
        assert set(by_modality["image"]) == set(metrics["image"]), name
        assert set(by_modality["video"]) == set(metrics["video"]) - {"MomentSeeker_1k8"} == set(VIDEO_18), name
        assert set(by_modality["visdoc"]) == set(metrics["visdoc"]), name
    specs = {spec.name: spec for spec in bench.datasets}
    # global pools are qrels datasets (video scored by hit@1), local lists candidates
    assert specs["MSR-VTT"].layout == "qrels" and specs["MSR-VTT"].options.primary == "hit@1"
    assert specs["SmthSmthV2"].layout == specs["NExTQA"].layout == specs["QVHighlight"].layout == "candidates"
    assert specs["ViDoRe_arxivqa"].layout == "qrels" and specs["ViDoRe_arxivqa"].options.primary is None
    assert specs["ViDoRe_arxivqa"].qrels == tmp_path / "data" / "mmeb_v2" / "visdoc" / "ViDoRe_arxivqa" / "qrels.jsonl"
    assert specs["ImageNet-1K"].path == tmp_path / "data" / "mmeb_v2" / "image" / "ImageNet-1K" / "ImageNet-1K.jsonl"
    assert specs["MSR-VTT"].query_instruction == "Find a video that contains the following visual content:"
    assert specs["K700"].candidate_instruction is None  # class labels are plain text


def test_mmeb_v2_groups_and_counts() -> None:
    rows = [{"meta_task": "Cls", "benchmark": "MMEB-V2", "split": "IND", "score": 60.0},
            {"meta_task": "V-RET", "benchmark": "MMEB-V2", "score": 30.0},
            {"meta_task": "V-QA", "score": 40.0},  # benchmark and modality implied by the meta-task
            {"meta_task": "VDRv1", "score": 80.0},
            {"meta_task": "Cls", "benchmark": "MMEB", "split": "IND", "score": 10.0}]  # MMEB (v1) stays as it was
    groups, counts = group_means(rows), group_counts(rows)
    assert groups["Image"] == 60.0 and groups["Video"] == 35.0 and groups["VisDoc"] == 80.0
    assert groups["MMEB-V2"] == pytest.approx((60 + 30 + 40 + 80) / 4) and counts["MMEB-V2"] == 4
    assert groups["MMEB"] == groups["MMEB-IND"] == 10.0 and counts["MMEB"] == 1
    assert "MMEB-V2-IND" not in groups and counts["Cls"] == 2 and counts["Video"] == 2


def test_report_peers_json_has_the_mmeb_v2_columns_of_the_shipped_files(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    assert main(["report", "--peers", "--no-reference", "--json", str(out)]) == 0
    written = json.loads(out.read_text())["mmeb_v2"]
    peers = _peer_files()
    assert set(written) == set(peers)
    for name, scores in peers.items():
        metrics = scores["metrics"]
        image = [v["hit@1"] for v in metrics["image"].values()]
        video = [metrics["video"][task]["hit@1"] for task in VIDEO_18]
        visdoc = [v["ndcg_linear@5"] for v in metrics["visdoc"].values()]
        row = written[name]
        assert row["counts"]["Image"] == 36 and row["counts"]["Video"] == 18 and row["counts"]["VisDoc"] == 24
        assert row["counts"]["MMEB-V2"] == 78 and row["left_out"] == ["video/MomentSeeker_1k8"]
        assert row["groups"]["Image"] == pytest.approx(_mean(image), abs=0.01), name
        assert row["groups"]["Video"] == pytest.approx(_mean(video), abs=0.01), name
        assert row["groups"]["VisDoc"] == pytest.approx(_mean(visdoc), abs=0.01), name
        assert row["groups"]["MMEB-V2"] == pytest.approx(_mean(image + video + visdoc), abs=0.01), name
        assert row["groups"]["V-RET"] == pytest.approx(_mean([metrics["video"][t]["hit@1"] for t in VIDEO_RET]),
                                                       abs=0.01)
        assert row["groups"]["VD-OOD"] == pytest.approx(
            _mean([metrics["visdoc"][t]["ndcg_linear@5"] for t in PAGE_SETS]), abs=0.01)
        assert row["data_version"] == "original"
    assert written["VLM2Vec-V2.0-Qwen2VL-2B"]["groups"]["Video"] == pytest.approx(34.7, abs=0.05)  # the paper's


def test_data_version_comes_from_the_file() -> None:
    scores = _peer_files()["VLM2Vec-V2.0-Qwen2VL-2B"]
    assert data_version(scores) == "original"
    visdoc = dict(scores["metrics"]["visdoc"])
    visdoc["ViDoSeek-page-fixed"] = visdoc.pop("ViDoSeek-page")
    fixed = {**scores, "metrics": {**scores["metrics"], "visdoc": visdoc}}
    assert data_version(fixed) == "page-fixed"
    summary = mmeb_v2_summary(fixed)
    assert summary["counts"]["VisDoc"] == 24  # the fixed set stands in for the task it replaces
    assert data_version({**scores, "metadata": {"data_version": "v2.2"}}) == "v2.2"
    assert mmeb_v2_summary({"metrics": {"image": scores["metrics"]["image"]}}) is None  # image only: MMEB


def test_a_task_held_under_both_names_is_refused() -> None:
    """ViDoSeek-page and ViDoSeek-page-fixed are one task: a file holding both would count it twice."""
    scores = _peer_files()["VLM2Vec-V2.0-Qwen2VL-2B"]
    visdoc = {**scores["metrics"]["visdoc"], "ViDoSeek-page-fixed": scores["metrics"]["visdoc"]["ViDoSeek-page"]}
    both = {**scores, "metrics": {**scores["metrics"], "visdoc": visdoc}}
    with pytest.raises(DataError, match=r"both\.json: field 'metrics\.visdoc\.ViDoSeek-page-fixed': .*"
                                        r"'ViDoSeek-page' and 'ViDoSeek-page-fixed'"):
        mmeb_v2_summary(both, "both.json")


def _report_v2_file(run: str) -> dict:
    """VLM2Vec's report_score_v2.py output for a run of one modality: the others' tasks hold its
    placeholders (FILE_N/A: no score file; DIR_N/A: no folder for the modality)."""
    metrics = _peer_files()["VLM2Vec-V2.0-Qwen2VL-2B"]["metrics"]
    return {"metadata": {"model_name": "m"}, "metrics": {
        modality: tasks if modality == run else {name: "FILE_N/A" if modality == "image" else "DIR_N/A"
                                                 for name in tasks} for modality, tasks in metrics.items()}}


def test_report_v2_placeholders_are_tasks_not_run(tmp_path: Path) -> None:
    scores = _report_v2_file("video")
    path = tmp_path / "video_only.json"
    path.write_text(json.dumps(scores))
    out = tmp_path / "table.json"
    assert main(["report", str(path), "--no-reference", "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    summary = written["mmeb_v2"]["video_only"]
    video = [scores["metrics"]["video"][task]["hit@1"] for task in VIDEO_18]
    assert summary["counts"] == {"V-CLS": 5, "V-QA": 5, "V-RET": 5, "V-MRET": 3, "Video": 18, "MMEB-V2": 18}
    assert summary["groups"]["MMEB-V2"] == pytest.approx(_mean(video))
    assert "image/ImageNet-1K (not run: FILE_N/A)" in summary["left_out"]
    assert "visdoc/ViDoSeek-page (not run: DIR_N/A)" in summary["left_out"]
    assert len(summary["left_out"]) == 1 + 36 + 24 and summary["data_version"] is None  # no visdoc task held
    # the report's note counts the tasks not run per modality instead of naming 60 of them
    note = mmeb_v2_notes({"video_only": summary})
    assert "36 image tasks not run" in note and "24 visdoc tasks not run" in note and "ImageNet-1K" not in note
    assert written["models"]["video_only"] == {}  # no image task: no MMEB groups
    image_only = _report_v2_file("image")
    assert mmeb_v2_summary(image_only) is None  # image tasks only: an MMEB row, not MMEB-V2
    assert vlm2vec_groups(image_only)["MMEB"] == pytest.approx(
        _mean([v["hit@1"] for v in image_only["metrics"]["image"].values()]))
    broken = _report_v2_file("video")
    broken["metrics"]["video"]["MSVD"] = "JSON_ERROR"  # a score file that was there but unreadable
    with pytest.raises(DataError, match=r"field 'metrics\.video\.MSVD': missing 'hit@1'"):
        mmeb_v2_summary(broken, "broken.json")


def test_eval_writes_vlm2vec_score_files_for_visdoc_tasks_and_report_reads_them(tmp_path: Path, capsys) -> None:
    from eval_fakes import FakeEncoder, make_qrels_benchmark

    from vis_embed.data import EvalDatasetSpec
    from vis_embed.evaluation.harness import Harness
    from vis_embed.evaluation.settings import EvalSettings

    files = make_qrels_benchmark(tmp_path / "data")
    spec = EvalDatasetSpec("ViDoRe_arxivqa", "qrels", "VDRv1", None, "MMEB-V2", modality="visdoc",
                           image_root=tmp_path / "data", query_instruction="Find a document image:", **files)
    results = Harness(FakeEncoder(), tmp_path / "out", EvalSettings(show_progress=False, pictures=False)).run([spec])
    entry = results["datasets"]["ViDoRe_arxivqa"]
    score = json.loads((tmp_path / "out" / "mmeb_scores" / "visdoc" / "ViDoRe_arxivqa_score.json").read_text())
    assert score["ndcg_linear@5"] == pytest.approx(entry["metrics"]["ndcg_linear@5"] / 100)
    assert score["hit@1"] == pytest.approx(entry["metrics"]["hit@1"] / 100) and score["num_pred"] == 6
    combined = tmp_path / "out" / "mmeb_scores" / "fake-model.json"
    out = tmp_path / "table.json"
    assert main(["report", str(combined), str(tmp_path / "out" / "results.json"), str(combined.parent),
                 "--no-reference", "--json", str(out)]) == 0
    written = json.loads(out.read_text())["mmeb_v2"]
    for name in ("fake-model", "results", "mmeb_scores"):  # the combined file, ours, the folder of score files
        assert written[name]["groups"]["VisDoc"] == pytest.approx(entry["metrics"]["ndcg_linear@5"])
        assert written[name]["counts"]["MMEB-V2"] == 1


def _page_fixed_source(src: Path) -> None:
    """A local copy of VLM2Vec/ViDoSeek-page-fixed, the set prep reads for ViDoSeek-page."""
    from tests._mmeb_v2_fakes import hub_dataset, jpeg

    hub_dataset(src, "VLM2Vec/ViDoSeek-page-fixed", {
        "queries": {"test": [{"query-id": 1, "query": "revenue?"}, {"query-id": 2, "query": "cost?"}]},
        "corpus": {"test": [{"corpus-id": f"doc1_{k}", "image": {"bytes": jpeg((90 * k, 0, 0), "PNG"), "path": None}}
                            for k in (1, 2)]},
        "qrels": {"test": [{"query-id": 1, "corpus-id": "doc1_1", "score": 1},
                           {"query-id": 2, "corpus-id": "doc1_2", "score": 1}]}}, image_columns=("image",))


def test_our_run_of_a_page_fixed_prep_says_page_fixed_and_never_original(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """prep reads the page-fixed set under the old name, which alone would read as the first release:
    results.json and the combined score file state the version prep recorded (its manifest.json);
    without that record they say unknown, as does a folder of per-task score files."""
    from eval_fakes import FakeEncoder

    from vis_embed.data import EvalDatasetSpec
    from vis_embed.evaluation.harness import Harness
    from vis_embed.evaluation.mmeb_v2_scores import prepared_data_version
    from vis_embed.evaluation.settings import EvalSettings
    from vis_embed.prep.mmeb_v2 import convert_mmeb_v2

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    _page_fixed_source(tmp_path / "src")
    convert_mmeb_v2(tmp_path / "data", tasks=["ViDoSeek-page"], source_root=tmp_path / "src")
    task = tmp_path / "data" / "visdoc" / "ViDoSeek-page"
    unrecorded = Path(shutil.copytree(task, tmp_path / "unrecorded"))  # the same files, no record of their source
    (unrecorded / "manifest.json").unlink()

    def spec(folder: Path, name: str = "ViDoSeek-page") -> EvalDatasetSpec:
        return EvalDatasetSpec(name, "qrels", "VD-OOD", None, "MMEB-V2", modality="visdoc", image_root=folder,
                               **{role: folder / f"{role}.jsonl" for role in ("queries", "corpus", "qrels")})

    def labels(folder: Path, out: Path) -> dict[str, str]:
        Harness(FakeEncoder(), out, EvalSettings(show_progress=False, pictures=False)).run([spec(folder)])
        table = out / "table.json"
        assert main(["report", str(out / "results.json"), str(out / "mmeb_scores" / "fake-model.json"),
                     str(out / "mmeb_scores"), "--no-reference", "--json", str(table)]) == 0
        return {name: row["data_version"] for name, row in json.loads(table.read_text())["mmeb_v2"].items()}

    assert labels(task, tmp_path / "out") == {"results": "page-fixed", "fake-model": "page-fixed",
                                              "mmeb_scores": "unknown"}
    assert json.loads((tmp_path / "out" / "results.json").read_text())["data_version"] == "page-fixed"
    assert labels(unrecorded, tmp_path / "bare") == {"results": "unknown", "fake-model": "unknown",
                                                     "mmeb_scores": "unknown"}
    # a run is page-fixed only when each re-released task it holds is; without one, nothing says
    assert prepared_data_version([spec(task), spec(unrecorded, "MMLongBench-page")]) == "unknown"
    assert prepared_data_version([spec(task, "ViDoRe_arxivqa")]) == "unknown"
    assert prepared_data_version([replace(spec(task), modality="video")]) is None  # no visdoc task: no version
