"""Several tables that share identities split as one: no identity is trained on in one table and
held out in another (the property an identity-disjoint evaluation rests on)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vis_embed.cli import main as cli_main
from vis_embed.data import write_table
from vis_embed.errors import DataError
from vis_embed.prep.resample import ResampleOptions, resample_file
from vis_embed.prep.resample_sources import resample_files


def _table(identities: range, per_identity: int, prefix: str) -> list[dict]:
    """``per_identity`` rows of each identity ``p<k>`` (the shared key), ids unique to the table."""
    return [{"id": f"{prefix}{k}-{j}", "image": f"{prefix}/{k}-{j}.jpg", "identity": f"p{k}"}
            for k in identities for j in range(per_identity)]


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture()
def two_shops(tmp_path: Path) -> tuple[Path, Path]:
    """Products p0-p59 in a catalogue, p30-p89 in street photos: 30 products in both."""
    write_table(tmp_path / "catalogue.jsonl", _table(range(0, 60), 3, "c"))
    write_table(tmp_path / "street.jsonl", _table(range(30, 90), 2, "s"))
    return tmp_path / "catalogue.jsonl", tmp_path / "street.jsonl"


def test_shared_identities_go_to_one_side_in_every_table(two_shops, tmp_path: Path) -> None:
    report = resample_files(two_shops, tmp_path / "out", ResampleOptions(eval_fraction=0.3, seed=1))
    sides = {}
    for stem in ("catalogue", "street"):
        sides[stem] = ({r["identity"] for r in _read(tmp_path / "out" / stem / "train.jsonl")},
                       {r["identity"] for r in _read(tmp_path / "out" / stem / "eval.jsonl")})
    trained = sides["catalogue"][0] | sides["street"][0]
    held_out = sides["catalogue"][1] | sides["street"][1]
    assert not trained & held_out and report["identities_in_both_splits"] == 0
    assert report["split_mode"] == "identity" and len(held_out) == round(0.3 * 90)
    shared = {f"p{k}" for k in range(30, 60)}
    assert shared & held_out and shared & trained  # the shared products are split, not all on one side
    # each table holds out exactly its own identities among the drawn ones
    assert sides["street"][1] == held_out & {f"p{k}" for k in range(30, 90)}
    assert report["sources"]["street"]["eval"]["rows"] == 2 * len(sides["street"][1])


def test_split_one_table_at_a_time_the_same_tables_leak(two_shops, tmp_path: Path) -> None:
    """Why the tables are split together: apart, shared products land on both sides."""
    options = ResampleOptions(eval_fraction=0.3, seed=1)
    resample_file(two_shops[0], tmp_path / "a", options)
    resample_file(two_shops[1], tmp_path / "b", options)
    trained = {r["identity"] for d in ("a", "b") for r in _read(tmp_path / d / "train.jsonl")}
    held_out = {r["identity"] for d in ("a", "b") for r in _read(tmp_path / d / "eval.jsonl")}
    assert trained & held_out


def test_outputs_load_as_one_config_and_one_benchmark(two_shops, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from vis_embed.data import load_benchmark, load_train_config

    assert cli_main(["prep", "resample", *map(str, two_shops), str(tmp_path / "out"), "--eval-fraction", "0.2",
                     "--name", "shops"]) == 0
    printed = json.loads(capsys.readouterr().out.splitlines()[0])
    assert printed["split_mode"] == "identity"
    config = load_train_config(tmp_path / "out" / "train.yaml", check_images=False)
    catalogue, street = config.dataset("catalogue"), config.dataset("street")
    assert catalogue.identity_namespace == street.identity_namespace == "shops"
    assert catalogue.identity_key(catalogue.records[0]).startswith("shops::")
    assert catalogue.positive_item(catalogue.records[0])["image"].startswith(str(tmp_path))
    benchmark = load_benchmark(tmp_path / "out" / "benchmark.yaml")
    assert benchmark.name == "shops" and [d.name for d in benchmark.datasets] == ["catalogue", "street"]
    queries = benchmark.dataset("street").load_gallery(check_images=False).queries
    trained = {r["identity"] for d in (catalogue, street) for r in d.records}
    assert queries and trained.isdisjoint(q.identity for q in queries)
    saved = json.loads((tmp_path / "out" / "resample_report.json").read_text())
    assert set(saved["sources"]) == {"catalogue", "street"} and saved["identity_namespace"] == "shops"


def test_too_few_identities_in_the_union_fall_back_in_every_table(tmp_path: Path) -> None:
    write_table(tmp_path / "a.jsonl", _table(range(0, 4), 6, "a"))
    write_table(tmp_path / "b.jsonl", _table(range(2, 6), 6, "b"))
    report = resample_files([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], tmp_path / "out",
                            ResampleOptions(eval_fraction=0.5, min_identities=7))
    assert report["split_mode"] == "sample" and "only 6 usable identities across the 2 sources" in \
        report["fallback_reason"]
    assert all(source["split_mode"] == "sample" for source in report["sources"].values())
    # with the union large enough, a table too small to split alone still splits by identity
    report = resample_files([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], tmp_path / "out",
                            ResampleOptions(eval_fraction=0.5, min_identities=6))
    assert report["split_mode"] == "identity" and report["identities_in_both_splits"] == 0


def test_same_seed_same_split_and_clear_errors(two_shops, tmp_path: Path) -> None:
    options = ResampleOptions(eval_fraction=0.3, seed=4)
    resample_files(two_shops, tmp_path / "one", options)
    resample_files(two_shops, tmp_path / "two", options)
    for table in ("catalogue/train.jsonl", "catalogue/eval.jsonl", "street/train.jsonl", "street/eval.jsonl"):
        assert (tmp_path / "one" / table).read_bytes() == (tmp_path / "two" / table).read_bytes()
    (tmp_path / "other").mkdir()
    write_table(tmp_path / "other" / "street.jsonl", _table(range(3), 2, "x"))
    with pytest.raises(DataError, match="two sources have the stem 'street'"):
        resample_files([two_shops[1], tmp_path / "other" / "street.jsonl"], tmp_path / "bad", options)
    (tmp_path / "broken.jsonl").write_text('{"id": "x", "image": "x.jpg"}\n')
    with pytest.raises(DataError, match=r"broken.jsonl:1: field .identity."):
        resample_files([two_shops[0], tmp_path / "broken.jsonl"], tmp_path / "bad", options)
    assert not (tmp_path / "bad").exists()  # every table is checked before OUT is touched
