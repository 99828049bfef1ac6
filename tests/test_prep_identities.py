"""Identity folder / CSV converters: rows load as a training dataset; malformed CSVs are named."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from vis_embed.prep.identities import convert_identity_csv, convert_identity_folder
from vis_embed.cli import main as cli_main
from vis_embed.data import load_train_config
from vis_embed.errors import DataError


def _collection(root: Path) -> Path:
    for name in ("alice/1.jpg", "alice/2.png", "alice/trip/3.jpg", "bob/1.jpg", "bob/2.jpg", "carol/1.jpg"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8)).save(root / name)
    (root / "alice" / "notes.txt").write_text("not an image")
    Image.new("RGB", (8, 8)).save(root / "stray.jpg")
    return root


def test_identity_folder_round_trip(tmp_path: Path) -> None:
    root = _collection(tmp_path / "people")
    report = convert_identity_folder(root, tmp_path / "out" / "people.jsonl")
    assert report["rows"] == 6 and report["identities"] == 3 and report["single_instance_identities"] == 1
    assert report["skipped"] == {"not_an_image": 1, "outside_identity_folders": 1}
    # carol has one image: the training loader keeps her as a hard-negative-only identity (counted)
    code = cli_main(["prep", "identity-folder", str(root), "--out", str(tmp_path / "out" / "people.jsonl"),
                     "--config", str(tmp_path / "train.yaml"), "--name", "people",
                     "--query-instruction", "Find the same person."])
    assert code == 0
    assert load_train_config(tmp_path / "train.yaml").dataset("people").single_instance_identities() == 1
    (root / "carol" / "1.jpg").unlink()
    cli_main(["prep", "identity-folder", str(root), "--out", str(tmp_path / "out" / "people.jsonl"),
              "--config", str(tmp_path / "train.yaml"), "--name", "people",
              "--query-instruction", "Find the same person."])
    ds = load_train_config(tmp_path / "train.yaml").dataset("people")
    assert [r["id"] for r in ds.records] == ["alice/1.jpg", "alice/2.png", "alice/trip/3.jpg", "bob/1.jpg", "bob/2.jpg"]
    assert ds.identity_key(ds.get("alice/trip/3.jpg")) == "people::alice"
    assert ds.positive_item(ds.get("bob/2.jpg"))["image"] == str(root / "bob" / "2.jpg")
    assert ds.query_instruction == "Find the same person."


def test_identity_csv_round_trip(tmp_path: Path) -> None:
    root = _collection(tmp_path / "imgs")
    csv_path = tmp_path / "labels.csv"
    csv_path.write_text("path,identity,text,bbox\n"
                        "alice/1.jpg,alice,,\n"
                        "alice/2.png,alice,a portrait,\"1,1,5,5\"\n"
                        "bob/1.jpg,bob,,\"[0,0,4,4]\"\n"
                        "bob/2.jpg,bob,,\n")
    report = convert_identity_csv(csv_path, tmp_path / "out" / "rows.parquet", image_root=root)
    assert report["rows"] == 4 and report["identities"] == 2
    (tmp_path / "t.yaml").write_text("datasets:\n  - {name: csv, kind: identity, path: out/rows.parquet}\n")
    ds = load_train_config(tmp_path / "t.yaml").datasets[0]
    assert ds.get("1") == {"id": "1", "image": "../imgs/alice/2.png", "identity": "alice",
                           "text": "a portrait", "bbox": [1.0, 1.0, 5.0, 5.0]}
    assert ds.query_item(ds.get("1"))["bbox"] == [1.0, 1.0, 5.0, 5.0]  # the model layer crops it


@pytest.mark.parametrize("content, pattern", [
    ("file,identity\na.jpg,x\n", r"labels.csv:1: field 'path': missing CSV column"),
    ("path,identity\na.jpg,\n", r"labels.csv:2: field 'identity': empty value"),
    ("path,identity,bbox\na.jpg,x,1;2\n", r"labels.csv:2: field 'bbox': cannot parse"),
    ("path,identity,bbox\na.jpg,x,\"" + "[" * 5000 + "\"\n", r"labels.csv:2: field 'bbox': cannot parse"),
    ("path,identity,bbox\na.jpg,x,\"5,5,1,1\"\n", r"labels.csv:2: field 'bbox': empty or negative box"),
    ("path,identity\n", r"CSV has no rows"),
    ("path,identity\na.jpg,x,[0,0,4,4]\n", r"labels.csv:2: more values than header columns"),
])
def test_identity_csv_errors(tmp_path: Path, content: str, pattern: str) -> None:
    (tmp_path / "labels.csv").write_text(content)
    with pytest.raises(DataError, match=pattern):
        convert_identity_csv(tmp_path / "labels.csv", tmp_path / "rows.jsonl")


@pytest.mark.parametrize("content, pattern", [
    (b"path,identity\r\na.jpg,x\r\n\xffb.jpg,y\r\n", r"labels.csv:3: not UTF-8 text \(invalid byte 0xff"),
    (b"path,identity\na.jpg,x\nb.jpg," + b"y" * 200_000 + b"\n", r"labels.csv:3: malformed CSV \(field larger"),
])
def test_identity_csv_undecodable_or_malformed_is_a_data_error(tmp_path: Path, content: bytes,
                                                               pattern: str) -> None:
    """Bytes that are not UTF-8 and the csv module's own errors were tracebacks (UnicodeDecodeError,
    _csv.Error) naming neither the file nor the line."""
    (tmp_path / "labels.csv").write_bytes(content)
    with pytest.raises(DataError, match=pattern):
        convert_identity_csv(tmp_path / "labels.csv", tmp_path / "rows.jsonl")


def test_identity_csv_bom_and_crlf(tmp_path: Path) -> None:
    (tmp_path / "labels.csv").write_bytes(b"\xef\xbb\xbfpath,identity\r\na.jpg,x\r\nb.jpg,x\r\n")
    assert convert_identity_csv(tmp_path / "labels.csv", tmp_path / "rows.jsonl")["rows"] == 2


def test_identity_folder_follows_folder_symlinks_once_and_skips_undecodable_names(tmp_path: Path) -> None:
    """An identity folder that is a symlink was silently left out (rglob does not follow folder
    links); a link back to an ancestor must not loop; a file name whose bytes are not UTF-8 was a
    UnicodeEncodeError traceback while writing the rows."""
    import os

    root = _collection(tmp_path / "people")
    (tmp_path / "elsewhere" / "dave").mkdir(parents=True)
    for name in ("1.jpg", "2.jpg"):
        Image.new("RGB", (8, 8)).save(tmp_path / "elsewhere" / "dave" / name)
    os.symlink(tmp_path / "elsewhere" / "dave", root / "dave")
    os.symlink("..", root / "bob" / "loop")  # people/bob/loop -> people
    Image.new("RGB", (8, 8)).save(os.path.join(os.fsencode(root / "bob"), b"\xff.jpg"))
    report = convert_identity_folder(root, tmp_path / "out" / "people.jsonl")
    assert report["identities"] == 4 and report["rows"] == 8
    assert report["skipped"] == {"not_an_image": 1, "outside_identity_folders": 1, "folder_seen_before": 1,
                                 "name_not_utf8": 1}


@pytest.mark.parametrize("content, pattern", [
    (b"datasets:\n  - name: [a\n", r"bad.yaml:3: invalid YAML"),
    (b"datasets:\n  - name: \xff\n", r"bad.yaml:2: not UTF-8 text"),
    (b"- a\n", r"bad.yaml: field 'datasets': expected a mapping with a 'datasets' list"),
])
def test_prep_bad_yaml_is_an_error_line_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        content: bytes, pattern: str) -> None:
    """`prep check` sniffed the YAML with yaml.safe_load, and `--config` read it the same way:
    a syntax error, bytes that are not UTF-8 or a list at the top were tracebacks."""
    import re

    root = _collection(tmp_path / "people")
    (tmp_path / "bad.yaml").write_bytes(content)
    commands = [["prep", "identity-folder", str(root), "--out", str(tmp_path / "rows.jsonl"),
                 "--config", str(tmp_path / "bad.yaml")]]
    if not content.startswith(b"- "):  # a list at the top is the loader's own error already
        commands.append(["prep", "check", str(tmp_path / "bad.yaml")])
    for command in commands:
        assert cli_main(command) == 2
        assert re.search(pattern, capsys.readouterr().err)
    assert (tmp_path / "bad.yaml").read_bytes() == content


def test_identity_folder_without_identities(tmp_path: Path) -> None:
    (tmp_path / "flat").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "flat" / "a.jpg")
    with pytest.raises(DataError, match="no images found in identity sub-folders"):
        convert_identity_folder(tmp_path / "flat", tmp_path / "rows.jsonl")
