"""Plan, render and write the synthetic identity benchmark.

Generation has three phases so that it is deterministic *and* parallel:

1. **plan** (single process, seeded; :mod:`.planner` into a :mod:`.plan`): draw identities,
   contexts and edits, decide every image (a render spec), every data row and every metadata row;
2. **render** (worker pool; :mod:`.output`): each spec -> PNG bytes, a pure function of the spec;
3. **write** (:mod:`.output`): rows, metadata, ``train.yaml`` and ``benchmark.yaml`` into a
   temporary folder that replaces ``OUT_DIR`` at the end.

The worker count therefore never changes a byte of the output.  How much is rendered is
:mod:`.sizes`'.  This module runs the phases (:func:`generate`); the package ``__init__`` is the
API (with the sizes and the up-to-date check of :mod:`.output`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from vis_embed.prep.synth.modalities import DEFAULT_MODALITIES, check_modalities, plan_modalities
from vis_embed.prep.synth.output import check_target, write_benchmark
from vis_embed.prep.synth.planner import Planner
from vis_embed.prep.synth.sizes import SIZES, SynthSize
from vis_embed.errors import ConfigError

__all__ = ["checked_size", "generate"]

log = logging.getLogger(__name__)


def checked_size(seed: int, size: str | SynthSize) -> SynthSize:
    """The preset ``size`` names (a SynthSize as given); ConfigError for a seed or a size no benchmark
    is rendered with (asked before any work: the quickstart asks too, before it claims its folder)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:  # numpy's seeding takes no other
        raise ConfigError(f"--seed must be an integer >= 0, got {seed!r}")
    if not isinstance(size, str):
        return size
    if size not in SIZES:
        raise ConfigError(f"unknown size {size!r} (known: {', '.join(SIZES)})")
    return SIZES[size]


def generate(out_dir: str | Path, seed: int = 0, size: str | SynthSize = "small",
             workers: int | None = None, show_progress: bool = False,
             modalities: str | Sequence[str] = DEFAULT_MODALITIES) -> Path:
    """Render the synthetic identity benchmark into ``out_dir``; returns ``out_dir``.

    Writes ``train.yaml``, ``benchmark.yaml``, ``synth.json`` and the ``train/`` and ``eval/``
    folders.  The output is a function of ``seed`` and ``size`` only (byte-identical reruns,
    any ``workers``).  An existing output folder is replaced atomically.  ``modalities``
    (``image`` plus ``video`` / ``document``) adds the clip and page tasks of docs/synth.md.
    """
    started = time.perf_counter()
    size_name = size if isinstance(size, str) else "custom"
    size = checked_size(seed, size)
    out_dir = Path(out_dir)
    check_target(out_dir)
    modalities = check_modalities(modalities)
    workers = workers if workers is not None else min(4, os.cpu_count() or 1)
    planner = Planner(seed, size)
    plan = planner.build()
    settings = dataclasses.asdict(size)
    if settings["dense"] is None:  # absent, so the other presets' synth.json stays as it was
        del settings["dense"]
    settings.update(plan_modalities(planner, modalities, size_name))
    write_benchmark(out_dir, plan, size, {"seed": seed, "size": size_name, "settings": settings},
                    workers, show_progress)
    if show_progress:
        log.info("rendered %d images in %.1f s -> %s", len(plan.jobs), time.perf_counter() - started, out_dir)
    return out_dir
