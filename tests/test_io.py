"""vis_embed.io's JSON readers under hostile input: bounded work, the file named."""

from __future__ import annotations

import pytest


def test_a_jsonl_line_nested_past_the_limit_is_a_data_error_naming_it(tmp_path) -> None:
    """Hostile input gets bounded work: a line nested 200k deep is refused by name, not a RecursionError."""
    from vis_embed.errors import DataError
    from vis_embed.io import read_jsonl

    path = tmp_path / "deep.jsonl"
    path.write_text('{"a": 1}\n' + "[" * 200_000 + "]" * 200_000 + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="nested too deeply") as caught:
        list(read_jsonl(path))
    assert caught.value.line == 2


def test_a_json_file_that_is_a_fifo_is_refused_before_it_is_opened(tmp_path) -> None:
    import os

    from vis_embed.errors import DataError
    from vis_embed.io import read_json_value

    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="FIFO"):
        read_json_value(fifo)  # would block forever if opened
