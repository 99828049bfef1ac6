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


@pytest.mark.parametrize(("text", "problem"), [('{"stage": 2', "not valid JSON"),
                                               ("[1, 2]", "expected a JSON object, got list"),
                                               ("[" * 200_000 + "]" * 200_000, "nested too deeply")])
def test_a_settings_file_that_is_no_json_object_is_a_config_error_naming_it(tmp_path, text: str, problem: str) -> None:
    """One reader for settings files: a recorded embedding_config.json and a DeepSpeed config fail
    alike -- a ConfigError (it is a setting) naming the file and what is wrong."""
    from vis_embed.errors import ConfigError
    from vis_embed.model.embedding_config import EMBEDDING_CONFIG_FILE, read_embedding_config
    from vis_embed.training.deepspeed_config import read_deepspeed_config

    (tmp_path / EMBEDDING_CONFIG_FILE).write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{EMBEDDING_CONFIG_FILE}: .*{problem}"):
        read_embedding_config(tmp_path)
    deepspeed = tmp_path / "zero2.json"
    deepspeed.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"deepspeed config .*zero2.json: .*{problem}"):
        read_deepspeed_config(str(deepspeed))


def test_a_jsonl_line_over_the_line_limit_is_refused_naming_file_line_and_limit(tmp_path, monkeypatch) -> None:
    """Hostile input gets bounded work: a line without a newline was read whole (and decoded and
    parsed, 3x its size) before anything looked at it; one over MAX_LINE_BYTES is refused by name.
    A line of exactly the limit (its newline not counted) is read."""
    import vis_embed.io as vio
    from vis_embed.errors import DataError

    monkeypatch.setattr(vio, "MAX_LINE_BYTES", 100, raising=False)
    fits = '{"text": "' + "a" * 88 + '"}'
    assert len(fits) == 100
    path = tmp_path / "rows.jsonl"
    path.write_text(f"{fits}\n{fits}", encoding="utf-8")
    assert [line for line, _row in vio.read_jsonl(path)] == [1, 2]
    path.write_text(f"{fits}\n" + '{"text": "' + "a" * 1000 + '"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"line longer than 100 bytes") as caught:
        list(vio.read_jsonl(path))
    assert (caught.value.path, caught.value.line) == (str(path), 2)


def test_a_line_over_the_limit_is_skipped_in_bounded_chunks_and_reading_goes_on(tmp_path, monkeypatch) -> None:
    """The skip-and-count readers (encode --on-error skip) get the long line as its DataError and
    the lines after it; the long line is never held whole (memory bounded by the chunk, not the line)."""
    import tracemalloc

    import vis_embed.io as vio
    from vis_embed.errors import DataError
    from vis_embed.model.runtime.encode_file import read_items

    monkeypatch.setattr(vio, "MAX_LINE_BYTES", 1000, raising=False)
    path = tmp_path / "items.jsonl"
    path.write_bytes(b'{"text": "a"}\n{"text": "' + b"b" * (8 << 20) + b'"}\n{"text": "c"}\n')
    tracemalloc.start()
    try:
        lines = list(vio.read_text_lines_or_errors(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # the old reader held the 8 MiB line as bytes and as text
    assert [number for number, _text in lines] == [1, 2, 3]
    assert isinstance(lines[1][1], DataError) and lines[2][1] == '{"text": "c"}\n'
    items, _ids, numbers, rejects = read_items(path, "skip")
    assert numbers == [1, 3] and [item["text"] for item in items] == ["a", "c"]
    assert rejects[0]["line"] == 2 and "line longer than 1,000 bytes" in rejects[0]["reason"]
