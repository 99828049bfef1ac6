"""MMEB grouping of VLM2Vec score files and ``vis-embed report``.

The expected means are computed here from the raw files with the MMEB dataset lists written
out independently of vis_embed.evaluation.taxonomy, and cross-checked against the published
MMEB averages of visme_table1.csv (which are means over datasets, not over meta-tasks).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vis_embed.cli import main
from vis_embed.evaluation import report

# MMEB (VLM2Vec paper, Table 1): 20 in-distribution datasets, 16 out-of-distribution.
IND = {
    "Cls": ["ImageNet-1K", "N24News", "HatefulMemes", "VOC2007", "SUN397"],
    "VQA": ["OK-VQA", "A-OKVQA", "DocVQA", "InfographicsVQA", "ChartQA", "Visual7W"],
    "Ret": ["VisDial", "CIRR", "VisualNews_t2i", "VisualNews_i2t", "MSCOCO_t2i", "MSCOCO_i2t", "NIGHTS", "WebQA"],
    "Grd": ["MSCOCO"],
}
OOD = {
    "Cls": ["Place365", "ImageNet-A", "ImageNet-R", "ObjectNet", "Country211"],
    "VQA": ["ScienceQA", "VizWiz", "GQA", "TextVQA"],
    "Ret": ["OVEN", "FashionIQ", "EDIS", "Wiki-SS-NQ"],
    "Grd": ["RefCOCO", "RefCOCO-Matching", "Visual7W-Pointing"],
}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _expected(path: Path) -> dict[str, float]:
    image = json.loads(path.read_text())["metrics"]["image"]
    hit = {name: 100 * values["hit@1"] for name, values in image.items()}
    expected = {task: _mean([hit[d] for d in IND[task] + OOD[task]]) for task in IND}
    expected["IND"] = expected["MMEB-IND"] = _mean([hit[d] for names in IND.values() for d in names])
    expected["OOD"] = expected["MMEB-OOD"] = _mean([hit[d] for names in OOD.values() for d in names])
    expected["overall"] = expected["MMEB"] = _mean(list(hit.values()))
    return expected


def test_mmeb_grouping_of_every_reference_score_file(shared_reference: Path) -> None:
    files = sorted((shared_reference / "mmeb_scores").glob("*.json"))
    assert files, "no score files found"
    for path in files:
        got = report.load_groups(path)
        expected = _expected(path)
        assert set(got) == set(expected), path.name
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, abs=1e-9), (path.name, key)


def test_overall_is_a_mean_over_datasets_as_published(shared_reference: Path) -> None:
    """VLM2Vec-V2.0 (2B) is in the paper's table: its MMEB average matches the dataset mean,
    and clearly not the mean of the four meta-task means."""
    groups = report.load_groups(shared_reference / "mmeb_scores" / "VLM2Vec-V2.0-Qwen2VL-2B.json")
    with (shared_reference / "visme_table1.csv").open() as handle:
        rows = list(csv.DictReader(line for line in handle if not line.startswith("#")))
    published = next(r for r in rows if r["model"] == "VLM2Vec-V2.0")
    assert groups["MMEB"] == pytest.approx(float(published["MMEB_avg"]), abs=0.06)
    for task in ("Cls", "VQA", "Ret", "Grd"):
        assert groups[task] == pytest.approx(float(published[task]), abs=0.25)
    mean_of_tasks = _mean([groups[t] for t in ("Cls", "VQA", "Ret", "Grd")])
    assert abs(mean_of_tasks - float(published["MMEB_avg"])) > 1.0


def _markdown_rows(printed: str) -> dict[str, list[str]]:
    """``{first cell: cells}`` of every Markdown table row in ``printed``."""
    rows = [line.strip("|").split("|") for line in printed.splitlines() if line.startswith("|")]
    return {cells[0].strip(): [cell.strip() for cell in cells] for cells in rows}


def test_report_cli_prints_markdown_side_by_side_and_json(tmp_path: Path, shared_reference: Path, capsys) -> None:
    ours = {"model": {"name": "m"}, "datasets": {"X": {"meta_task": "ID-Rec", "split": "IND", "n_queries": 1,
                                                       "metrics": {"P@1": 50.0}}},
            "groups": {"ID-Rec": 50.0, "IND": 50.0, "MVEB": 50.0, "overall": 50.0}}
    ours_path = tmp_path / "results.json"
    ours_path.write_text(json.dumps(ours))
    score_file = shared_reference / "mmeb_scores" / "gme-Qwen2-VL-2B-Instruct.json"
    out = tmp_path / "table.json"
    assert main(["report", str(ours_path), str(score_file), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = _markdown_rows(printed)
    header = rows["Model"]
    assert header[:2] == ["Model", "Backbone"] and set(printed.splitlines()[1]) == {"|", "-"}
    ours_row = dict(zip(header, rows["**results**"], strict=True))
    assert ours_row["ID-Rec"] == "**50.0**" and ours_row["Cls"] == "**–**" and ours_row["overall"] == "**50.0**"
    gme = dict(zip(header, rows["**gme-Qwen2-VL-2B-Instruct**"], strict=True))
    assert gme["Cls"] == f"**{_expected(score_file)['Cls']:.1f}**"
    assert "VisME" in rows  # the published rows come with vis_embed
    written = json.loads(out.read_text())
    assert written["models"]["results"] == ours["groups"]
    assert written["models"]["gme-Qwen2-VL-2B-Instruct"] == pytest.approx(_expected(score_file))

    broken = tmp_path / "broken.json"
    broken.write_text("{\"metadata\": {}}")
    assert main(["report", str(broken)]) == 2
    assert "metrics.image" in capsys.readouterr().err


def test_report_peers_are_the_packaged_score_files(shared_reference: Path, capsys) -> None:
    assert main(["report", "--peers", "--no-reference"]) == 0
    rows = _markdown_rows(capsys.readouterr().out)
    header = rows.pop("Model")
    rows.pop(next(key for key in rows if set(key) == {"-"}))
    shipped = sorted((shared_reference / "mmeb_scores").glob("*.json"))
    assert sorted(rows) == sorted(path.stem for path in shipped)
    for path in shipped:
        assert dict(zip(header, rows[path.stem], strict=True))["MMEB"] == f"{_expected(path)['MMEB']:.1f}"


def test_packaged_reference_files_are_the_published_ones(shared_reference: Path) -> None:
    from vis_embed import resources

    assert resources.reference_table().read_bytes() == (shared_reference / "visme_table1.csv").read_bytes()
    packaged = {entry.name: entry.read_bytes() for entry in resources.mmeb_score_files()}
    published = {path.name: path.read_bytes() for path in (shared_reference / "mmeb_scores").glob("*.json")}
    assert packaged == published


def test_report_in_a_fresh_clone_shows_the_papers_rows(tmp_path: Path) -> None:
    """Only the package, no ../shared beside it: ``vis-embed report`` still has Table 1."""
    repo = Path(__file__).resolve().parents[1]
    clone = tmp_path / "clone"
    shutil.copytree(repo / "vis_embed", clone / "vis_embed", ignore=shutil.ignore_patterns("__pycache__"))
    results = clone / "results.json"
    results.write_text(json.dumps({"model": {"name": "m"}, "datasets": {}, "groups": {"Cls": 40.0}}))
    probe = ("import sys, vis_embed; from vis_embed.cli import main; "
             "assert vis_embed.__file__.startswith(sys.argv[1]), vis_embed.__file__; "
             "sys.exit(main(['report', 'results.json']))")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", report.REFERENCE_ENV)}
    done = subprocess.run([sys.executable, "-c", probe, str(clone)], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "shared").exists() and not (tmp_path.parent / "shared").exists()
    assert ("| VisME | Qwen2.5-VL-7B | 66.4 | 70.2 | 72.6 | 90.7 | 72.2 | 80.8 | 70.6 | 76.7 | 88.7 | 78.8 |"
            in done.stdout)
    assert "| **results** |  | **40.0** |" in done.stdout


def test_markdown_has_published_rows_and_ours(shared_reference: Path) -> None:
    results = {"model": {"name": "mine", "adapter": "lora"},
               "datasets": {"X": {"meta_task": "Cls", "split": "IND", "n_queries": 3, "metrics": {"P@1": 12.5}}},
               "groups": {"Cls": 12.5, "IND": 12.5, "MMEB": 12.5, "overall": 12.5}}
    rows = report.read_reference(report.find_reference(shared_reference / "visme_table1.csv"))
    text = report.markdown(results, rows)
    assert "| VisME | Qwen2.5-VL-7B | 66.4 | 70.2 | 72.6 | 90.7 | 72.2 | 80.8 | 70.6 | 76.7 | 88.7 | 78.8 |" in text
    assert "| **mine + lora** |  | **12.5** | **–** |" in text
    assert report.read_reference(report.find_reference()) == rows  # shipped with the package, no flag needed


# ------------------------------------------------------------------ MMEB-format score files from eval

def _eval_with_mmeb_names(tmp_path: Path) -> dict:
    """Run the harness (fake encoder) on two datasets named as MMEB ones and one MVEB dataset."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from eval_fakes import FakeEncoder, make_identity_benchmark

    from vis_embed.data import EvalDatasetSpec
    from vis_embed.evaluation.harness import EvalSettings, Harness

    files = make_identity_benchmark(tmp_path / "data")
    common = {"image_root": files["images"], "query_instruction": "Find the same object.",
              "candidate_instruction": "Represent the image."}
    specs = [EvalDatasetSpec("ImageNet-1K", "candidates", "Cls", "IND", "MMEB", path=files["candidates"], **common),
             EvalDatasetSpec("ObjectNet", "gallery", "Cls", "OOD", "MMEB", queries=files["queries"],
                             gallery=files["gallery"], **common),
             EvalDatasetSpec("Mine", "candidates", "ID-Rec", "IND", "MVEB", path=files["candidates"], **common)]
    return Harness(FakeEncoder(), tmp_path / "out", EvalSettings(show_progress=False, pictures=False)).run(specs)


def test_eval_writes_vlm2vec_score_files(tmp_path: Path) -> None:
    results = _eval_with_mmeb_names(tmp_path)
    folder = tmp_path / "out" / "mmeb_scores"
    assert sorted(p.name for p in (folder / "image").iterdir()) == ["ImageNet-1K_score.json", "ObjectNet_score.json"]
    for name in ("ImageNet-1K", "ObjectNet"):
        score = json.loads((folder / "image" / f"{name}_score.json").read_text())
        entry = results["datasets"][name]
        assert score["num_pred"] == entry["n_queries"]
        assert score["acc"] == score["hit@1"] == pytest.approx(entry["metrics"]["P@1"] / 100)
        assert score["num_correct"] / score["num_pred"] == pytest.approx(score["acc"])
    combined = json.loads((folder / "fake-model.json").read_text())
    assert set(combined["metrics"]["image"]) == {"ImageNet-1K", "ObjectNet"}
    assert combined["metadata"]["model_name"] == "fake-model"


def test_report_reads_eval_score_files_back(tmp_path: Path, capsys) -> None:
    results = _eval_with_mmeb_names(tmp_path)
    folder = tmp_path / "out" / "mmeb_scores"
    from_folder = report.load_groups(folder)
    from_combined = report.load_groups(folder / "fake-model.json")
    mmeb_only = {name: entry for name, entry in results["datasets"].items() if name != "Mine"}
    expected = report.group_means([{"meta_task": e["meta_task"], "split": e["split"], "benchmark": "MMEB",
                                    "score": e["metrics"]["P@1"]} for e in mmeb_only.values()])
    for groups in (from_folder, from_combined):
        assert set(groups) == set(expected)
        for key, value in expected.items():
            assert groups[key] == pytest.approx(value, abs=1e-9), key
    assert main(["report", str(tmp_path / "out" / "results.json"), str(folder), "--no-reference"]) == 0
    printed = capsys.readouterr().out
    assert "**results**" in printed and "**mmeb_scores**" in printed


def test_report_reads_vlm2vec_v1_score_folders(tmp_path: Path) -> None:
    """VLM2Vec's own eval.py writes {acc, num_correct, num_pred} per dataset (no hit@1)."""
    for name, acc in (("ImageNet-1K", 0.5), ("CIRR", 0.25)):
        (tmp_path / f"{name}_score.json").write_text(json.dumps({"acc": acc, "num_correct": 1, "num_pred": 2}))
    groups = report.load_groups(tmp_path)
    assert groups["overall"] == pytest.approx(37.5)
    assert groups["Cls"] == pytest.approx(50.0) and groups["Ret"] == pytest.approx(25.0)


def test_report_names_an_empty_score_folder(tmp_path: Path) -> None:
    from vis_embed.errors import DataError

    with pytest.raises(DataError, match="_score.json"):
        report.load_groups(tmp_path)


@pytest.mark.parametrize("text, message", [
    ('{"metrics": {"image": {"ImageNet-1K": {"hit@1": NaN}}}}',  # was a row of "nan" group means
     r"field 'metrics.image.ImageNet-1K': 'hit@1' must be a finite number, got nan"),
    ('{"metrics": {"image": {"ImageNet-1K": {"hit@1": "0.5"}}}}',  # was a ValueError traceback
     r"field 'metrics.image.ImageNet-1K': 'hit@1' must be a finite number, got '0.5'"),
    ('{"metrics": {"video": {"MSVD": {"hit@1": Infinity}}}}', r"field 'metrics.video.MSVD': 'hit@1' must be a finite"),
    ('{"datasets": {}, "groups": {"Cls": null}}', r"field 'groups.Cls': Input should be a valid number"),  # TypeError
])
def test_report_names_a_score_that_is_not_a_finite_number(tmp_path: Path, capsys, text: str, message: str) -> None:
    path = tmp_path / "scores.json"
    path.write_text(text)
    assert main(["report", str(path), "--no-reference"]) == 2
    assert message in capsys.readouterr().err


def test_results_json_is_read_once_through_one_model(tmp_path: Path) -> None:
    """results.json's readers (the card's summary, export --results, the report, the MMEB score
    files) parse it once into ResultsFile: an older file without primary / tie_policy reads with
    the defaults it meant, unknown keys are kept, and a value of the wrong type names the key."""
    from vis_embed.data.results_file import ResultsFile
    from vis_embed.errors import DataError
    from vis_embed.evaluation.mmeb_scores import mmeb_scores
    from vis_embed.model.files.model_card import evaluation_summary

    written = {"model": {"name": "m", "adapter": "run/final", "fingerprints": {"model": "fp", "benchmark": "b"}},
               "dim": 8, "datasets": {"VOC2007": {"metrics": {"P@1": 50.0}, "n_queries": 4, "meta_task": "Cls",
                                                  "split": "IND", "benchmark": "mmeb", "added_later": 1}},
               "groups": {"MMEB": 50.0}, "counts": {"MMEB": 1}}
    results = ResultsFile.of(written)
    assert results.tie_policy == "pessimistic" and results.model.label == "m + run/final"
    assert results.model.fingerprint == "fp" and results.model_extra == {"dim": 8}
    entry = results.datasets["VOC2007"]
    assert entry.primary is None and entry.primary_metric == "P@1" and entry.model_extra == {"added_later": 1}
    assert mmeb_scores(results)["VOC2007"]["num_correct"] == 2  # the older file: scored by P@1
    assert evaluation_summary(results) == {"datasets": {}, "groups": {"MMEB": 50.0}, "model_fingerprint": "fp"}
    with_primary = {**written, "datasets": {"VOC2007": {**written["datasets"]["VOC2007"], "primary": "P@1"}}}
    assert evaluation_summary(with_primary)["datasets"]["VOC2007"] == {
        "metric": "P@1", "value": 50.0, "meta_task": "Cls", "split": "IND", "benchmark": "mmeb"}
    assert "| VOC2007 | Cls | IND | 4 | P@1 | 50.0" in report.markdown(with_primary)
    with pytest.raises(DataError, match=r"results\.json.*n_queries"):
        ResultsFile.of({"datasets": {"VOC2007": {"n_queries": "four"}}}, tmp_path / "results.json")


def test_the_group_keys_docs_spell_out_are_the_taxonomys() -> None:
    import re

    from vis_embed.data.taxonomy import GROUP_KEYS

    text = (Path(__file__).resolve().parents[1] / "docs" / "evaluation.md").read_text(encoding="utf-8")
    listed = re.search(r"Group keys are spelled exactly `([^`]+)`", text)
    assert listed is not None and tuple(listed.group(1).split()) == GROUP_KEYS
