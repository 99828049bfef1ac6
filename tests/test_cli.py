"""The ``vis-embed`` dispatcher: every command's ``--help`` is cheap, ``--version`` answers."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

import pytest

from vis_embed import __version__
from vis_embed.cli import COMMANDS, build_parser, load_command, main

# Run in a fresh interpreter: this test process has long imported torch.
_PROBE = textwrap.dedent("""
    import contextlib, io, json, sys
    from vis_embed.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main([sys.argv[1], "--help"])
        except SystemExit as exit:
            code = exit.code
    heavy = sorted(name for name in ("torch", "transformers", "peft", "faiss") if name in sys.modules)
    print(json.dumps({"code": code, "heavy": heavy, "help": out.getvalue()}))
""")


def _help_in_fresh_process(command: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, command], capture_output=True, text=True, timeout=120,
                          check=True)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_command_help_does_not_import_torch(command: str) -> None:
    probe = _help_in_fresh_process(command)
    assert probe["code"] == 0
    assert probe["heavy"] == [], f"vis-embed {command} --help imported {probe['heavy']}"
    assert f"usage: vis-embed {command}" in probe["help"]


def _undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """Options and positionals of ``parser`` and its sub-parsers that have no help text."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                missing += [f"{name} {flag}" for flag in _undocumented(child)]
        elif not action.help and not isinstance(action, argparse._HelpAction):
            missing.append("/".join(action.option_strings) or action.dest)
    return missing


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_has_help(command: str) -> None:
    add_arguments, _run = load_command(command)
    parser = argparse.ArgumentParser(prog=f"vis-embed {command}")
    add_arguments(parser)
    assert _undocumented(parser) == [], f"vis-embed {command}: options without help"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out.strip() == f"vis-embed {__version__}"


def test_version_is_the_installed_distribution_version() -> None:
    from importlib.metadata import version

    assert version("vis_embed") == __version__


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["no-such-command"])
    assert exit.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_top_level_help_lists_every_command() -> None:
    help_text = build_parser().format_help()
    assert all(name in help_text for name in COMMANDS)


class _Exited(Exception):
    def __init__(self, how: str, code: int) -> None:
        super().__init__(how, code)
        self.how, self.code = how, code


def _run_as_program(monkeypatch: pytest.MonkeyPatch, world_size: str | None, group_alive: bool) -> _Exited:
    import torch.distributed as dist

    import vis_embed.cli as cli

    def hard_exit(code: int) -> None:
        raise _Exited("os._exit", code)

    monkeypatch.setattr(cli.os, "_exit", hard_exit)
    monkeypatch.setattr(dist, "is_initialized", lambda: group_alive)
    if world_size is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", world_size)
    argv = ["report", "--no-reference"]  # a command that fails fast: exit code 2
    try:
        cli.run_as_program(argv)
    except SystemExit as exc:
        return _Exited("sys.exit", int(exc.code))
    except _Exited as exc:
        return exc
    raise AssertionError("run_as_program returned")


@pytest.mark.parametrize(("world_size", "group_alive", "how"), [
    (None, False, "sys.exit"),      # one process: an ordinary exit
    ("2", True, "sys.exit"),        # under torchrun, process group still up (train): ordinary exit
    ("2", False, "os._exit"),       # under torchrun, the command left the group (encode, eval)
])
def test_a_finished_torchrun_rank_skips_interpreter_teardown(monkeypatch, capsys, world_size, group_alive, how) -> None:
    exited = _run_as_program(monkeypatch, world_size, group_alive)
    assert (exited.how, exited.code) == (how, 2)
    assert "nothing to report" in capsys.readouterr().err  # the output was flushed first


def test_serve_without_the_serve_extra_names_it_before_loading_anything(monkeypatch, capsys) -> None:
    """fastapi, uvicorn and prometheus_client are the [serve] extra, not core dependencies: the
    command without them says which extra to install (exit 2), before any model or index loads."""
    from vis_embed import integrations

    installed = integrations.find_spec
    monkeypatch.setattr(integrations, "find_spec", lambda module: None if module == "uvicorn" else installed(module))
    assert main(["serve", "--model", "no/such-model"]) == 2
    assert "vis-embed serve needs uvicorn: pip install 'vis_embed[serve]'" in capsys.readouterr().err
