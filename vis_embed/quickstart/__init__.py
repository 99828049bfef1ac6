"""The quickstart: render, train and evaluate end to end (:mod:`.pipeline`; the command is
:mod:`.cli`)."""

from __future__ import annotations

from vis_embed.quickstart.pipeline import StageClock, build_quickstart_checkpoint, recipe_path, run_quickstart

__all__ = ["StageClock", "build_quickstart_checkpoint", "recipe_path", "run_quickstart"]
