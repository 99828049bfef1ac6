"""The one loader of the study scripts in ``eval/`` (not a package: they are run as scripts)
for the tests that check them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EVAL_DIR = Path(__file__).resolve().parents[1] / "eval"


def load_eval_script(name: str) -> ModuleType:
    """``eval/<name>.py`` as module ``name`` (registered in ``sys.modules``: dataclasses look
    their module up while a class is built; ``eval/`` on the path: scripts import each other)."""
    if str(EVAL_DIR) not in sys.path:
        sys.path.insert(0, str(EVAL_DIR))
    spec = importlib.util.spec_from_file_location(name, EVAL_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
