"""Output folders a command replaces (vis_embed.io.atomic_directory / check_replaceable): only
missing, empty or earlier outputs of the same writer are replaced, never a folder of other
files, a regular file or a folder holding the input; the temporary folder never outlives a
failure; two writers of one folder race without an error or a leftover."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from vis_embed import io
from vis_embed.errors import ConfigError
from vis_embed.io import atomic_directory, check_replaceable


def _foreign(tmp_path: Path) -> Path:
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    return folder


def _names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def test_a_folder_of_other_files_a_file_and_a_folder_holding_the_input_are_refused(tmp_path: Path) -> None:
    foreign = _foreign(tmp_path)
    with pytest.raises(ConfigError, match=r"--out .*photos: holds files and is not an index directory \(no "
                                          r"index.json\)"):
        check_replaceable(foreign, "index.json", "an index directory")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="--out .*file: is a file, not a folder"):
        check_replaceable(tmp_path / "file", "index.json", "an index directory")
    (foreign / "index.json").write_text("{}")  # an earlier output: replaceable, unless it holds the input
    check_replaceable(foreign, "index.json", "an index directory")
    with pytest.raises(ConfigError, match="holds the input .*notes.txt"):
        check_replaceable(foreign, "index.json", "an index directory", inputs=[foreign / "notes.txt"])
    (tmp_path / "empty").mkdir()
    check_replaceable(tmp_path / "empty", "index.json", "an index directory")
    check_replaceable(tmp_path / "missing", "index.json", "an index directory", inputs=["org/model"])


def test_a_refused_folder_is_left_as_it_was(tmp_path: Path) -> None:
    foreign = _foreign(tmp_path)
    with pytest.raises(ConfigError), atomic_directory(foreign, marker="index.json", what="an index directory"):
        raise AssertionError("the body must not run")
    assert _names(foreign) == ["notes.txt"] and _names(tmp_path) == ["photos"]


@pytest.mark.parametrize("writer", ["tiny-model", "export", "merge", "synth"])
def test_every_command_replacing_a_folder_refuses_a_foreign_one_before_any_work(tmp_path: Path, writer: str) -> None:
    """The commands that write a whole folder share the rule, and check before loading anything."""
    foreign = _foreign(tmp_path)
    if writer == "tiny-model":
        from vis_embed.model.files.tiny import build_tiny_checkpoint
        call = lambda: build_tiny_checkpoint(foreign)  # noqa: E731
    elif writer == "export":
        from vis_embed.model.files.export import export_sentence_transformers
        (tmp_path / "model").mkdir()  # found (its inputs are checked first, as merge's), never loaded
        call = lambda: export_sentence_transformers(str(tmp_path / "model"), foreign)  # noqa: E731
    elif writer == "merge":
        from vis_embed.training.merge import merge_adapter
        (tmp_path / "base").mkdir()
        call = lambda: merge_adapter(tmp_path / "no-adapter", foreign, base=str(tmp_path / "base"))  # noqa: E731
    else:
        from vis_embed.prep.synth.build import generate
        call = lambda: generate(foreign, size="tiny", workers=1)  # noqa: E731
    with pytest.raises(ConfigError, match="holds files and is not a"):
        call()
    assert _names(foreign) == ["notes.txt"]


def test_the_temporary_folder_is_removed_when_the_swap_fails(tmp_path: Path, monkeypatch) -> None:
    """A failed rename (here: no permission) keeps the previous folder and leaves no temporary."""
    target = tmp_path / "idx"
    target.mkdir()
    (target / "index.json").write_text("old")
    real = os.replace

    def refuse_the_new_one(src, dst):
        if ".tmp-" in Path(src).name:
            raise PermissionError(errno.EACCES, "denied")
        return real(src, dst)

    monkeypatch.setattr(io.os, "replace", refuse_the_new_one)
    with pytest.raises(PermissionError), atomic_directory(target) as tmp:
        (tmp / "index.json").write_text("new")
    assert _names(tmp_path) == ["idx"] and (target / "index.json").read_text() == "old"


def test_a_writer_finishing_between_the_move_aside_and_the_rename_is_replaced_in_turn(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """Two `vis-embed index --out X` at once: A's build lands at X just before B renames its own
    there (which fails, ENOTEMPTY).  B moves A's aside and renames again: B's build, no leftover."""
    target = tmp_path / "idx"
    real, raced = os.replace, []

    def other_writer_first(src, dst):
        if Path(dst) == target and not target.exists() and not raced:
            raced.append(dst)
            target.mkdir()
            (target / "index.json").write_text("A")
        return real(src, dst)

    monkeypatch.setattr(io.os, "replace", other_writer_first)
    with atomic_directory(target, marker="index.json", what="an index directory") as tmp:
        (tmp / "index.json").write_text("B")
    assert raced and _names(tmp_path) == ["idx"] and (target / "index.json").read_text() == "B"
