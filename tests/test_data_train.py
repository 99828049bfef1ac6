"""Training data config: round trips (JSONL and Parquet) and one test per malformed input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vis_embed.data import load_train_config, read_table, write_table
from vis_embed.errors import DataError


def _image(path: Path, size: tuple[int, int] = (16, 12), colour: tuple[int, int, int] = (255, 0, 0)) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    img = Image.new("RGB", size, colour)
    img.putpixel((10, 8), (0, 0, 255))  # marks where a crop lands
    img.save(path)
    return path.name


def _identity_rows() -> list[dict]:
    return [
        {"id": "a1", "image": "a1.png", "identity": "cat", "hard_negatives": ["b1"]},
        {"id": "a2", "image": "a2.png", "identity": "cat", "text": "the cat", "bbox": [8, 6, 14, 12]},
        {"id": "b1", "image": "b1.png", "identity": "dog"},
        {"id": "b2", "image": "b2.png", "identity": "dog", "hard_negatives": ["a1", "a2"]},
    ]


def _pairs_rows() -> list[dict]:
    return [
        {"id": "p1", "query": {"text": "a red square"}, "positive": {"image": "a1.png"}},
        {"id": "p2", "query": {"image": "b1.png", "text": "make it blue"},
         "positive": {"image": "b2.png"}, "identity": "dog", "hard_negatives": ["p1"]},
    ]


def _write_yaml(path: Path, entries: list[dict]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({"datasets": entries}, sort_keys=False))
    return path


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    for name in ("a1", "a2", "b1", "b2"):
        _image(tmp_path / "train" / f"{name}.png")
    return tmp_path


def _setup(data_dir: Path, suffix: str = ".jsonl", identity_rows=None, pairs_rows=None,
           **entry_overrides) -> Path:
    write_table(data_dir / "train" / f"rec{suffix}", identity_rows or _identity_rows())
    write_table(data_dir / "train" / f"pairs{suffix}", pairs_rows or _pairs_rows())
    entry = {"name": "rec", "kind": "identity", "path": f"train/rec{suffix}",
             "query_instruction": "Find the same object.", "candidate_instruction": "Represent it.",
             "identity_namespace": "objects", "weight": 2}
    entry.update(entry_overrides)
    return _write_yaml(data_dir / "train.yaml", [
        entry, {"name": "edit", "kind": "pairs", "path": f"train/pairs{suffix}"}])


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_round_trip_identity_and_pairs(data_dir: Path, suffix: str) -> None:
    cfg = load_train_config(_setup(data_dir, suffix))
    rec, pairs = cfg.datasets
    assert (rec.name, rec.kind, rec.weight, rec.identity_namespace) == ("rec", "identity", 2.0, "objects")
    assert rec.query_instruction == "Find the same object." and pairs.query_instruction is None
    assert rec.records == _identity_rows() and pairs.records == _pairs_rows()
    assert rec.index == {"a1": 0, "a2": 1, "b1": 2, "b2": 3}
    assert rec.get("b2")["identity"] == "dog"
    # namespace is shared by name; defaults to the dataset name
    assert rec.identity_key(rec.get("a1")) == "objects::cat"
    assert pairs.identity_key(pairs.get("p2")) == "edit::dog"
    assert pairs.identity_key(pairs.get("p1")) is None
    images = data_dir / "train"
    assert rec.positive_item(rec.get("a1")) == {"image": str(images / "a1.png"), "text": None}
    assert rec.query_item(rec.get("a1")) == {"image": str(images / "a1.png"), "text": None}
    assert pairs.query_item(pairs.get("p2")) == {"image": str(images / "b1.png"), "text": "make it blue"}
    assert pairs.positive_item(pairs.get("p1")) == {"image": str(images / "a1.png"), "text": None}
    assert pairs.query_item(pairs.get("p1")) == {"image": None, "text": "a red square"}


def test_bbox_travels_with_the_query_item_and_the_model_layer_crops(data_dir: Path) -> None:
    """Crops happen in one place, the model layer: the data layer hands over path + bbox."""
    from vis_embed.data.image_geometry import crop_to_bbox
    from vis_embed.data.images import load_image

    rec = load_train_config(_setup(data_dir)).datasets[0]
    query = rec.query_item(rec.get("a2"))
    assert query == {"image": str(data_dir / "train" / "a2.png"), "text": "the cat", "bbox": [8, 6, 14, 12]}
    crop = crop_to_bbox(load_image(query["image"]), query["bbox"])  # what EmbeddingModel.prepare_one does
    assert crop.size == (6, 6) and crop.getpixel((2, 2)) == (0, 0, 255)  # pixel (10, 8) of the original
    assert rec.positive_item(rec.get("a2")) == {"image": str(data_dir / "train" / "a2.png"), "text": None}


def test_bbox_outside_image_is_a_load_error_naming_file_line_field(data_dir: Path) -> None:
    rows = _identity_rows()
    rows[1]["bbox"] = [0, 0, 40, 6]
    with pytest.raises(DataError, match=r"rec.jsonl:2: field 'bbox'.*outside the 16x12 image"):
        load_train_config(_setup(data_dir, identity_rows=rows))
    pairs = _pairs_rows()
    pairs[1]["positive"]["bbox"] = [0, 0, 10, 13]
    with pytest.raises(DataError, match=r"pairs.jsonl:2: field 'positive.bbox'.*outside the 16x12 image"):
        load_train_config(_setup(data_dir, pairs_rows=pairs))
    pairs = _pairs_rows()
    pairs[0]["negatives"] = [{"image": "a2.png", "bbox": [0, 0, 17, 2]}]
    with pytest.raises(DataError, match=r"pairs.jsonl:1: field 'negatives\[0\].bbox'.*outside"):
        load_train_config(_setup(data_dir, pairs_rows=pairs))


def test_a_box_covering_no_whole_pixel_is_a_load_error_naming_the_bbox(data_dir: Path) -> None:
    """A box in fractions of the image ([0.1, 0.2, 0.5, 0.6], a common convention) passed every
    check and cropped to 0 x 1 pixels mid-run: 'field image: image has no pixels', no file or line."""
    from vis_embed.data.image_geometry import crop_to_bbox

    rows = _identity_rows()
    rows[1]["bbox"] = [0.1, 0.2, 0.5, 0.6]
    with pytest.raises(DataError, match=r"rec.jsonl:2: field 'bbox': box .* covers no whole pixel .*not fractions"):
        load_train_config(_setup(data_dir, identity_rows=rows))
    with pytest.raises(DataError, match=r"field 'bbox': box .* covers no whole pixel"):
        crop_to_bbox(Image.new("RGB", (16, 12)), [10.2, 0, 10.4, 12])
    assert crop_to_bbox(Image.new("RGB", (16, 12)), [0.4, 0, 0.6, 12]).size == (1, 12)  # rounds to one pixel


def test_bbox_bounds_are_those_of_the_displayed_image(data_dir: Path) -> None:
    """An EXIF-rotated photo (stored 16x12, displayed 12x16): boxes are in the displayed frame."""
    stored = Image.new("RGB", (16, 12), (1, 2, 3))
    exif = stored.getexif()
    exif[0x0112] = 6  # rotate 90 degrees to display
    stored.save(data_dir / "train" / "a2.png", exif=exif.tobytes())
    rows = _identity_rows()
    rows[1]["bbox"] = [0, 0, 12, 16]
    assert load_train_config(_setup(data_dir, identity_rows=rows)).datasets[0].get("a2")["bbox"] == [0, 0, 12, 16]
    rows[1]["bbox"] = [0, 0, 16, 12]
    with pytest.raises(DataError, match=r"rec.jsonl:2: field 'bbox'.*12x16"):
        load_train_config(_setup(data_dir, identity_rows=rows))


def test_bbox_on_an_image_whose_header_claims_a_bomb_is_a_load_error(data_dir: Path) -> None:
    """A PNG header claiming 100000 x 100000 pixels: PIL raises DecompressionBombError (not an
    OSError) while reading the header for the bbox check; a DataError naming the row, not a traceback."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    (data_dir / "train" / "a2.png").write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                                                + chunk(b"IDAT", zlib.compress(b"\0")) + chunk(b"IEND", b""))
    with pytest.raises(DataError, match=r"rec.jsonl:2: field 'bbox': refused: decompression bomb"):
        load_train_config(_setup(data_dir))


def test_arrays_for_scheduler(data_dir: Path) -> None:
    cfg = load_train_config(_setup(data_dir))
    arrays = cfg.datasets[0].arrays()
    assert list(arrays.ids) == ["a1", "a2", "b1", "b2"]
    assert [arrays.identity_keys[c] for c in arrays.identity] == ["objects::cat"] * 2 + ["objects::dog"] * 2
    assert list(arrays.hard_negatives_of(0)) == [2] and list(arrays.hard_negatives_of(3)) == [0, 1]
    assert len(arrays.hard_negatives_of(1)) == 0
    pairs_arrays = cfg.datasets[1].arrays()
    assert list(pairs_arrays.identity) == [-1, 0]
    assert cfg.datasets[0].arrays() is arrays  # cached


def test_fingerprint_tracks_data_and_config(data_dir: Path) -> None:
    yaml_path = _setup(data_dir)
    first = load_train_config(yaml_path).fingerprint()
    assert load_train_config(yaml_path).fingerprint() == first
    _setup(data_dir, weight=3)
    assert load_train_config(yaml_path).fingerprint() != first
    _setup(data_dir)
    assert load_train_config(yaml_path).fingerprint() == first
    rows = _identity_rows()
    rows[0]["text"] = "changed"
    _setup(data_dir, identity_rows=rows)
    assert load_train_config(yaml_path).fingerprint() != first


def test_image_root_is_relative_to_yaml(data_dir: Path) -> None:
    (data_dir / "train" / "a1.png").rename(data_dir / "a1.png")
    for name in ("a2", "b1", "b2"):
        (data_dir / "train" / f"{name}.png").rename(data_dir / f"{name}.png")
    pairs = [{"id": "p1", "query": {"text": "x"}, "positive": {"text": "y"}}]
    cfg = load_train_config(_setup(data_dir, image_root=".", pairs_rows=pairs))
    assert cfg.datasets[0].positive_item(cfg.datasets[0].get("a1"))["image"] == str(data_dir / "a1.png")


# ---------------------------------------------------------------- malformed inputs


def _expect(data_dir: Path, pattern: str, **kwargs) -> None:
    with pytest.raises(DataError, match=pattern):
        load_train_config(_setup(data_dir, **kwargs))


def _mutated(index: int, **changes) -> list[dict]:
    rows = _identity_rows()
    rows[index].update(changes)
    return [{k: v for k, v in row.items() if v is not None} for row in rows]


def test_missing_field(data_dir: Path) -> None:
    _expect(data_dir, r"rec.jsonl:3: field 'identity': missing required field",
            identity_rows=_mutated(2, identity=None))


def test_missing_pairs_side(data_dir: Path) -> None:
    rows = _pairs_rows()
    del rows[1]["positive"]
    _expect(data_dir, r"pairs.jsonl:2: field 'positive': missing", pairs_rows=rows)


def test_empty_item(data_dir: Path) -> None:
    rows = _pairs_rows()
    rows[0]["query"] = {"text": ""}
    _expect(data_dir, r"pairs.jsonl:1: field 'query.image': item has neither an image nor a text", pairs_rows=rows)


def test_unknown_item_key(data_dir: Path) -> None:
    rows = _pairs_rows()
    rows[0]["positive"] = {"img": "a1.png"}
    _expect(data_dir, r"pairs.jsonl:1: field 'positive.img': unknown item key", pairs_rows=rows)


def test_wrong_type(data_dir: Path) -> None:
    _expect(data_dir, r"rec.jsonl:2: field 'identity': expected a string, got int",
            identity_rows=_mutated(1, identity=7))


def test_wrong_type_bbox(data_dir: Path) -> None:
    _expect(data_dir, r"rec.jsonl:1: field 'bbox'", identity_rows=_mutated(0, bbox=[1, 2, 3]))


def test_unknown_kind(data_dir: Path) -> None:
    _expect(data_dir, r"train.yaml:\d+: field 'datasets\[0\].kind': unknown kind 'triplets'", kind="triplets")


def test_duplicate_id(data_dir: Path) -> None:
    _expect(data_dir, r"rec.jsonl:4: field 'id': duplicate id 'b1' \(first on line 3\)",
            identity_rows=_mutated(3, id="b1", hard_negatives=None))


def test_dangling_hard_negative(data_dir: Path) -> None:
    _expect(data_dir, r"rec.jsonl:1: field 'hard_negatives': unknown id 'p1'",
            identity_rows=_mutated(0, hard_negatives=["p1"]))


def test_hard_negative_of_same_identity(data_dir: Path) -> None:
    _expect(data_dir, r"rec.jsonl:1: field 'hard_negatives': hard negative 'a2' has the same identity",
            identity_rows=_mutated(0, hard_negatives=["a2"]))
    _expect(data_dir, r"rec.jsonl:1: field 'hard_negatives': a row cannot be its own",
            identity_rows=_mutated(0, hard_negatives=["a1"]))


def test_empty_namespace(data_dir: Path) -> None:
    _expect(data_dir, r"field 'datasets\[0\].identity_namespace': must be non-empty", identity_namespace=" ")


def test_missing_image_file(data_dir: Path) -> None:
    _expect(data_dir, r"rec.jsonl:2: field 'image': image file not found: .*nope.png",
            identity_rows=_mutated(1, image="nope.png"))
    # ... unless the caller opts out of the check
    cfg = load_train_config(data_dir / "train.yaml", check_images=False)
    assert cfg.datasets[0].get("a2")["image"] == "nope.png"


def test_single_instance_identity_loads_and_is_counted(data_dir: Path) -> None:
    # an identity with one row is no error: it is never an anchor (no other instance to be the
    # positive) but may be a designated hard negative
    rows = _identity_rows() + [{"id": "c1", "image": "b2.png", "identity": "bird"}]
    rows[0]["hard_negatives"] = ["c1"]
    ds = load_train_config(_setup(data_dir, identity_rows=rows)).datasets[0]
    assert ds.single_instance_identities() == 1
    assert list(ds.arrays().hard_negatives_of(0)) == [ds.index["c1"]]
    assert load_train_config(_setup(data_dir)).datasets[0].single_instance_identities() == 0
    # `vis-embed prep check` counts them per dataset
    import contextlib
    import io

    from vis_embed.cli import main as cli_main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["prep", "check", str(_setup(data_dir, identity_rows=rows))]) == 0
    assert "rec: identity, 5 rows, 3 identities (1 single-instance: never anchors" in out.getvalue()
    # in a pairs dataset the row's positive is explicit: nothing to count
    pairs = _pairs_rows()
    pairs[0]["identity"] = "bird"
    cfg = load_train_config(_setup(data_dir, pairs_rows=pairs))
    assert cfg.datasets[1].get("p1")["identity"] == "bird" and cfg.datasets[1].single_instance_identities() == 0


def test_pairs_row_negatives_are_items_validated_and_resolved(data_dir: Path) -> None:
    pairs = _pairs_rows()
    pairs[0]["negatives"] = [{"image": "b1.png"}, {"text": "not this one"}]
    ds = load_train_config(_setup(data_dir, pairs_rows=pairs)).datasets[1]
    assert ds.negative_items(ds.get("p1")) == [{"image": str(data_dir / "train" / "b1.png"), "text": None},
                                               {"image": None, "text": "not this one"}]
    assert ds.negative_items(ds.get("p2")) == []
    for negatives, pattern in [
        ([{"img": "b1.png"}], r"pairs.jsonl:1: field 'negatives\[0\].img': unknown item key"),
        ([{"text": "ok"}, {}], r"pairs.jsonl:1: field 'negatives\[1\].image': item has neither"),
        ([{"image": "nope.png"}], r"pairs.jsonl:1: field 'negatives\[0\].image': image file not found"),
        ({"text": "x"}, r"pairs.jsonl:1: field 'negatives': expected a list of items"),
    ]:
        rows = _pairs_rows()
        rows[0]["negatives"] = negatives
        _expect(data_dir, pattern, pairs_rows=rows)


def test_unknown_yaml_key(data_dir: Path) -> None:
    _expect(data_dir, r"train.yaml:\d+: field 'datasets\[0\].wieght': unknown key", wieght=2)


def test_unknown_top_level_key(data_dir: Path) -> None:
    yaml_path = _setup(data_dir)
    yaml_path.write_text(yaml_path.read_text() + "seed: 3\n")
    with pytest.raises(DataError, match=r"train.yaml:\d+: field 'seed': unknown key"):
        load_train_config(yaml_path)


def test_yaml_line_numbers_point_at_the_key(data_dir: Path) -> None:
    _setup(data_dir)
    yaml_path = data_dir / "t.yaml"
    yaml_path.write_text("datasets:\n  - name: rec\n    kind: identity\n    path: train/rec.jsonl\n"
                         "    weight: heavy\n")
    with pytest.raises(DataError, match=r"t.yaml:5: field 'datasets\[0\].weight': wrong type str"):
        load_train_config(yaml_path)


def test_missing_data_file_and_malformed_json(data_dir: Path) -> None:
    _expect(data_dir, r"field 'datasets\[0\].path': data file not found", path="train/none.jsonl")
    _setup(data_dir)
    with (data_dir / "train" / "rec.jsonl").open("a") as handle:
        handle.write("{not json\n")
    with pytest.raises(DataError, match=r"rec.jsonl:5: malformed JSON"):
        load_train_config(data_dir / "train.yaml")


def test_duplicate_dataset_name(data_dir: Path) -> None:
    _setup(data_dir)
    _write_yaml(data_dir / "train.yaml", [{"name": "x", "kind": "identity", "path": "train/rec.jsonl"},
                                          {"name": "x", "kind": "pairs", "path": "train/pairs.jsonl"}])
    with pytest.raises(DataError, match="duplicate dataset name 'x'"):
        load_train_config(data_dir / "train.yaml")


def test_parquet_and_jsonl_read_the_same_rows(tmp_path: Path) -> None:
    rows = _identity_rows() + [{"id": "z", "image": "z.png", "identity": "cat", "extra": {"k": 1}}]
    write_table(tmp_path / "r.jsonl", rows)
    write_table(tmp_path / "r.parquet", rows)
    from_jsonl = [row for _, row in read_table(tmp_path / "r.jsonl")]
    from_parquet = [row for _, row in read_table(tmp_path / "r.parquet")]
    assert from_jsonl == from_parquet == rows
    assert json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])["id"] == "a1"
    assert np.array_equal([n for n, _ in read_table(tmp_path / "r.parquet")], [1, 2, 3, 4, 5])


def test_a_corrupt_parquet_page_is_a_data_error_naming_the_file(tmp_path: Path) -> None:
    """The footer reads, a data page does not: pyarrow's OSError surfaced mid-iteration as a traceback."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": [f"r{i}" for i in range(1000)], "image": ["a.png"] * 1000})
    pq.write_table(table, tmp_path / "r.parquet", compression="NONE")
    data = bytearray((tmp_path / "r.parquet").read_bytes())
    data[200:2000] = b"\xab" * 1800  # inside the first column chunk's pages, before the footer
    (tmp_path / "r.parquet").write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"r.parquet: cannot read Parquet data at or after row 1"):
        list(read_table(tmp_path / "r.parquet"))


def test_a_row_nested_hundreds_deep_is_a_data_error_naming_the_line(tmp_path: Path) -> None:
    """500 levels parse (json's limit is the interpreter's ~1000), then the null-dropping walk
    overflowed the stack: a RecursionError traceback from every loader."""
    deep = "[" * 500 + "]" * 500
    (tmp_path / "r.jsonl").write_text('{"id": "a"}\n\n{"id": "b", "meta": ' + deep + "}\n")
    with pytest.raises(DataError, match=r"r.jsonl:3: nested deeper than 100 levels"):
        list(read_table(tmp_path / "r.jsonl"))
    ok = "[" * 90 + "]" * 90
    (tmp_path / "r.jsonl").write_text('{"id": "b", "meta": ' + ok + "}\n")
    assert len(list(read_table(tmp_path / "r.jsonl"))) == 1


def test_jsonl_parquet_equivalence_property(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Any valid identity/pairs rows read back identically from JSONL and Parquet."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    text = st.text(min_size=1, max_size=8)
    item = st.fixed_dictionaries({}, optional={"image": text, "text": text}).filter(bool)
    identity_row = st.fixed_dictionaries(
        {"image": text, "identity": text},
        optional={"text": text, "bbox": st.tuples(*[st.integers(0, 50)] * 4).map(list),
                  "hard_negatives": st.lists(text, max_size=3)})
    pairs_row = st.fixed_dictionaries({"query": item, "positive": item},
                                      optional={"identity": text, "hard_negatives": st.lists(text, max_size=3)})

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.one_of(st.lists(identity_row, min_size=1, max_size=5), st.lists(pairs_row, min_size=1, max_size=5)))
    def check(rows: list[dict]) -> None:
        rows = [{"id": str(k), **row} for k, row in enumerate(rows)]
        folder = tmp_path_factory.mktemp("eq")
        write_table(folder / "r.jsonl", rows)
        write_table(folder / "r.parquet", rows)
        from_parquet = [r for _, r in read_table(folder / "r.parquet")]
        assert from_parquet == [r for _, r in read_table(folder / "r.jsonl")] == rows

    check()
