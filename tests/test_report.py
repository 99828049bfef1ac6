"""MMEB grouping of VLM2Vec score files and ``vis-embed report``.

The expected means are computed here from the raw files with the MMEB dataset lists written
out independently of vis_embed.evaluation.taxonomy, and cross-checked against the published
MMEB averages of visme_table1.csv (which are means over datasets, not over meta-tasks).
"""

from __future__ import annotations

import csv
import json
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
    expected["IND"] = _mean([hit[d] for names in IND.values() for d in names])
    expected["OOD"] = _mean([hit[d] for names in OOD.values() for d in names])
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


def test_report_cli_side_by_side_and_json(tmp_path: Path, shared_reference: Path, capsys) -> None:
    ours = {"model": {"name": "m"}, "datasets": {"X": {"meta_task": "ID-Rec", "split": "IND", "n_queries": 1,
                                                       "metrics": {"P@1": 50.0}}},
            "groups": {"ID-Rec": 50.0, "IND": 50.0, "MVEB": 50.0, "overall": 50.0}}
    ours_path = tmp_path / "results.json"
    ours_path.write_text(json.dumps(ours))
    score_file = shared_reference / "mmeb_scores" / "gme-Qwen2-VL-2B-Instruct.json"
    out = tmp_path / "table.json"
    assert main(["report", str(ours_path), str(score_file), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "results" in printed and "gme-Qwen2-VL-2B-Instruct" in printed
    assert printed.splitlines()[1].split()[0] == "Cls"
    written = json.loads(out.read_text())
    assert written["models"]["results"] == ours["groups"]
    assert written["models"]["gme-Qwen2-VL-2B-Instruct"] == pytest.approx(_expected(score_file))

    broken = tmp_path / "broken.json"
    broken.write_text("{\"metadata\": {}}")
    assert main(["report", str(broken)]) == 2
    assert "metrics.image" in capsys.readouterr().err


def test_markdown_has_published_rows_and_ours(shared_reference: Path) -> None:
    results = {"model": {"name": "mine", "adapter": "lora"},
               "datasets": {"X": {"meta_task": "Cls", "split": "IND", "n_queries": 3, "metrics": {"P@1": 12.5}}},
               "groups": {"Cls": 12.5, "IND": 12.5, "MMEB": 12.5, "overall": 12.5}}
    rows = report.read_reference(report.find_reference(shared_reference / "visme_table1.csv"))
    text = report.markdown(results, rows)
    assert "| VisME | Qwen2.5-VL-7B | 66.4 | 70.2 | 72.6 | 90.7 | 72.2 | 80.8 | 70.6 | 76.7 | 88.7 | 78.8 |" in text
    assert "| **mine + lora** |  | **12.5** | **–** |" in text
    assert report.find_reference() is not None  # located beside the repository without a flag
