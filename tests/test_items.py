"""One item contract: every path (encode CLI, Embedder.encode, training config, benchmark
manifest) makes the same decision on the same item, and a bbox crops the same pixels everywhere."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from vis_embed import Embedder
from vis_embed.data import check_item, crop_to_bbox, load_benchmark, load_image, load_train_config, write_table
from vis_embed.errors import DataError
from vis_embed.evaluation.layout_base import normalise_item
from vis_embed.model.runtime.encode_file import read_items

BAD_ITEMS = [
    pytest.param({"img": "a.png"}, "img", "unknown item key 'img'", id="typo-img"),
    pytest.param({"image": "a.png", "txt": "x"}, "txt", "unknown item key 'txt'", id="typo-txt"),
    pytest.param({}, "image", "neither an image nor a text", id="empty"),
    pytest.param({"text": "   "}, "image", "neither an image nor a text", id="blank-text"),
    pytest.param({"image": "a.png", "text": 5}, "text", "must be a string", id="text-int"),
    pytest.param({"image": ""}, "image", "must not be empty", id="image-empty"),
    pytest.param({"image": 7}, "image", "must be a path, URL or PIL image", id="image-int"),
    pytest.param({"image": "a.png", "bbox": [1, 2, 3]}, "bbox", "4 numbers", id="bbox-short"),
    pytest.param({"image": "a.png", "bbox": [5, 5, 1, 1]}, "bbox", "empty or negative box", id="bbox-negative"),
    pytest.param({"text": "x", "bbox": [0, 0, 1, 1]}, "bbox", "has no image", id="bbox-without-image"),
]


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    image = Image.new("RGB", (16, 12), (200, 30, 30))
    image.putpixel((3, 2), (0, 0, 255))
    image.save(tmp_path / "a.png")
    Image.new("RGB", (16, 12), (30, 200, 30)).save(tmp_path / "b.png")
    return tmp_path


def _training_error(folder: Path, item: dict) -> DataError:
    write_table(folder / "pairs.jsonl", [{"id": "p1", "query": {"text": "q"}, "positive": item},
                                         {"id": "p2", "query": {"text": "r"}, "positive": {"image": "b.png"}}])
    (folder / "train.yaml").write_text(yaml.safe_dump(
        {"datasets": [{"name": "p", "kind": "pairs", "path": "pairs.jsonl"}]}))
    with pytest.raises(DataError) as info:
        load_train_config(folder / "train.yaml")
    return info.value


def _manifest_error(folder: Path, item: dict) -> DataError:
    write_table(folder / "cand.jsonl", [{"id": "c1", "query": item, "candidates": [{"text": "x"}]}])
    (folder / "bench.yaml").write_text(yaml.safe_dump({"name": "t", "datasets": [
        {"name": "C", "meta_task": "Cls", "split": "IND", "benchmark": "other", "layout": "candidates",
         "path": "cand.jsonl"}]}))
    with pytest.raises(DataError) as info:
        load_benchmark(folder / "bench.yaml").dataset("C").load_candidates()
    return info.value


def _encode_cli_error(folder: Path, item: dict) -> DataError:
    (folder / "items.jsonl").write_text(json.dumps({"id": "x", **item}) + "\n")
    with pytest.raises(DataError) as info:
        read_items(folder / "items.jsonl", on_error="raise")
    return info.value


def _protocol_row_error(folder: Path, item: dict) -> DataError:
    with pytest.raises(DataError) as info:
        normalise_item(item, folder, folder / "afc.jsonl", 4, "a")
    return info.value


@pytest.mark.parametrize(("item", "key", "message"), BAD_ITEMS)
def test_every_file_path_rejects_the_same_item_the_same_way(folder: Path, item: dict, key: str,
                                                            message: str) -> None:
    errors = {"training": _training_error(folder, item), "manifest": _manifest_error(folder, item),
              "encode": _encode_cli_error(folder, item), "protocol": _protocol_row_error(folder, item)}
    reasons = {path: error.reason for path, error in errors.items()}
    assert len(set(reasons.values())) == 1, reasons
    assert message in reasons["encode"]
    assert errors["training"].field == f"positive.{key}" and errors["training"].line == 1
    assert errors["manifest"].field == f"query.{key}" and errors["manifest"].line == 1
    assert errors["encode"].field == key and errors["encode"].line == 1
    assert errors["protocol"].field == f"a.{key}" and errors["protocol"].line == 4
    assert str(folder / "items.jsonl") in str(errors["encode"])


def test_unknown_key_message_names_the_key(folder: Path) -> None:
    error = _encode_cli_error(folder, {"img": "a.png"})
    assert f"{folder / 'items.jsonl'}:1: field 'img': unknown item key 'img'" in str(error)


def test_valid_items_pass_unchanged_but_for_nulls() -> None:
    assert check_item({"image": "a.png", "text": None}) == {"image": "a.png"}
    assert check_item({"text": "t", "image": None, "bbox": None}) == {"text": "t"}
    assert check_item({"image": "a.png", "bbox": (1, 2, 3.5, 4)}) == {"image": "a.png", "bbox": [1, 2, 3.5, 4]}


@pytest.mark.parametrize(("item", "key", "message"), BAD_ITEMS)
def test_embedder_encode_makes_the_same_decision(tiny_checkpoint: Callable[..., Path], folder: Path,
                                                 item: dict, key: str, message: str) -> None:
    embedder = _embedder(tiny_checkpoint)
    with pytest.raises(DataError) as info:
        embedder.encode([{"text": "fine"}, item], base_dir=folder)
    assert info.value.reason == _encode_cli_error(folder, item).reason
    assert info.value.field == f"items[1].{key}" and info.value.item_index == 1
    _embeddings, kept, errors = embedder.encode_partial([item, {"text": "fine"}], base_dir=folder, on_error="skip")
    assert kept == [1] and list(errors) == [0]


_EMBEDDERS: dict[Path, Embedder] = {}


def _embedder(tiny_checkpoint: Callable[..., Path]) -> Embedder:
    path = tiny_checkpoint()
    if path not in _EMBEDDERS:
        _EMBEDDERS[path] = Embedder.from_pretrained(path, device="cpu")
    return _EMBEDDERS[path]


BOX = [2, 1, 10, 7]


def test_bbox_crops_the_same_pixels_on_every_path(tiny_checkpoint: Callable[..., Path], folder: Path) -> None:
    expected = crop_to_bbox(load_image(folder / "a.png"), BOX)
    assert expected.size == (8, 6) and expected.getpixel((1, 1)) == (0, 0, 255)
    # training: a pairs item keeps its bbox (as identity rows' query side does); the model crops
    write_table(folder / "pairs.jsonl",
                [{"id": "p1", "query": {"image": "a.png", "bbox": BOX}, "positive": {"text": "t"}},
                 {"id": "p2", "query": {"text": "r"}, "positive": {"image": "b.png"}}])
    (folder / "train.yaml").write_text(yaml.safe_dump({"datasets": [{"name": "p", "kind": "pairs",
                                                                      "path": "pairs.jsonl"}]}))
    pairs = load_train_config(folder / "train.yaml").dataset("p")
    training_query = pairs.query_item(pairs.get("p1"))
    assert training_query == {"image": str(folder / "a.png"), "text": None, "bbox": BOX}
    # evaluation: the manifest keeps the bbox, and the model crops it
    write_table(folder / "cand.jsonl",
                [{"id": "c1", "query": {"image": "a.png", "bbox": BOX}, "candidates": [{"text": "x"}]}])
    (folder / "bench.yaml").write_text(yaml.safe_dump({"name": "t", "datasets": [
        {"name": "C", "meta_task": "Cls", "split": "IND", "benchmark": "other", "layout": "candidates",
         "path": "cand.jsonl"}]}))
    eval_query = load_benchmark(folder / "bench.yaml").dataset("C").load_candidates()[0].query
    assert eval_query["bbox"] == BOX
    # encode CLI: the bbox is part of the item read from the file
    (folder / "items.jsonl").write_text(json.dumps({"image": "a.png", "bbox": BOX}) + "\n")
    cli_item = read_items(folder / "items.jsonl", "raise")[0][0]
    embedder = _embedder(tiny_checkpoint)
    vectors = embedder.encode([training_query, eval_query, {"image": expected}, {"image": folder / "a.png"}])
    vectors_cli = embedder.encode([cli_item], base_dir=folder)
    np.testing.assert_allclose(vectors[1], vectors[0], atol=1e-6)
    np.testing.assert_allclose(vectors[2], vectors[0], atol=1e-6)
    np.testing.assert_allclose(vectors_cli[0], vectors[0], atol=1e-6)
    assert float(vectors[3] @ vectors[0]) < 0.99999  # the crop does change the vector


def test_bbox_outside_the_image_is_the_same_error_everywhere(tiny_checkpoint: Callable[..., Path],
                                                             folder: Path) -> None:
    outside = [0, 0, 40, 6]
    write_table(folder / "pairs.jsonl",
                [{"id": "p1", "query": {"image": "a.png", "bbox": outside}, "positive": {"text": "t"}},
                 {"id": "p2", "query": {"text": "r"}, "positive": {"image": "b.png"}}])
    (folder / "train.yaml").write_text(yaml.safe_dump({"datasets": [{"name": "p", "kind": "pairs",
                                                                      "path": "pairs.jsonl"}]}))
    with pytest.raises(DataError, match=r"pairs.jsonl:1: field 'query.bbox': box .* lies outside the 16x12 image"):
        load_train_config(folder / "train.yaml")  # at load time, from the image header
    write_table(folder / "cand.jsonl", [{"id": "c1", "query": {"image": "a.png", "bbox": outside},
                                         "candidates": [{"text": "x"}]}])
    (folder / "bench.yaml").write_text(yaml.safe_dump({"name": "t", "datasets": [
        {"name": "C", "meta_task": "Cls", "split": "IND", "benchmark": "other", "layout": "candidates",
         "path": "cand.jsonl"}]}))
    with pytest.raises(DataError, match=r"cand.jsonl:1: field 'query.bbox': box .* lies outside the 16x12 image"):
        load_benchmark(folder / "bench.yaml").dataset("C").load_candidates()
    with pytest.raises(DataError, match=r"field 'bbox': box .* lies outside the 16x12 image") as info:
        _embedder(tiny_checkpoint).encode([{"image": "a.png", "bbox": outside}], base_dir=folder)
    assert info.value.item_index == 0


@pytest.mark.parametrize("kind", ["data config", "manifest", "jsonl rows"])
def test_bytes_that_are_not_utf8_name_file_and_line(folder: Path, kind: str) -> None:
    bad = "caf\u00e9".encode("latin-1")  # a Latin-1 e-acute: not UTF-8
    if kind == "data config":
        path = folder / "train.yaml"
        path.write_bytes(b"datasets:\n  - name: " + bad + b"\n    kind: pairs\n")
        load = lambda: load_train_config(path)  # noqa: E731
    elif kind == "manifest":
        path = folder / "bench.yaml"
        path.write_bytes(b"name: t\ndatasets:\n  - name: " + bad + b"\n")
        load = lambda: load_benchmark(path)  # noqa: E731
    else:
        path = folder / "pairs.jsonl"
        path.write_bytes(b'{"id": "p1", "query": {"text": "q"}, "positive": {"image": "a.png"}}\n'
                         b'{"id": "p2", "query": {"text": "' + bad + b'"}, "positive": {"image": "b.png"}}\n')
        (folder / "train.yaml").write_text(yaml.safe_dump(
            {"datasets": [{"name": "p", "kind": "pairs", "path": "pairs.jsonl"}]}))
        load = lambda: load_train_config(folder / "train.yaml")  # noqa: E731
    line = 3 if kind == "manifest" else 2
    with pytest.raises(DataError, match=rf"{path.name}:{line}: not UTF-8 text \(invalid byte 0xe9"):
        load()


def test_encode_cli_input_that_is_not_utf8_names_the_line(folder: Path) -> None:
    (folder / "items.jsonl").write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"items.jsonl:2: not UTF-8 text"):
        read_items(folder / "items.jsonl", on_error="raise")


def test_resolved_item_equality_is_resolved_path_box_and_text(folder: Path) -> None:
    from vis_embed.data import ResolvedItem

    a = ResolvedItem.of({"image": "a.png", "bbox": [0, 0, 8, 6]}, folder)
    assert a == ResolvedItem.of({"image": "./sub/../a.png", "bbox": [0.0, 0.0, 8.0, 6.0]}, folder)
    assert a == ResolvedItem.of({"image": str(folder / "a.png"), "bbox": [0, 0, 8, 6]})
    assert hash(a) == hash(ResolvedItem.of({"image": "a.png", "bbox": [0, 0, 8, 6]}, folder))
    assert a.image == str(folder / "a.png") and a.as_dict() == {"image": a.image, "text": None, "bbox": [0, 0, 8, 6]}
    others = [{"image": "a.png"}, {"image": "a.png", "bbox": [0, 0, 8, 5]},
              {"image": "a.png", "bbox": [0, 0, 8, 6], "text": "t"}, {"image": "b.png", "bbox": [0, 0, 8, 6]}]
    assert all(ResolvedItem.of(other, folder) != a for other in others)
    with pytest.raises(DataError, match="field 'positive.img'"):
        ResolvedItem.of({"img": "a.png"}, folder, field="positive")


def test_one_content_signature_for_eval_cache_and_encode_shards(folder: Path) -> None:
    """The evaluation harness and encode shards sign an item alike: its image by content."""
    import shutil

    from vis_embed.data import ResolvedItem
    from vis_embed.embedding_cache import ContentHasher
    from vis_embed.evaluation.harness import _ItemSigner
    from vis_embed.model.runtime.encode_shards import _signatures

    shutil.copy(folder / "a.png", folder / "copy.png")
    item = {"image": "a.png", "bbox": [0, 0, 8, 6]}
    resolved = ResolvedItem.of(item, folder)
    eval_signature = _ItemSigner(ContentHasher())(resolved.as_dict())
    assert _signatures([item], folder) == [eval_signature]
    assert _signatures([{"image": "copy.png", "bbox": [0, 0, 8, 6]}], folder) == [eval_signature]  # same bytes
    assert _signatures([{"image": "b.png", "bbox": [0, 0, 8, 6]}], folder) != [eval_signature]
    assert _signatures([{"image": "a.png", "bbox": [0, 0, 8, 5]}], folder) != [eval_signature]
    # without a digest (loss labels' key), the location stands for the content
    assert resolved.signature() != eval_signature and str(folder / "a.png") in resolved.signature()
    # a missing file keeps its location instead of failing (encoding it reports the error)
    assert "missing.png" in _signatures([{"image": "missing.png"}], folder)[0]
