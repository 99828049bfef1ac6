"""The tree is clean under the project's ruff rules (``[tool.ruff]`` in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    """The ruff command: the one installed beside this Python (the dev extra), else on PATH."""
    beside = Path(sys.executable).with_name("ruff")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]' installs it)")
    return [found]


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
