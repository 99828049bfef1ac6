"""The tree is clean under the project's ruff rules (``[tool.ruff]`` in pyproject.toml) and needs no Python
newer than its requires-python (vermin)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _dev_tool(name: str) -> list[str]:
    """A command of the dev extra: the one installed beside this Python, else on PATH (skips without)."""
    beside = Path(sys.executable).with_name(name)
    if beside.is_file():
        return [str(beside)]
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]' installs it)")
    return [found]


def _ruff() -> list[str]:
    return _dev_tool("ruff")


def test_ruff_finds_nothing() -> None:
    done = subprocess.run([*_ruff(), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_reads_the_project_rules(tmp_path: Path) -> None:
    """Guards the check above against an empty rule set: a line over 120 characters and an
    unused import are flagged under the project's configuration."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "bad.py").write_text("import os\n\nx = '" + "a" * 130 + "'\n", encoding="utf-8")
    done = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise", "."], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "E501" in done.stdout and "F401" in done.stdout


# Python code of the project: the library and everything shipped beside it that a user runs.
CODE_FOLDERS = ("vis_embed", "tests", "benchmarks", "eval")


def _vermin(target: str, *paths: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """vermin (the dev extra) finds the oldest Python each line needs, standard-library modules
    and members included, which ruff's target-version does not check.  ``--exclude long``: it
    reads torch's ``.long()`` as Python 2's ``long``.  A line may opt out with ``# novermin``
    (a version-guarded branch)."""
    return subprocess.run([*_dev_tool("vermin"), "-q", "--no-tips", "--violations", "--eval-annotations",
                           "--exclude", "long", f"-t={target}-", *map(str, paths)],
                          cwd=cwd, capture_output=True, text=True, timeout=600)


def _oldest_python() -> str:
    """The oldest Python pyproject.toml's requires-python admits (">=3.11" -> "3.11")."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'^requires-python\s*=\s*">=\s*(3\.\d+)"', text, flags=re.MULTILINE)
    assert found, "pyproject.toml's requires-python is not of the form \">=3.N\""
    return found.group(1)


def test_the_code_runs_on_the_oldest_python_it_claims() -> None:
    done = _vermin(_oldest_python(), *CODE_FOLDERS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_vermin_flags_what_the_oldest_python_lacks(tmp_path: Path) -> None:
    """Guards the check above: a 3.11 module and a 3.11 member are flagged at 3.10; the same
    lines behind ``# novermin`` are not."""
    newer = "import asyncio\nimport tomllib\n\nasync def f():\n    async with asyncio.timeout(1):\n        pass\n"
    (tmp_path / "newer.py").write_text(newer, encoding="utf-8")
    flagged = _vermin("3.10", "newer.py", cwd=tmp_path)
    assert flagged.returncode == 1 and "tomllib" in flagged.stdout and "asyncio.timeout" in flagged.stdout
    (tmp_path / "newer.py").write_text(newer.replace("tomllib\n", "tomllib  # novermin\n")
                                       .replace("(1):", "(1):  # novermin"), encoding="utf-8")
    assert _vermin("3.10", "newer.py", cwd=tmp_path).returncode == 0
