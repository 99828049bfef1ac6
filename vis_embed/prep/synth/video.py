"""Synthetic video identity tasks (``vis-embed synth --modalities image,video``).

A *clip* is one object identity moving across ``frames`` frames: a folder of naturally
sorted PNGs (``video/clip_000000/frame_000.png`` ...) under ``eval/images``, which a manifest
item names as ``{"video": "video/clip_000000"}``.  Within a clip the background and the
lighting stay fixed and the object translates along one direction (left, right, up or down),
with a smooth change of scale and rotation; every frame is an ordinary
:func:`vis_embed.prep.synth.render.compose` scene, so it re-renders bit-exactly from its metadata row.
Clips of one identity differ in direction, path, background and lighting; the identity's
rendering (shape, colours, pattern, texture) is the same in all of them.

Two evaluation datasets over the same clips:

* ``SynthVideoRet`` (meta-task ``V-RET``, ``gallery`` layout): every clip queries all others;
  the matches are the other clips of its identity;
* ``SynthVideoCls`` (``V-CLS``, ``candidates`` layout, the query's own list): clip -> the class
  "a <shape> moving <direction>", against the other directions of the same shape and other
  shapes moving the same way -- the order of the frames is part of the answer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from vis_embed.prep.synth.planner_api import SynthPlanner, add_eval_entry, schedule
from vis_embed.prep.synth.palette import SHAPES
from vis_embed.prep.synth.sampling import Params, sample_background, sample_lighting, single_spec, stream_rng

CLIP_SET = "video"
# Unit steps of each motion in image coordinates (y grows downwards) and its words in a class name.
MOTIONS: dict[str, tuple[int, int]] = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
MOTION_WORDS: dict[str, str] = {"left": "to the left", "right": "to the right", "up": "up", "down": "down"}
INSTRUCTIONS = {
    "ret": ("Find a video that shows the same object as the given video.", "Represent the given video."),
    "cls": ("Recognise the object in the given video and the way it moves.", "Represent the given class name."),
}


@dataclass(frozen=True)
class VideoSize:
    identities: int             # each with clips_per_identity clips
    clips_per_identity: int     # <= 4: the clips of one identity move in different directions
    frames: int
    candidates_per_query: int   # classification: the true class, the other 3 motions, other shapes

    def __post_init__(self) -> None:
        if not 2 <= self.clips_per_identity <= len(MOTIONS) or self.frames < 2:
            raise ValueError(f"a video size needs 2-{len(MOTIONS)} clips per identity and >= 2 frames: {self}")


VIDEO_SIZES: dict[str, VideoSize] = {
    "tiny": VideoSize(identities=6, clips_per_identity=3, frames=8, candidates_per_query=6),
    "small": VideoSize(identities=12, clips_per_identity=3, frames=8, candidates_per_query=8),
    "full": VideoSize(identities=60, clips_per_identity=4, frames=8, candidates_per_query=8),
}


def sample_path(rng: np.random.Generator, direction: str) -> Params:
    """Start and end of a clip's motion: the centre travels 26-36% of the image side along
    ``direction`` (drifting a little across it), the scale changes by up to 20% and the
    object turns by up to 45 degrees.  The ranges keep most of the object in the frame and
    the centroid's step per frame larger than what the rotation moves it."""
    main = np.array(MOTIONS[direction], dtype=float)
    across = np.abs(main[::-1])
    travel = float(rng.uniform(0.26, 0.36))
    offset, drift = float(rng.uniform(-0.08, 0.08)), float(rng.uniform(-0.05, 0.05))
    start = 0.5 - main * travel / 2 + across * offset
    end = 0.5 + main * travel / 2 + across * (offset + drift)
    scale = float(rng.uniform(0.32, 0.42))
    rotation = float(rng.uniform(-180, 180))
    return {
        "direction": direction,
        "start": [round(float(v), 4) for v in start], "end": [round(float(v), 4) for v in end],
        "scale": [round(scale, 4), round(scale * float(rng.uniform(0.85, 1.2)), 4)],
        "rotation": [round(rotation, 2), round(rotation + float(rng.uniform(-45, 45)), 2)],
    }


def frame_placement(path: Params, frame: int, frames: int) -> Params:
    """The placement at ``frame`` of ``frames``: linear in time between the path's ends."""
    t = frame / (frames - 1)

    def lerp(a: float, b: float, digits: int) -> float:
        return round(a + (b - a) * t, digits)

    return {
        "center": [lerp(path["start"][0], path["end"][0], 4), lerp(path["start"][1], path["end"][1], 4)],
        "scale": lerp(path["scale"][0], path["scale"][1], 4),
        "rotation": lerp(path["rotation"][0], path["rotation"][1], 2),
        "flip": False,
    }


def class_name(shape: str, direction: str) -> str:
    return f"a {shape} moving {MOTION_WORDS[direction]}"


def plan_clip(planner: SynthPlanner, rng: np.random.Generator, number: int, name: str, params: Params,
              direction: str, frames: int) -> str:
    """Schedule one clip's frames; returns the clip folder relative to ``eval/images``."""
    clip = f"{CLIP_SET}/clip_{number:06d}"
    background = sample_background(rng, avoid=(params["primary"],))
    lighting = sample_lighting(rng)
    path = sample_path(rng, direction)
    for frame in range(frames):
        context = {"background": background, "placement": frame_placement(path, frame, frames),
                   "lighting": lighting, "occluder": None}
        schedule(planner, f"{clip}/frame_{frame:03d}.png", single_spec("object", params, context), {
            "clip": clip, "frame": frame, "identity": name, "family": "object", "identity_params": params,
            "context": context, "motion": path}, CLIP_SET)
    return clip


def _class_candidates(rng: np.random.Generator, shape: str, direction: str, count: int) -> list[dict[str, str]]:
    """The true class first, then the same shape moving otherwise, then other shapes moving the same way."""
    other_motions = [class_name(shape, d) for d in MOTIONS if d != direction]
    other_shapes = [class_name(SHAPES[int(k)], direction) for k in rng.permutation(len(SHAPES))
                    if SHAPES[int(k)] != shape]
    names = [class_name(shape, direction), *other_motions, *other_shapes][:count]
    return [{"text": text} for text in names]


def plan_video(planner: SynthPlanner, size: VideoSize) -> dict[str, Any]:
    """Plan the clips and the two video datasets; returns the settings for ``synth.json``."""
    rng = stream_rng(planner.seed, "eval/video/clips")
    identities = planner.identities("eval/video", "object", "obj", size.identities, min_differences=2)
    ret_rows: list[dict[str, Any]] = []
    cls_rows: list[dict[str, Any]] = []
    for name, params in identities:
        directions = [list(MOTIONS)[int(k)] for k in rng.permutation(len(MOTIONS))[: size.clips_per_identity]]
        for direction in directions:
            number = len(ret_rows)
            clip = plan_clip(planner, rng, number, name, params, direction, size.frames)
            ret_rows.append({"id": f"vret-{number:06d}", "video": clip, "identity": name})
            cls_rows.append({"id": f"vcls-{number:06d}", "query": {"video": clip},
                             "candidates": _class_candidates(rng, params["shape"], direction,
                                                             size.candidates_per_query)})
    tables = planner.plan.tables
    # As for the image galleries: the clips query each other (the evaluator skips a query's own row).
    tables["eval/video_ret_queries.jsonl"] = tables["eval/video_ret_gallery.jsonl"] = ret_rows
    tables["eval/video_cls.jsonl"] = cls_rows
    add_eval_entry(planner, "SynthVideoRet", "V-RET", "gallery", INSTRUCTIONS["ret"],
                   queries="eval/video_ret_queries.jsonl", gallery="eval/video_ret_gallery.jsonl")
    add_eval_entry(planner, "SynthVideoCls", "V-CLS", "candidates", INSTRUCTIONS["cls"], path="eval/video_cls.jsonl")
    return {**dataclasses.asdict(size), "clips": len(ret_rows)}
