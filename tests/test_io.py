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
