"""Where a result came from: code version, command line, machine, library versions, date.

Every experiment result the project commits (docs/results/, docs/experiments.md) carries
:func:`provenance`, so a reader can check out the code that made a number and see on what
machine.  The code version is ``git rev-parse HEAD`` of the checkout the package is imported
from, with ``dirty`` = uncommitted changes to tracked files; outside a checkout (an installed
wheel) it is the package version and ``commit`` is None.  No torch import: library versions
come from the installed distributions' metadata.

``python -m vis_embed.provenance`` prints it as JSON.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

# CPU features that change what runs fast (oneDNN / GEMM kernels) and, through them, float rounding.
CPU_FEATURES = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8")
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def code_version(root: Path = PACKAGE_ROOT) -> dict[str, Any]:
    """``{"commit", "dirty", "version"}``: the git commit of ``root`` (None outside a checkout)."""
    try:  # the installed distribution's version (importing vis_embed here would point upwards)
        __version__ = metadata.version("vis_embed")
    except metadata.PackageNotFoundError:
        __version__ = None
    commit = _git(root, "rev-parse", "HEAD")
    dirty = None
    if commit is not None:
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
        dirty = bool(status) if status is not None else None
    return {"commit": commit, "dirty": dirty, "version": __version__}


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


CPUINFO = Path("/proc/cpuinfo")


def cpu_fields(cpuinfo: Path = CPUINFO) -> dict[str, str]:
    """The first processor's ``key: value`` lines of ``cpuinfo`` (Linux; they stand for all);
    {} where it cannot be read.  The one /proc/cpuinfo reader (provenance, the index choice)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags(cpuinfo: Path = CPUINFO) -> set[str]:
    """The CPU feature flags (``flags`` on x86, ``Features`` on ARM); empty where unknown."""
    fields = cpu_fields(cpuinfo)
    return set((fields.get("flags") or fields.get("Features") or "").split())


def machine(cpuinfo: Path = CPUINFO) -> dict[str, Any]:
    """CPU model, the :data:`CPU_FEATURES` it has, core count, OS and GPU (when torch sees one)."""
    fields = cpu_fields(cpuinfo)
    flags = cpu_flags(cpuinfo)
    return {"cpu": fields.get("model name") or platform.processor() or platform.machine(),
            "cpu_features": [f for f in CPU_FEATURES if f in flags],
            "cores": os.cpu_count(), "platform": platform.platform(), "gpu": _gpu_name()}


def _gpu_name() -> str | None:
    torch = sys.modules.get("torch")  # only when the caller already imported it (no slow import here)
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0)


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def provenance(argv: Sequence[str] | None = None, command: str | None = None,
               root: Path = PACKAGE_ROOT) -> dict[str, Any]:
    """The provenance record: code version, ``command`` (default: ``argv`` / ``sys.argv``
    joined as a shell line), machine, python/torch/transformers/peft versions, UTC date."""
    if command is None:
        command = shlex.join(list(sys.argv if argv is None else argv))
    return {
        **code_version(root),
        "command": command,
        "machine": machine(),
        "python": platform.python_version(),
        "torch": _version("torch"), "transformers": _version("transformers"), "peft": _version("peft"),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def describe(record: dict[str, Any]) -> str:
    """One line for a doc: ``commit abc1234 (dirty), CPU (features, N cores), date``."""
    commit = (record.get("commit") or "")[:10] or f"version {record.get('version')}"
    if record.get("dirty"):
        commit += " + uncommitted changes"
    host = record.get("machine") or {}
    features = "/".join(host.get("cpu_features") or []) or "no AVX2"
    gpu = f", {host['gpu']}" if host.get("gpu") else ""
    return f"commit {commit}; {host.get('cpu')} ({features}, {host.get('cores')} cores{gpu}); {record.get('date')}"

