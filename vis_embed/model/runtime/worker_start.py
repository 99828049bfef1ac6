"""How the preparation workers' processes start (model/runtime/prepare_pool.py): ``forkserver``
where the platform has it (``spawn`` elsewhere), its server preloading the preparation code and
the processor's modules once, and started without the working directory on its path.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vis_embed.model.inputs.preparer import Preparer

# The processes that started their forkserver through start_forkserver (a forked child is another pid).
_FORKSERVER_STARTED_IN: set[int] = set()


def default_start_method() -> str:
    """forkserver where the platform has it, else spawn (never fork: module notes of prepare_pool)."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def _preload_modules(preparer: Preparer) -> list[str]:
    processor = preparer.processor
    parts = [processor, getattr(processor, "image_processor", None), getattr(processor, "tokenizer", None)]
    modules = dict.fromkeys(type(part).__module__ for part in parts if part is not None)
    return ["vis_embed.model.inputs.preparer", *modules]


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
    environment the server inherits, for its start only."""
    from multiprocessing import forkserver

    if default_start_method() != "forkserver":
        return
    forkserver.set_forkserver_preload(_preload_modules(preparer))
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
