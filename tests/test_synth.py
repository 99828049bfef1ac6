"""The synthetic identity benchmark (`vis-embed synth`): the properties training relies on.

Most tests share one ``tiny`` rendering (64 px, a few hundred images, ~1 s); the ``small``
preset is checked at the plan level (counts and sizes, no rendering) so the suite stays fast.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from vis_embed.prep.synth import GENERATOR_VERSION, SIZES, generate, is_current
from vis_embed.prep.synth import sizes as synth_sizes
from vis_embed.prep.synth import output as synth_output
from vis_embed.prep.synth.planner import Planner
from vis_embed.prep.synth.dense import DenseLayout
from vis_embed.prep.synth.render import compose
from vis_embed.prep.synth.edits import apply_edit
from vis_embed.prep.synth.sampling import identity_signature, single_spec
from vis_embed.cli import main as cli_main
from vis_embed.data import load_benchmark, load_train_config
from vis_embed.errors import ConfigError

MVEB_TASKS = {"ID-Rec", "Re-ID", "ID-Grd", "ID-Edit"}


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("synth") / "out", seed=0, size="tiny", workers=1)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def meta_rows(root: Path, split: str) -> list[dict[str, Any]]:
    rows = []
    for path in sorted((root / split / "meta").glob("*.jsonl")):
        for row in read_jsonl(path):
            rows.append({**row, "_set": path.stem, "_path": root / split / "images" / row["image"]})
    return rows


def meta_by_image(root: Path, split: str) -> dict[str, dict[str, Any]]:
    return {row["image"]: row for row in meta_rows(root, split)}


def tree_digest(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


# --------------------------------------------------------------------------------------------
# Identity-disjoint splits


def test_identities_never_cross_the_train_eval_split(synth_dir: Path) -> None:
    train, evaluation = meta_rows(synth_dir, "train"), meta_rows(synth_dir, "eval")
    # Names: including every object of every scene (grounding distractors too).
    def names(rows: list[dict[str, Any]]) -> set[str]:
        found = set()
        for row in rows:
            found.add(row["identity"])
            found.update(row.get("objects", ()))
        return found

    assert names(train) and names(evaluation)
    assert not names(train) & names(evaluation)
    # Parameters: no eval object *looks like* a train object either (same parameters, new name).
    def signatures(rows: list[dict[str, Any]]) -> set[str]:
        return {row["family"] + ":" + identity_signature(row["identity_params"]) for row in rows}

    assert not signatures(train) & signatures(evaluation)


def test_train_files_only_reference_train_images_and_eval_files_eval_images(synth_dir: Path) -> None:
    train_images = {row["image"] for row in meta_rows(synth_dir, "train")}
    eval_images = {row["image"] for row in meta_rows(synth_dir, "eval")}
    cfg = load_train_config(synth_dir / "train.yaml")
    for dataset in cfg.datasets:
        assert dataset.image_root == (synth_dir / "train" / "images").resolve()
        for rec in dataset.records:
            for item in (dataset.query_item(rec), dataset.positive_item(rec)):
                if isinstance(item["image"], str):
                    assert Path(item["image"]).relative_to(dataset.image_root).as_posix() in train_images
    for spec in load_benchmark(synth_dir / "benchmark.yaml").datasets:
        assert spec.image_root == (synth_dir / "eval" / "images").resolve()
        files = [spec.queries, spec.gallery] if spec.layout == "gallery" else [spec.path]
        for path in files:
            assert path.parent == (synth_dir / "eval").resolve()
    assert eval_images


# --------------------------------------------------------------------------------------------
# Identity vs context


def test_images_of_one_identity_share_identity_params_and_differ_in_context(synth_dir: Path) -> None:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for split in ("train", "eval"):
        for row in meta_rows(synth_dir, split):
            if row["_set"] in ("rec", "reid", "vehicle"):
                groups[(split + row["_set"], row["identity"])].append(row)
    assert len(groups) > 50
    for rows in groups.values():
        assert len(rows) >= 2
        assert all(row["identity_params"] == rows[0]["identity_params"] for row in rows)
        contexts = [json.dumps(row["context"], sort_keys=True) for row in rows]
        assert len(set(contexts)) == len(contexts)
        backgrounds = [json.dumps(row["context"]["background"], sort_keys=True) for row in rows]
        assert len(set(backgrounds)) == len(backgrounds)
        # Pixels really differ, not only the metadata.
        pixels = [np.asarray(Image.open(row["_path"])) for row in rows]
        assert all(not np.array_equal(pixels[0], other) for other in pixels[1:])


def test_metadata_re_renders_to_the_stored_pixels(synth_dir: Path) -> None:
    """The identity/context parameters in the metadata are exactly what was drawn."""
    size = json.loads((synth_dir / "synth.json").read_text())["settings"]["image_size"]
    rows = [row for row in meta_rows(synth_dir, "train") if row["_set"] in ("rec", "reid")]
    for row in rows[::7]:
        spec = single_spec(row["family"], row["identity_params"], row["context"])
        rendered, _ = compose(spec, size)
        assert np.array_equal(np.asarray(rendered), np.asarray(Image.open(row["_path"]).convert("RGB")))


def test_lookalikes_share_the_anchor_background_and_differ_in_identity(synth_dir: Path) -> None:
    checked = 0
    for split in ("train", "eval"):
        by_image = meta_by_image(synth_dir, split)
        for row in by_image.values():
            if row.get("role") != "lookalike":
                continue
            anchor = by_image[row["anchor_image"]]
            assert anchor["identity"] == row["anchor"] != row["identity"]
            assert anchor["context"]["background"] == row["context"]["background"]
            assert anchor["context"] == row["context"]
            # Exactly the announced identity attribute changed (plus attributes it implies).
            changed = {k for k in row["identity_params"] if row["identity_params"][k] != anchor["identity_params"][k]}
            assert row["changed"] in changed
            assert changed <= {row["changed"], "secondary", "pattern_freq", "texture_seed", "bag_colour",
                               "top_secondary"}
            # Same background pixels: a large share of the image is bit-identical...
            twin = np.asarray(Image.open(row["_path"]))
            original = np.asarray(Image.open(anchor["_path"]))
            same = np.all(twin == original, axis=-1).mean()
            assert same > 0.3
            # ...but the object is not.
            assert not np.array_equal(twin, original)
            checked += 1
    assert checked >= 8


def test_lookalikes_are_hard_negatives_of_their_anchors(synth_dir: Path) -> None:
    by_image = meta_by_image(synth_dir, "train")
    cfg = load_train_config(synth_dir / "train.yaml")
    for name in ("synth_rec", "synth_reid", "synth_edit"):
        dataset = next(d for d in cfg.datasets if d.name == name)
        linked = 0
        for rec in dataset.records:
            for negative_id in rec.get("hard_negatives", ()):
                negative = dataset.records[dataset.index[negative_id]]
                assert negative["identity"] != rec["identity"]
                assert {negative["identity"], rec["identity"]} == {
                    rec["identity"].removesuffix("-nearid"), rec["identity"].removesuffix("-nearid") + "-nearid"}
                if dataset.kind == "identity":
                    mine, theirs = by_image[rec["image"]], by_image[negative["image"]]
                else:
                    mine, theirs = by_image[rec["positive"]["image"]], by_image[negative["positive"]["image"]]
                    assert rec["query"]["text"] == negative["query"]["text"]
                assert mine["context"]["background"] == theirs["context"]["background"]
                linked += 1
        assert linked > 0, name


def test_edit_targets_keep_identity_and_apply_the_instruction(synth_dir: Path) -> None:
    by_image = meta_by_image(synth_dir, "train")
    dataset = next(d for d in load_train_config(synth_dir / "train.yaml").datasets if d.name == "synth_edit")
    for rec in dataset.records:
        source, target = by_image[rec["query"]["image"]], by_image[rec["positive"]["image"]]
        assert source["identity_params"] == target["identity_params"]
        assert target["edit"]["instruction"] == rec["query"]["text"]
        assert apply_edit(source["context"], target["edit"]) == target["context"]
        assert source["context"] != target["context"]


# --------------------------------------------------------------------------------------------
# Tasks and formats


def test_outputs_load_through_the_data_loaders_and_cover_every_task(synth_dir: Path) -> None:
    cfg = load_train_config(synth_dir / "train.yaml")
    kinds = {d.name: d.kind for d in cfg.datasets}
    assert kinds["synth_rec"] == kinds["synth_reid"] == kinds["synth_grd"] == "identity"
    assert kinds["synth_edit"] == kinds["synth_ret"] == kinds["synth_cls_shape"] == "pairs"
    assert any("hard_negatives" in rec for rec in cfg.datasets[0].records)
    bench = load_benchmark(synth_dir / "benchmark.yaml")
    tasks = {(spec.benchmark, spec.meta_task, spec.split) for spec in bench.datasets}
    assert {task for benchmark, task, _ in tasks if benchmark == "MVEB"} == MVEB_TASKS
    assert {"Cls", "Ret"} <= {task for benchmark, task, _ in tasks if benchmark == "MMEB"}
    assert ("MVEB", "Re-ID", "OOD") in tasks and ("MVEB", "ID-Rec", "IND") in tasks
    for spec in bench.datasets:
        assert spec.query_instruction and spec.candidate_instruction
        if spec.layout == "gallery":
            data = spec.load_gallery()
            counts: dict[str, int] = defaultdict(int)
            for row in data.gallery:
                counts[row.identity] += 1
            # Every query has at least one other gallery image of its identity.
            assert all(counts[q.identity] >= 2 for q in data.queries)
        else:
            assert spec.layout == "candidates"
            assert all(len(q.candidates) >= 2 for q in spec.load_candidates())


def test_the_ood_family_is_never_trained_on(synth_dir: Path) -> None:
    train_families = {row["family"] for row in meta_rows(synth_dir, "train")}
    bench = load_benchmark(synth_dir / "benchmark.yaml")
    by_image = meta_by_image(synth_dir, "eval")
    for spec in bench.datasets:
        if spec.layout != "gallery":
            continue
        families = {by_image[Path(row.image).relative_to(spec.image_root).as_posix()]["family"]
                    for row in spec.load_gallery().gallery}
        assert (spec.split == "OOD") == (not families <= train_families), spec.name


def _meta_of(item: dict[str, Any], spec: Any, by_image: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return by_image[Path(item["image"]).relative_to(spec.image_root).as_posix()]


def test_candidate_lists_put_the_true_positive_first(synth_dir: Path) -> None:
    bench = load_benchmark(synth_dir / "benchmark.yaml")
    by_image = meta_by_image(synth_dir, "eval")
    for spec in bench.datasets:
        if spec.layout != "candidates":
            continue
        for query in spec.load_candidates():
            first, rest = query.candidates[0], query.candidates[1:]
            if spec.meta_task == "ID-Grd":
                wanted = _meta_of(query.query, spec, by_image)["identity"]
                assert wanted in _meta_of(first, spec, by_image)["objects"]
                assert all(wanted not in _meta_of(c, spec, by_image)["objects"] for c in rest)
            elif spec.meta_task == "ID-Edit":
                source = _meta_of(query.query, spec, by_image)
                target = _meta_of(first, spec, by_image)
                assert target["identity"] == source["identity"]
                assert target["edit"]["instruction"] == query.query["text"]
                # The wrong edit of the same object and the right edit of its look-alike are there.
                metas = [_meta_of(c, spec, by_image) for c in rest]
                assert any(m["identity"] == source["identity"] and m.get("edit") and
                           m["edit"]["instruction"] != query.query["text"] for m in metas)
                assert any(m["identity"] == source["identity"] + "-nearid" for m in metas)
            elif spec.meta_task == "Cls":
                params = _meta_of(query.query, spec, by_image)["identity_params"]
                key = "shape" if "shape" in spec.query_instruction else "primary"
                assert first["text"] == params[key]
                assert all(c["text"] != params[key] for c in rest)
            elif spec.meta_task == "Ret":
                assert _meta_of(first, spec, by_image)["caption"] == query.query["text"]
            elif spec.meta_task == "NearID":
                source = _meta_of(query.query, spec, by_image)
                positive, distractor = (_meta_of(c, spec, by_image) for c in query.candidates)
                assert positive["identity"] == source["identity"] != distractor["identity"]
                assert distractor["context"] == source["context"] != positive["context"]
            else:
                pytest.fail(f"unchecked candidates task {spec.meta_task}")


def test_id_edit_candidates_never_hold_the_query_source(synth_dir: Path) -> None:
    # benchmark version 1 listed the unedited source (the query's own pixels, its identity) as a
    # negative: a model that learned identity ranked it first.  CIRR-style, it is no candidate now.
    spec = load_benchmark(synth_dir / "benchmark.yaml").dataset("SynthEdit")
    by_image = meta_by_image(synth_dir, "eval")
    queries = spec.load_candidates()
    assert queries
    for query in queries:
        assert all(candidate["image"] != query.query["image"] for candidate in query.candidates)
        assert all(_meta_of(c, spec, by_image)["role"] == "edit_target" for c in query.candidates)
    rows = read_jsonl(synth_dir / "eval" / "edit.jsonl")
    assert {len(row["candidates"]) for row in rows} == {max(3, SIZES["tiny"].candidates_per_query)}


def test_the_benchmark_version_is_recorded_and_an_older_folder_is_not_current(synth_dir: Path,
                                                                               tmp_path: Path) -> None:
    assert load_benchmark(synth_dir / "benchmark.yaml").version == GENERATOR_VERSION >= 2
    assert {spec.benchmark_version for spec in load_benchmark(synth_dir / "benchmark.yaml").datasets} == \
        {GENERATOR_VERSION}
    assert json.loads((synth_dir / "synth.json").read_text())["generator_version"] == GENERATOR_VERSION
    assert is_current(synth_dir)
    older = tmp_path / "older"
    older.mkdir()
    (older / "synth.json").write_text(json.dumps({"generator_version": GENERATOR_VERSION - 1}))
    assert not is_current(older) and not is_current(tmp_path / "absent")
    (older / "synth.json").write_text("not json")
    assert not is_current(older)


def test_grounding_rows_crop_a_window_around_their_object(synth_dir: Path) -> None:
    by_image = meta_by_image(synth_dir, "train")
    dataset = next(d for d in load_train_config(synth_dir / "train.yaml").datasets if d.name == "synth_grd")
    for rec in dataset.records:
        meta = by_image[rec["image"]]
        x0, y0, x1, y1 = meta["boxes"][meta["target_index"]]
        bx0, by0, bx1, by1 = rec["bbox"]
        assert bx0 <= x0 and by0 <= y0 and bx1 >= x1 and by1 >= y1
        assert meta["objects"][meta["target_index"]] == rec["identity"]
        assert (bx1 - bx0) * (by1 - by0) < 0.6 * 64 * 64  # a crop, not the whole scene


# --------------------------------------------------------------------------------------------
# Determinism, atomicity, CLI


def test_same_seed_is_byte_identical_whatever_the_workers_and_other_seeds_differ(
        synth_dir: Path, tmp_path: Path) -> None:
    again = generate(tmp_path / "again", seed=0, size="tiny", workers=2)
    assert tree_digest(again) == tree_digest(synth_dir)
    other = generate(tmp_path / "other", seed=1, size="tiny", workers=1)
    other_digest, first_digest = tree_digest(other), tree_digest(synth_dir)
    # (The file lists differ a little too: how many anchors get a look-alike is random.)
    common = first_digest.keys() & other_digest.keys()
    changed = [name for name in common if other_digest[name] != first_digest[name]]
    assert len(common) > 0.8 * len(first_digest) and len(changed) > 0.9 * len(common)


def test_a_failed_run_leaves_the_previous_output_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = generate(tmp_path / "out", seed=0, size="tiny", workers=1)
    before = tree_digest(out)
    calls = {"n": 0}
    real = synth_output._render_job

    def failing(job: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > 50:
            raise RuntimeError("disk full")
        return real(job)

    monkeypatch.setattr(synth_output, "_render_job", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        generate(out, seed=5, size="tiny", workers=1)
    assert tree_digest(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folder left


def test_cli_renders_and_refuses_to_overwrite_foreign_folders(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    assert cli_main(["synth", str(out), "--size", "tiny", "--seed", "3", "--workers", "1"]) == 0
    assert (out / "train.yaml").is_file() and (out / "benchmark.yaml").is_file()
    assert json.loads((out / "synth.json").read_text())["seed"] == 3
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "holiday.jpg").write_bytes(b"not ours")
    assert cli_main(["synth", str(foreign), "--size", "tiny"]) == 2
    assert "not a synthetic benchmark folder" in capsys.readouterr().err
    assert (foreign / "holiday.jpg").read_bytes() == b"not ours"
    with pytest.raises(ConfigError):
        generate(tmp_path / "x", size="huge")


@pytest.mark.parametrize("seed", [-1, 1.5, "3"])
def test_a_seed_that_is_no_non_negative_integer_is_a_clear_error(tmp_path: Path, seed: Any,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"--seed must be an integer >= 0"):
        generate(tmp_path / "x", seed=seed, size="tiny", workers=1)
    assert not (tmp_path / "x").exists()
    if seed == -1:  # the command line: an error message, not numpy's traceback
        assert cli_main(["synth", str(tmp_path / "x"), "--size", "tiny", "--seed", "-1"]) == 2
        assert "--seed must be an integer >= 0" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# The `small` preset the quickstart trains on (plan only: no rendering)


def test_small_preset_has_the_scale_the_quickstart_needs() -> None:
    size = SIZES["small"]
    plan = Planner(0, size).build()
    assert size.image_size == 112
    rec = plan.tables["train/rec.jsonl"]
    anchors = defaultdict(int)
    for row in rec:
        if not row["identity"].endswith("-nearid"):
            anchors[row["identity"]] += 1
    # Enough identities that a tiny model cannot memorise them, three views each.
    assert len(anchors) >= 1000 and set(anchors.values()) == {3}
    gallery_identities = {row["identity"] for row in plan.tables["eval/rec_gallery.jsonl"]}
    assert 60 <= len(gallery_identities) <= 100
    # Evaluation stays small enough to run on a CPU in the quickstart.
    eval_images = sum(1 for path, _, _ in plan.jobs if path.startswith("eval/"))
    assert eval_images <= 2000
    for path, rows in plan.tables.items():
        if path.startswith("eval/"):
            assert len(rows) <= 300, path


def _train_identity_sizes(size: Any, table: str) -> dict[str, int]:
    plan = Planner(0, size).build()
    counts: dict[str, int] = defaultdict(int)
    for row in plan.tables[table]:
        if not row["identity"].endswith("-nearid"):  # look-alike twins always have 2
            counts[row["identity"]] += 1
    return counts


def test_skewed_preset_has_a_few_big_identities_and_the_same_budget() -> None:
    """`small-skewed` is the sampling ablation's skewed variant: most train identities have 2
    images, ~2% have 20-60, and the image budget stays close to `small`'s 3 per identity."""
    for table, n_identities in (("train/rec.jsonl", 1200), ("train/reid.jsonl", 300)):
        sizes = np.array(list(_train_identity_sizes(SIZES["small-skewed"], table).values()))
        assert len(sizes) == n_identities
        big = sizes >= 20
        assert set(sizes[~big].tolist()) == {2} and sizes[big].max() <= 60
        assert 0.005 < big.mean() < 0.05
        assert 2.2 < sizes.mean() < 3.8
    fixed = _train_identity_sizes(SIZES["small"], "train/rec.jsonl")
    assert set(fixed.values()) == {3}
    with pytest.raises(ConfigError, match="train_identity_sizes"):
        synth_sizes.train_identity_sizes(np.random.default_rng(0), 3,
                                         dataclasses.replace(SIZES["tiny"], train_identity_sizes="zipf"))


# --------------------------------------------------------------------------------------------
# `small-dense`: few identities, many instances, look-alike families (the dense sampling ablation)


def _train_rows_by_dataset(plan: Any) -> dict[str, list[dict[str, Any]]]:
    return {entry["name"]: plan.tables[entry["path"]] for entry in plan.train_entries}


def test_dense_preset_is_identity_subdatasets_with_few_identities_and_many_instances() -> None:
    size = SIZES["small-dense"]
    layout = size.dense
    plan = Planner(0, size).build()
    by_dataset = _train_rows_by_dataset(plan)
    assert len(by_dataset) == layout.object_subdatasets + layout.person_subdatasets
    assert all(entry["kind"] == "identity" for entry in plan.train_entries)
    all_identities: set[str] = set()
    for name, rows in by_dataset.items():
        counts: dict[str, int] = defaultdict(int)
        for row in rows:
            counts[row["identity"]] += 1
        # few identities (a 16-member slot drawn uniformly repeats some), many images each
        assert len(counts) == layout.families * layout.family_size, name
        assert set(counts.values()) == {layout.images_per_identity}, name
        assert not all_identities & counts.keys()  # no identity is in two sub-datasets
        all_identities |= counts.keys()
    # the held-out evaluation is the base preset's (same datasets, same sizes)
    small = Planner(0, SIZES["small"]).build()
    assert [e["name"] for e in plan.manifest_entries] == [e["name"] for e in small.manifest_entries]
    assert {p: len(r) for p, r in plan.tables.items() if p.startswith("eval/")} == \
        {p: len(r) for p, r in small.tables.items() if p.startswith("eval/")}
    train_identities = {row["identity"] for rows in by_dataset.values() for row in rows}
    eval_identities = {row["identity"] for path, rows in plan.tables.items() if path.endswith("_gallery.jsonl")
                       for row in rows}
    assert not train_identities & eval_identities


def test_other_presets_record_no_dense_layout(synth_dir: Path) -> None:
    """The dense option is absent from the other presets' synth.json, which stays as it was."""
    assert "dense" not in json.loads((synth_dir / "synth.json").read_text())["settings"]


@pytest.fixture(scope="module")
def dense_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    size = dataclasses.replace(SIZES["small-dense"], image_size=64,
                               dense=DenseLayout(object_subdatasets=1, person_subdatasets=1, families=3,
                                                 family_size=4, images_per_identity=3))
    return generate(tmp_path_factory.mktemp("dense") / "out", seed=0, size=size, workers=1)


def test_dense_family_variants_change_one_detail_in_the_anchors_exact_contexts(dense_dir: Path) -> None:
    by_image = meta_by_image(dense_dir, "train")
    variants = [row for row in by_image.values() if row.get("role") == "lookalike"]
    assert len(variants) == 2 * 3 * 3 * 3  # 2 sets x 3 families x 3 variants x 3 images
    for row in variants:
        anchor = by_image[row["anchor_image"]]
        assert anchor["identity"] == row["anchor"] == row["identity"].rsplit("-v", 1)[0]
        assert anchor["context"] == row["context"]
        changed = {k for k in row["identity_params"] if row["identity_params"][k] != anchor["identity_params"][k]}
        assert row["changed"] in changed
        assert changed <= {row["changed"], "secondary", "pattern_freq", "texture_seed", "bag_colour", "top_secondary"}
        # the family keeps its dominant look: an object's primary colour, a person's top colour
        assert {"primary", "top"}.isdisjoint(changed)
        twin, original = np.asarray(Image.open(row["_path"])), np.asarray(Image.open(anchor["_path"]))
        assert np.all(twin == original, axis=-1).mean() > 0.3 and not np.array_equal(twin, original)


def test_dense_hard_negatives_are_the_family_in_the_same_context(dense_dir: Path) -> None:
    by_image = meta_by_image(dense_dir, "train")
    cfg = load_train_config(dense_dir / "train.yaml")
    assert [d.name for d in cfg.datasets] == ["synth_rec_0", "synth_reid_0"]
    for dataset in cfg.datasets:
        for rec in dataset.records:
            negatives = [dataset.records[dataset.index[i]] for i in rec["hard_negatives"]]
            assert len(negatives) == 3
            family = {rec["identity"].split("-v")[0]}
            assert {n["identity"].split("-v")[0] for n in negatives} == family
            assert len({n["identity"] for n in negatives} | {rec["identity"]}) == 4
            assert all(by_image[n["image"]]["context"] == by_image[rec["image"]]["context"] for n in negatives)
