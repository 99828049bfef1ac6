"""What the opt-in modality planners (:mod:`vis_embed.prep.synth.video`, :mod:`vis_embed.prep.synth.documents`)
use of the image planner, and the few steps they share.

Kept apart from :mod:`vis_embed.prep.synth.build` so those modules need not import it (build
imports them through :mod:`vis_embed.prep.synth.modalities`).
"""

from __future__ import annotations

from typing import Any, Protocol

from vis_embed.prep.synth.sampling import Params

# Where the evaluation files and images live, relative to the output folder (as for the image tasks).
EVAL_IMAGE_ROOT = "eval/images"


class SynthPlanner(Protocol):
    """The parts of :class:`vis_embed.prep.synth.planner.Planner` the modality planners use."""

    seed: int
    size: Any   # build.SynthSize (its image_size)
    plan: Any   # build.Plan: jobs, tables, meta, manifest_entries

    def identities(self, stream: str, family: str, prefix: str, count: int,
                   min_differences: int = 0) -> list[tuple[str, Params]]: ...


def schedule(planner: SynthPlanner, image: str, spec: Params, meta: dict[str, Any], meta_set: str) -> None:
    """Render ``spec`` to ``eval/images/<image>`` and add its metadata row to ``eval/meta/<meta_set>.jsonl``."""
    planner.plan.jobs.append((f"{EVAL_IMAGE_ROOT}/{image}", spec, None))
    planner.plan.meta.setdefault(f"eval/meta/{meta_set}.jsonl", []).append({"image": image, **meta})


def add_eval_entry(planner: SynthPlanner, name: str, meta_task: str, layout: str,
                   instructions: tuple[str, str], **files: str) -> None:
    """A benchmark-manifest entry over ``eval/images``: ``benchmark: MMEB-V2`` (the meta-tasks are
    MMEB-V2's) and no ``split`` (MMEB-V2's tasks have none, so these never join the manifest's
    IND / OOD means of the image identity tasks)."""
    query_instruction, candidate_instruction = instructions
    planner.plan.manifest_entries.append({
        "name": name, "benchmark": "MMEB-V2", "meta_task": meta_task, "layout": layout, **files,
        "image_root": EVAL_IMAGE_ROOT, "query_instruction": query_instruction,
        "candidate_instruction": candidate_instruction})
