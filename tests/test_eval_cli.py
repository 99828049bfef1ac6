"""``vis-embed eval`` end to end (fake encoder injected) and the shipped manifests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from eval_fakes import FakeEncoder, make_identity_benchmark, write_jsonl
from PIL import Image

from vis_embed.cli import main
from vis_embed.evaluation import cli as eval_cli

REPO = Path(__file__).resolve().parents[1]


def _manifest(tmp_path: Path) -> Path:
    files = make_identity_benchmark(tmp_path / "bench")
    manifest = {"name": "tiny", "datasets": [
        {"name": "Cand", "benchmark": "MVEB", "meta_task": "ID-Rec", "split": "IND", "layout": "candidates",
         "path": "cand.jsonl", "image_root": "images", "query_instruction": "Find the same object.",
         "candidate_instruction": "Represent the image."},
        {"name": "Gal", "benchmark": "MVEB", "meta_task": "Re-ID", "split": "OOD", "layout": "gallery",
         "queries": "queries.jsonl", "gallery": "gallery.jsonl", "image_root": "images"},
        {"name": "AFC", "benchmark": "other", "meta_task": "2AFC", "split": "IND", "layout": "2afc",
         "path": "afc.jsonl", "image_root": "images", "seed": 3},
    ]}
    write_jsonl(files["candidates"].parent / "afc.jsonl", [
        {"id": "t0", "reference": "red_0.png", "a": "red_1.png", "b": "blue_1.png", "label": 1.0},
        {"id": "t1", "reference": {"image": "blue_0.png"}, "a": "red_1.png", "b": "blue_1.png", "label": 0.25},
    ])
    path = files["candidates"].parent / "benchmark.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def test_eval_command_writes_every_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    encoders: list[FakeEncoder] = []

    def fake_loader(args):
        encoders.append(FakeEncoder(adapter=args.adapter))
        return encoders[-1]

    monkeypatch.setattr(eval_cli, "_load_encoder", fake_loader)
    out = tmp_path / "out"
    argv = ["eval", "--model", "fake", "--adapter", "lora-a", "--benchmark", str(_manifest(tmp_path)),
            "--out", str(out), "--batch-size", "4", "--quiet", "--examples", "2"]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["model"]["name"] == "fake" and results["model"]["adapter"] == "lora-a"
    assert set(results["datasets"]) == {"Cand", "Gal", "AFC"}
    # the fake encoder picks the same-colour image in both triplets: 1.0 and 1 - 0.25
    assert results["datasets"]["AFC"]["metrics"]["2AFC"] == pytest.approx(100 * (1.0 + 0.75) / 2)
    assert set(results["groups"]) == {"ID-Rec", "Re-ID", "MVEB-IND", "MVEB-OOD", "IND", "OOD", "MVEB", "overall"}
    assert "overall" in capsys.readouterr().out
    assert "| **fake + lora-a** |" in (out / "results.md").read_text()
    for picture in ("grids/Cand.png", "grids/Gal.png", "plots/ID-Rec.png", "plots/Re-ID.png"):
        with Image.open(out / picture) as image:
            image.verify()

    # Same command again: resumed from the per-dataset results, nothing encoded.
    assert main(argv) == 0
    assert encoders[-1].calls == []
    # --datasets / --max-queries
    subset_argv = ["eval", "--model", "fake", "--benchmark", str(_manifest(tmp_path)), "--out", str(tmp_path / "o2"),
                   "--datasets", "Gal", "--max-queries", "3", "--quiet"]
    assert main(subset_argv) == 0
    subset = json.loads((tmp_path / "o2" / "results.json").read_text())
    assert list(subset["datasets"]) == ["Gal"] and subset["datasets"]["Gal"]["n_queries"] == 3


def test_eval_command_reports_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(eval_cli, "_load_encoder", lambda args: FakeEncoder())
    manifest = _manifest(tmp_path)
    (manifest.parent / "cand.jsonl").write_text('{"id": "q0", "query": {"image": "red_0.png"}}\n')
    code = main(["eval", "--model", "fake", "--benchmark", str(manifest), "--out", str(tmp_path / "o"), "--quiet"])
    assert code == 2
    error = capsys.readouterr().err
    assert "cand.jsonl:1" in error and "candidates" in error


def test_unknown_index_in_the_manifest_names_file_line_and_field(tmp_path: Path, capsys) -> None:
    manifest = _manifest(tmp_path)
    text = yaml.safe_load(manifest.read_text())
    text["datasets"][1]["options"] = {"index": "hnsw"}
    manifest.write_text(yaml.safe_dump(text, sort_keys=False))
    code = main(["eval", "--model", "fake", "--benchmark", str(manifest), "--out", str(tmp_path / "o"), "--quiet"])
    assert code == 2
    error = capsys.readouterr().err
    line = next(n for n, row in enumerate(manifest.read_text().splitlines(), 1) if "index: hnsw" in row)
    assert f"benchmark.yaml:{line}: field 'datasets[1].options.index': unknown index kind 'hnsw'" in error


def test_mmeb_manifest_lists_the_36_datasets_with_their_groups() -> None:
    manifest = yaml.safe_load((REPO / "eval" / "mmeb.yaml").read_text())
    entries = manifest["datasets"]
    assert len(entries) == 36 and len({e["name"] for e in entries}) == 36
    counts: dict[tuple[str, str], int] = {}
    for entry in entries:
        assert entry["benchmark"] == "MMEB" and entry["layout"] == "candidates"
        counts[(entry["meta_task"], entry["split"])] = counts.get((entry["meta_task"], entry["split"]), 0) + 1
    # VLM2Vec's Table 1: Cls 5+5, VQA 6+4, Ret 8+4, Grd 1+3 (IND+OOD)
    assert counts == {("Cls", "IND"): 5, ("Cls", "OOD"): 5, ("VQA", "IND"): 6, ("VQA", "OOD"): 4,
                      ("Ret", "IND"): 8, ("Ret", "OOD"): 4, ("Grd", "IND"): 1, ("Grd", "OOD"): 3}


def test_mveb_template_covers_the_four_meta_tasks() -> None:
    entries = yaml.safe_load((REPO / "eval" / "mveb.yaml").read_text())["datasets"]
    assert {e["meta_task"] for e in entries} == {"ID-Rec", "Re-ID", "ID-Grd", "ID-Edit"}
    assert all(e["benchmark"] == "MVEB" for e in entries)


def test_bar_chart_titles_name_the_adapter(tmp_path: Path) -> None:
    """Before/after charts of the same base model must not look alike."""
    import numpy as np

    from vis_embed.evaluation.plots import meta_task_bars

    datasets = {"X": {"meta_task": "ID-Rec", "split": "IND", "metrics": {"P@1": 40.0}}}
    charts = {}
    for adapter in (None, "run/final"):
        results = {"model": {"name": "tiny", "adapter": adapter}, "datasets": datasets, "groups": {"ID-Rec": 40.0}}
        (path,) = meta_task_bars(results, tmp_path / str(adapter))
        with Image.open(path) as image:
            charts[adapter] = np.asarray(image.convert("L"))
    differs = np.nonzero((charts[None] != charts["run/final"]).any(axis=1))[0]
    assert differs.size and differs.max() < charts[None].shape[0] * 0.15  # only the title line differs


def test_retrieval_grid_shows_the_query_instruction(tmp_path: Path) -> None:
    import numpy as np

    from vis_embed.evaluation import plots
    from vis_embed.evaluation.layout_base import Example

    example = Example(query={"text": "q"}, results=[({"text": "c"}, 0.5, True)])
    headers = {}
    for instruction in (None, "Find the same object.", "Find the same colour."):
        path = plots.retrieval_grid([example], tmp_path / f"{instruction}.png", title="T", instruction=instruction)
        with Image.open(path) as image:
            headers[instruction] = np.asarray(image.convert("L"))[: plots.HEADER]
    first_line = slice(0, plots.HEADER_LINE)
    assert (headers["Find the same object."][first_line] == headers["Find the same colour."][first_line]).all()
    assert (headers["Find the same object."] != headers["Find the same colour."]).any()
    assert (headers[None] != headers["Find the same object."]).any()


# The flags `vis-embed eval` had before its settings generated them: names are a contract.
EVAL_SETTING_FLAGS = {"--batch-size": "batch_size", "--max-queries": "max_queries", "--datasets": "datasets",
                      "--index": "index", "--depth": "depth", "--examples": "n_examples",
                      "--tie-policy": "tie_policy", "--cache-dir": "cache_dir", "--quiet": "show_progress",
                      "--no-pictures": "pictures", "--reference": "reference"}


def test_eval_flags_are_generated_from_the_settings_with_their_defaults(tmp_path: Path) -> None:
    import argparse

    from vis_embed.config import from_arguments
    from vis_embed.evaluation.settings import EvalSettings

    parser = argparse.ArgumentParser()
    eval_cli.add_eval_arguments(parser)
    flags = {flag: action.dest for action in parser._actions for flag in action.option_strings}
    assert {flag: flags.get(flag) for flag in EVAL_SETTING_FLAGS} == EVAL_SETTING_FLAGS
    required = ["--model", "m", "--benchmark", "b.yaml", "--out", str(tmp_path)]
    assert from_arguments(EvalSettings, parser.parse_args(required)) == EvalSettings()  # one set of defaults
    given = from_arguments(EvalSettings, parser.parse_args(
        [*required, "--datasets", "A, B", "--quiet", "--no-pictures", "--examples", "0", "--index", "exact"]))
    assert (given.datasets, given.show_progress, given.pictures, given.n_examples, given.index) == \
        (["A", "B"], False, False, 0, "exact")


@pytest.mark.parametrize(("flags", "named"), [(["--batch-size", "0"], "--batch-size"),
                                              (["--max-queries", "-1"], "--max-queries"),
                                              (["--depth", "0"], "--depth"),
                                              (["--examples", "100000"], "--examples")])  # a grid is a picture
def test_a_bad_eval_setting_is_refused_naming_its_flag(tmp_path: Path, capsys, flags, named) -> None:
    code = main(["eval", "--model", "fake", "--benchmark", str(tmp_path / "none.yaml"), "--out", str(tmp_path),
                 *flags])
    assert code == 2
    assert f"field '{named}'" in capsys.readouterr().err  # before the manifest is even read
