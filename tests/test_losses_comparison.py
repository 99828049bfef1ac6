"""eval/objectives_peers.py (peer-protocol rows derived from a synthetic benchmark) and
eval/objectives_table.py (the comparison table read from results files)."""

from __future__ import annotations

from _eval_scripts import load_eval_script

import json
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from vis_embed.data.benchmark import load_benchmark



def _load(name: str) -> ModuleType:
    return load_eval_script(name)


peers, table = _load("objectives_peers"), _load("objectives_table")


def _write_jsonl(path: Path, rows: list[dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path.relative_to(path.parents[1]))


@pytest.fixture()
def synth(tmp_path: Path) -> Path:
    """A synth-shaped folder: SynthNearID (2 rows), SynthRec and SynthReID galleries (3 identities)."""
    root = tmp_path / "synth"
    from PIL import Image

    names = [f"{i}.png" for i in range(12)]
    (root / "eval" / "images").mkdir(parents=True)
    for name in names:
        Image.new("RGB", (8, 8)).save(root / "eval" / "images" / name)
    nearid = _write_jsonl(root / "eval" / "nearid.jsonl", [
        {"id": f"n{i}", "query": {"image": names[3 * i]},
         "candidates": [{"image": names[3 * i + 1]}, {"image": names[3 * i + 2]}]} for i in range(2)])
    gallery = [{"id": f"g{i}", "image": names[i], "identity": f"id{i // 2}"} for i in range(6)]
    rec = _write_jsonl(root / "eval" / "rec_gallery.jsonl", gallery)
    reid = _write_jsonl(root / "eval" / "reid_gallery.jsonl", gallery)
    common = {"image_root": "eval/images", "query_instruction": "q", "candidate_instruction": "c"}
    (root / "benchmark.yaml").write_text(yaml.safe_dump({"name": "synth", "datasets": [
        {"name": "SynthNearID", "meta_task": "NearID", "layout": "candidates", "path": nearid, **common},
        {"name": "SynthRec", "meta_task": "ID-Rec", "layout": "gallery", "queries": rec, "gallery": rec, **common},
        {"name": "SynthReID", "meta_task": "Re-ID", "layout": "gallery", "queries": reid, "gallery": reid, **common},
    ]}))
    return root


def test_peer_rows_come_from_the_synthetic_eval_sets(synth: Path, tmp_path: Path) -> None:
    manifest = peers.write_peer_benchmark(synth, tmp_path / "peer")
    benchmark = load_benchmark(manifest)  # a valid manifest whose rows load
    assert [spec.layout for spec in benchmark.datasets] == ["nearid", "2afc", "asym_recall", "pair_ap"]
    read = lambda name: [json.loads(line) for line in (tmp_path / "peer" / name).read_text().splitlines()]  # noqa: E731
    nearid, two_afc = read("nearid.jsonl"), read("2afc.jsonl")
    assert nearid[1] == {"id": "n1", "views": [{"image": "3.png"}, {"image": "4.png"}],
                         "negatives": [{"image": "5.png"}, None]}
    # the look-alike is A on odd rows: the label follows the same object, not the position
    assert [(row["a"], row["label"]) for row in two_afc] == [({"image": "1.png"}, 1.0), ({"image": "5.png"}, 0.0)]
    assert read("tll.jsonl")[2] == {"id": "id2", "a": {"image": "4.png"}, "b": {"image": "5.png"}}
    ap = read("pair_ap.jsonl")
    assert [row["label"] for row in ap] == [1, 0] * 3
    assert ap[5] == {"id": "id2-other", "a": {"image": "4.png"}, "b": {"image": "0.png"}, "label": 0}


def _record(groups: dict, peer_metrics: dict) -> dict:
    """A per-seed result file's content (eval/study_results.py): metrics and the peer evaluation."""
    return {"metrics": groups, "evaluations": {"peer": peer_metrics}}


def test_table_pairs_each_combination_with_infonce_lora_by_seed(tmp_path: Path) -> None:
    values = {("infonce_lora", "0"): 30.0, ("infonce_lora", "1"): 40.0,
              ("hinge_lora", "0"): 25.0, ("hinge_lora", "1"): 37.0}
    records = {(combo, seed): _record({"MVEB": mveb, "overall": mveb / 2},
                                      {"PeerNearID": {"metrics": {"SSR": mveb + 1, "pairwise_acc": 50.0}}})
               for (combo, seed), mveb in values.items()}
    records[("two_tier_lora", "0")] = _record({"MVEB": 1.0}, {})  # seed 1 unfinished: no result file
    runs: dict[str, dict[str, dict[str, float]]] = {}
    for (combo, seed), record in records.items():
        runs.setdefault(combo, {})[seed] = table.record_scores(record)
    assert list(runs["two_tier_lora"]) == ["0"]
    schedules = {combo: {seed: f"schedule-{seed}" for seed in by_seed} for combo, by_seed in runs.items()}
    synth, peer, paired = table.summarise(runs, None, schedules)  # one schedule file per seed: paired
    assert "| triplet hinge + LoRA (DreamSim) (`hinge_lora`) | 2 | – | – | – | – | – | 31.0 ± 8.5 |" in synth
    assert "| 32.0 ± 8.5 | 50.0 ± 0.0 |" in peer
    hinge = next(line for line in paired.splitlines() if line.startswith("| `hinge_lora`"))
    # differences -5 and -3: mean -4.0, t(0.975, 1) x sd / sqrt(2) = 12.706 x 1.414 / 1.414 = 12.7
    assert "| -4.0 [-16.7, +8.7] |" in hinge and "| `hinge_lora` | 2 | paired |" in hinge
    assert "| `two_tier_lora` | 1 | paired |" in paired


def test_table_pairs_by_seed_only_runs_on_the_same_batches() -> None:
    # a combination re-run on other batches (another scheduler: other schedule hashes for the same
    # seeds) shares only the seed with infonce_lora: Welch's interval, never a paired one
    values = {"infonce_lora": [30.0, 40.0, 35.0], "hinge_lora": [29.0, 39.5, 34.2]}
    runs = {combo: {str(seed): {"MVEB": v} for seed, v in enumerate(mveb)} for combo, mveb in values.items()}
    same = {combo: {str(seed): f"schedule-{seed}" for seed in range(3)} for combo in values}
    other = {**same, "hinge_lora": {str(seed): f"rerun-{seed}" for seed in range(3)}}
    paired = table.summarise(runs, None, same)[2].splitlines()[2]
    # differences -1.0, -0.5, -0.8: mean -0.77, sd 0.25, t(0.975, 2) 4.303: the paired interval excludes 0
    assert paired.startswith("| `hinge_lora` | 3 | paired |") and "**-0.8 [-1.4, -0.1]**" in paired
    for schedules in (other, None):  # other batches, or hashes not recorded: Welch over every seed
        welch = table.summarise(runs, None, schedules)[2].splitlines()[2]
        assert welch.startswith("| `hinge_lora` | 3 vs 3 | Welch |") and "-0.8 [-12.4, +10.9]" in welch
