"""How the preparation workers' processes start (model/runtime/prepare_pool.py): ``forkserver``
where the platform has it (``spawn`` elsewhere), its server preloading the preparation code and
the processor's modules once, and started without the working directory on its path.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from importlib.machinery import PathFinder
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vis_embed.model.inputs.preparer import Preparer

# The processes that started their forkserver through start_forkserver (a forked child is another pid).
_FORKSERVER_STARTED_IN: set[int] = set()
# PYTHONSAFEPATH, which keeps the working directory off a new interpreter's path, is Python 3.11+.
_SAFE_PATH_SUPPORTED = hasattr(sys.flags, "safe_path")


def default_start_method() -> str:
    """forkserver where the platform has it, else spawn (never fork: module notes of prepare_pool)."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def _preload_modules(preparer: Preparer) -> list[str]:
    processor = preparer.processor
    parts = [processor, getattr(processor, "image_processor", None), getattr(processor, "tokenizer", None)]
    modules = dict.fromkeys(type(part).__module__ for part in parts if part is not None)
    return ["vis_embed.model.inputs.preparer", *modules]


def unshadowed(modules: list[str], folder: str) -> list[str]:
    """``modules`` less those a ``python -c`` started in ``folder`` would import from there (its
    top-level name is a package, module or namespace folder there: the import system's own rule,
    PathFinder on that one folder; a namespace folder is counted though a package further on
    would win: a preload left out costs each worker its own import, one shadowed costs correctness)."""
    return [name for name in modules if PathFinder.find_spec(name.partition(".")[0], [folder]) is None]


def start_forkserver(preparer: Preparer) -> None:
    """Start the process's forkserver, if it is not running: the server imports the preparation
    code and the processor's modules (transformers, torchvision: seconds) once, and workers fork
    from it.  Returns at once (the imports run in the server).  A caller about to start workers
    from another thread (``serve``) calls it first in its own: the environment is changed here.

    Without the current directory on the server's ``sys.path``: Python starts it with ``python
    -c``, which puts the working directory first, and it imports the preloaded modules before it
    takes the parent's path -- run from a folder holding another ``vis_embed`` (a checkout of
    another version), the workers prepared items with that copy while the command ran the
    installed one.  PYTHONSAFEPATH (Python 3.11+) keeps the directory off; it is set in the
    environment the server inherits, for its start only.  Where Python has no PYTHONSAFEPATH
    (3.10) the server preloads only what the directory does not shadow (:func:`unshadowed`); a
    worker takes the parent's path before it unpickles its work, so what it imports itself is right."""
    from multiprocessing import forkserver

    if default_start_method() != "forkserver":
        return
    preload = _preload_modules(preparer)
    if not _SAFE_PATH_SUPPORTED:
        preload = unshadowed(preload, os.getcwd())
    forkserver.set_forkserver_preload(preload)
    if os.getpid() in _FORKSERVER_STARTED_IN:  # running: the environment is left alone (any thread)
        forkserver.ensure_running()
        return
    previous = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        forkserver.ensure_running()
        _FORKSERVER_STARTED_IN.add(os.getpid())
    finally:
        if previous is None:
            del os.environ["PYTHONSAFEPATH"]
        else:
            os.environ["PYTHONSAFEPATH"] = previous
