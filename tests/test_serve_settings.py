"""``vis-embed serve``'s flags are generated from ServerSettings (pydantic): one set of defaults,
bounds checked by the model and reported naming the flag, the derived fields as before."""

from __future__ import annotations

import argparse

import pytest

from vis_embed.cli import main
from vis_embed.errors import ConfigError, DataError
from vis_embed.serving import cli as serve_cli
from vis_embed.serving.hosts import default_allowed_hosts
from vis_embed.serving.settings import ServerSettings

# flag -> the ServerSettings field it sets (a contract: tests and docs use these flags)
SERVE_SETTING_FLAGS = {
    "--host": "host", "--port": "port", "--max-batch-size": "max_batch_size", "--max-wait-ms": "max_wait_ms",
    "--max-queue": "max_queue", "--max-request-bytes": "max_request_bytes", "--max-items": "max_items",
    "--url-timeout": "url_timeout_s", "--allow-local-files": "allow_local_files", "--api-key": "api_key",
    "--allowed-hosts": "allowed_hosts", "--allow-urls": "allow_urls", "--allow-private-urls": "allow_private_urls",
    "--url-workers": "url_workers", "--max-input-tokens": "max_input_tokens", "--long-input": "long_input",
    "--max-request-pixels": "max_request_pixels", "--request-timeout": "request_timeout_s",
    "--header-timeout": "header_timeout_s", "--keep-alive-timeout": "keep_alive_timeout_s",
    "--max-connections": "max_connections", "--max-header-bytes": "max_header_bytes",
    "--max-request-tokens": "max_request_tokens", "--max-pixels-in-flight": "max_pixels_in_flight",
    "--decode-workers": "decode_workers", "--decode-timeout": "decode_timeout_s", "--dim": "dim",
}


def _parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve_cli.add_arguments(parser)
    return parser.parse_args(["--model", "m", *flags])


def test_serve_flags_are_generated_from_the_settings_with_their_defaults() -> None:
    parser = argparse.ArgumentParser()
    serve_cli.add_arguments(parser)
    flags = {flag: action.dest for action in parser._actions for flag in action.option_strings}
    assert {flag: flags.get(flag) for flag in SERVE_SETTING_FLAGS} == SERVE_SETTING_FLAGS
    assert serve_cli.server_settings(_parse(), environ={}) == ServerSettings(
        model_name="m", allowed_hosts=default_allowed_hosts("127.0.0.1"))  # one set of defaults


def test_serve_flags_reach_their_fields() -> None:
    given = serve_cli.server_settings(_parse(
        "--served-model-name", "served", "--url-timeout", "2.5", "--header-timeout", "3", "--port", "9000",
        "--long-input", "truncate", "--allow-urls", "--allow-private-urls", "--allowed-hosts", "a.example, b",
        "--dim", "8", "--max-connections", "7"), environ={})
    assert (given.model_name, given.url_timeout_s, given.header_timeout_s, given.port, given.long_input) == \
        ("served", 2.5, 3.0, 9000, "truncate")
    assert (given.allow_urls, given.allow_private_urls, given.allowed_hosts, given.dim, given.max_connections) == \
        (True, True, ("a.example", "b"), 8, 7)


def test_the_derived_fields_keep_their_rules() -> None:
    assert serve_cli.server_settings(_parse(), environ={"VIS_EMBED_API_KEY": "env"}).api_key == "env"
    assert serve_cli.server_settings(_parse("--api-key", "flag"), environ={"VIS_EMBED_API_KEY": "env"}).api_key == \
        "flag"
    assert serve_cli.server_settings(_parse(), environ={"VIS_EMBED_API_KEY": ""}).api_key is None
    assert serve_cli.server_settings(_parse("--host", "0.0.0.0"), environ={}).allowed_hosts is None  # any
    assert serve_cli.server_settings(_parse("--allowed-hosts", "a,*"), environ={}).allowed_hosts is None
    with pytest.raises(ConfigError, match="--allow-private-urls widens --allow-urls"):
        serve_cli.server_settings(_parse("--allow-private-urls"), environ={})


@pytest.mark.parametrize("flag", ["--port", "--max-batch-size", "--max-queue", "--max-request-bytes", "--max-items",
                                  "--url-workers", "--max-input-tokens", "--max-request-pixels", "--max-connections",
                                  "--max-header-bytes", "--max-request-tokens", "--max-pixels-in-flight",
                                  "--decode-workers", "--dim", "--url-timeout", "--request-timeout",
                                  "--header-timeout", "--keep-alive-timeout", "--decode-timeout"])
def test_a_bound_is_checked_by_the_settings_naming_the_flag(flag: str) -> None:
    with pytest.raises(ConfigError, match=f"field '{flag}'"):
        serve_cli.server_settings(_parse(flag, "0"), environ={})


def test_the_python_api_checks_the_same_bounds_naming_the_field() -> None:
    with pytest.raises(DataError) as caught:
        ServerSettings(model_name="m", max_wait_ms=-1)
    assert caught.value.field == "max_wait_ms"
    with pytest.raises(DataError) as caught:
        ServerSettings(model_name="m", long_input="cut")
    assert caught.value.field == "long_input"
    with pytest.raises(DataError, match="unknown key"):
        ServerSettings(model_name="m", max_batch=3)


def test_a_bad_serve_flag_is_refused_before_the_model_loads(capsys, monkeypatch) -> None:
    monkeypatch.setattr(serve_cli, "tune_malloc", lambda: None)  # leave this process's allocator alone
    code = main(["serve", "--model", "/nonexistent/model", "--max-batch-size", "0"])
    assert code == 2
    assert "field '--max-batch-size'" in capsys.readouterr().err  # not the missing model
