"""The synthetic identity benchmark (``vis-embed synth OUT_DIR``, :mod:`vis_embed.prep.synth.cli`).

Procedurally rendered objects whose *identity* is intrinsic (shape, colour pattern, texture;
clothes for persons; body and paint for vehicles) and whose *context* varies (background,
position, scale, rotation, lighting, occlusion).  One command writes identity-disjoint
training data (``OUT/train.yaml`` + ``OUT/train/``) and a benchmark manifest
(``OUT/benchmark.yaml`` + ``OUT/eval/``) covering the four MVEB meta-tasks (ID-Rec, Re-ID,
ID-Grd, ID-Edit), near-identity look-alikes (NearID) and two MMEB-like semantic tasks (Cls,
Ret).  See docs/synth.md.

>>> from vis_embed.prep.synth import generate
>>> generate("data/synth", seed=0, size="small")  # doctest: +SKIP
"""

from __future__ import annotations

from vis_embed.prep.synth.build import checked_size, generate
from vis_embed.prep.synth.output import GENERATOR_VERSION, is_current
from vis_embed.prep.synth.sizes import SIZES, SynthSize

__all__ = ["GENERATOR_VERSION", "SIZES", "SynthSize", "checked_size", "generate", "is_current"]
