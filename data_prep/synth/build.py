"""Plan, render and write the synthetic identity benchmark.

Generation has three phases so that it is deterministic *and* parallel:

1. **plan** (single process, seeded): draw identities, contexts and edits, decide every
   image (a render spec), every data row and every metadata row;
2. **render** (worker pool): each spec -> PNG bytes, a pure function of the spec;
3. **write**: rows, metadata, ``train.yaml`` and ``benchmark.yaml`` into a temporary folder
   that replaces ``OUT_DIR`` at the end.

The worker count therefore never changes a byte of the output.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from data_prep.synth import render
from data_prep.synth.dense import DenseLayout, plan_dense_training
from data_prep.synth.modalities import DEFAULT_MODALITIES, check_modalities, plan_modalities, render_special
from data_prep.synth.sampling import (
    Params, context_meta, stream_rng, apply_edit, contrary_edit, make_lookalike, sample_context, sample_edit,
    sample_edit_base, sample_identities, sample_lighting, sample_background,
    sample_scene_placements, single_spec,
)
from vis_embed.errors import ConfigError
from vis_embed.io import atomic_directory

log = logging.getLogger(__name__)

# The benchmark's version: written to synth.json and benchmark.yaml (`version`), which the
# evaluation puts in every dataset's result key and result, so results of two versions are never
# mixed.  Bump when what an evaluation set measures changes.
# 2: SynthEdit's candidates no longer hold the query's own (unedited) source image.
GENERATOR_VERSION = 2
MARKER_FILE = "synth.json"


@dataclass(frozen=True)
class SynthSize:
    """How much to render.  Counts are identities unless they say images or queries."""

    image_size: int
    rec_train_identities: int
    train_images_per_identity: int
    lookalike_fraction: float          # share of train anchors that get a near-identity twin
    reid_train_identities: int
    grd_train_targets: int
    edit_train_identities: int
    cls_train_images: int
    ret_train_images: int
    rec_eval_identities: int
    reid_eval_identities: int
    vehicle_eval_identities: int
    eval_images_per_identity: int
    grd_eval_queries: int
    edit_eval_queries: int
    cls_eval_images: int
    ret_eval_queries: int
    nearid_eval_queries: int
    candidates_per_query: int = 8
    # "fixed": every train identity (rec, reid) has train_images_per_identity images.
    # "skewed": most have 2, a few have 20-60 (about the same image count in total) -- the
    # heavy identity skew of real identity data, where naive batches repeat big identities.
    train_identity_sizes: str = "fixed"
    # Set: the training split is the dense-identity layout instead (data_prep/synth/dense.py);
    # the train counts above are then unused.
    dense: DenseLayout | None = None


SIZES: dict[str, SynthSize] = {
    # For unit tests and CI: seconds, not a benchmark.
    "tiny": SynthSize(
        image_size=64, rec_train_identities=24, train_images_per_identity=3, lookalike_fraction=0.25,
        reid_train_identities=12, grd_train_targets=12, edit_train_identities=12,
        cls_train_images=20, ret_train_images=20, rec_eval_identities=10, reid_eval_identities=8,
        vehicle_eval_identities=8, eval_images_per_identity=3, grd_eval_queries=10,
        edit_eval_queries=10, cls_eval_images=12, ret_eval_queries=12, nearid_eval_queries=8,
        candidates_per_query=6),
    # The quickstart's benchmark: 112 px (16 visual tokens on Qwen-VL), ~1.2K train identities
    # (fewer and a tiny model memorises them), eval sets of a few hundred images.
    "small": SynthSize(
        image_size=112, rec_train_identities=1200, train_images_per_identity=3, lookalike_fraction=0.25,
        reid_train_identities=300, grd_train_targets=300, edit_train_identities=300,
        cls_train_images=400, ret_train_images=400, rec_eval_identities=80, reid_eval_identities=60,
        vehicle_eval_identities=60, eval_images_per_identity=3, grd_eval_queries=80,
        edit_eval_queries=80, cls_eval_images=100, ret_eval_queries=100, nearid_eval_queries=60),
    # The paper's identity scale (7.5K identities x <= 4 images) at 224 px.
    "full": SynthSize(
        image_size=224, rec_train_identities=7500, train_images_per_identity=4, lookalike_fraction=0.25,
        reid_train_identities=2000, grd_train_targets=2000, edit_train_identities=2000,
        cls_train_images=3000, ret_train_images=3000, rec_eval_identities=300,
        reid_eval_identities=200, vehicle_eval_identities=200, eval_images_per_identity=4,
        grd_eval_queries=300, edit_eval_queries=300, cls_eval_images=300, ret_eval_queries=300,
        nearid_eval_queries=200),
}
# The sampling ablation's skewed-identity variant: "small" with skewed train identity sizes.
SIZES["small-skewed"] = dataclasses.replace(SIZES["small"], train_identity_sizes="skewed")
# The sampling ablation's dense-identity variant (docs/ablation_dense.md): `small`'s evaluation,
# and training data in 14 identity sub-datasets of 24 identities (6 look-alike families of 4)
# x 10 images -- few identities, many instances, so a naive 16-member slot repeats an identity
# for ~24% of its members.
SIZES["small-dense"] = dataclasses.replace(
    SIZES["small"], rec_train_identities=0, reid_train_identities=0, grd_train_targets=0,
    edit_train_identities=0, cls_train_images=0, ret_train_images=0, lookalike_fraction=0.0,
    train_images_per_identity=10,
    dense=DenseLayout(object_subdatasets=10, person_subdatasets=4, families=6, family_size=4,
                      images_per_identity=10))

SKEWED_BIG_FRACTION = 0.02          # share of identities that are "big"
SKEWED_BIG_SIZES = (20, 60)         # their image counts, uniform, inclusive
SKEWED_SMALL_SIZE = 2               # everyone else


def train_identity_sizes(rng: np.random.Generator, count: int, size: SynthSize) -> list[int]:
    """Images per train identity (see ``SynthSize.train_identity_sizes``)."""
    if size.train_identity_sizes == "fixed":
        return [size.train_images_per_identity] * count
    if size.train_identity_sizes != "skewed":
        raise ConfigError(f"unknown train_identity_sizes {size.train_identity_sizes!r} (fixed | skewed)")
    big = rng.random(count) < SKEWED_BIG_FRACTION
    sizes = np.where(big, rng.integers(SKEWED_BIG_SIZES[0], SKEWED_BIG_SIZES[1] + 1, count), SKEWED_SMALL_SIZE)
    return sizes.tolist()

IMAGE_QUERY = "Represent the given image."
TEXT_CANDIDATE = "Represent the given label."
INSTRUCTIONS: dict[str, tuple[str, str]] = {
    "rec": ("Find the same object as the one in the given image.", IMAGE_QUERY),
    "reid": ("Find the same person as the one in the given image.", IMAGE_QUERY),
    "vehicle": ("Find the same vehicle as the one in the given image.", IMAGE_QUERY),
    "grd": ("Find the scene that contains the object in the given image.", IMAGE_QUERY),
    "edit": ("Apply the edit instruction to the given image and find the edited image.", IMAGE_QUERY),
    "cls_shape": ("Classify the shape of the object in the given image.", TEXT_CANDIDATE),
    "cls_colour": ("Classify the main colour of the object in the given image.", TEXT_CANDIDATE),
    "ret": ("Find an image that matches the given caption.", IMAGE_QUERY),
}


# ---------------------------------------------------------------------------------------------
# Plan
# ---------------------------------------------------------------------------------------------

# Grounding queries are crops with this much context around the object (train and eval alike).
CROP_MARGIN = 0.15


@dataclass
class BoxRef:
    """Placeholder for the pixel bbox of object ``index`` in image ``path`` (known after render).

    With ``margin`` set, it stands for the square crop window around that bbox instead.
    """

    path: str
    index: int
    margin: float | None = None


@dataclass
class Plan:
    """Everything to render and write, relative to the output folder."""

    jobs: list[tuple[str, Params, Params | None]] = dataclasses.field(default_factory=list)
    tables: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    meta: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    train_entries: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    manifest_entries: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    _counters: dict[str, int] = dataclasses.field(default_factory=dict)

    def image(self, split: str, image_set: str, spec: Params, meta: dict[str, Any],
              crop: Params | None = None) -> str:
        """Schedule one image; returns its path relative to ``<split>/images``."""
        number = self._counters.get(f"{split}/{image_set}", 0)
        self._counters[f"{split}/{image_set}"] = number + 1
        relative = f"{image_set}/{number:06d}.png"
        self.jobs.append((f"{split}/images/{relative}", spec, crop))
        self.meta.setdefault(f"{split}/meta/{image_set}.jsonl", []).append({"image": relative, **meta})
        return relative


def _identity_images(plan: Plan, rng: np.random.Generator, split: str, image_set: str, family: str,
                     identities: list[tuple[str, Params]], images_per_identity: int | list[int],
                     lookalike_fraction: float, taken: set[str], id_prefix: str) -> list[dict[str, Any]]:
    """Rows of kind ``identity``; optional look-alikes share each anchor context exactly.
    ``images_per_identity``: one count for all, or one per identity."""
    if isinstance(images_per_identity, int):
        images_per_identity = [images_per_identity] * len(identities)
    rows: list[dict[str, Any]] = []
    for (identity_name, params), n_images in zip(identities, images_per_identity, strict=True):
        anchor_rows = []
        contexts = [sample_context(rng, family, params) for _ in range(n_images)]
        for context in contexts:
            image = plan.image(split, image_set, single_spec(family, params, context), {
                "identity": identity_name, "family": family, "identity_params": params,
                "context": context_meta(context), "role": "anchor"})
            anchor_rows.append({"id": f"{id_prefix}-{len(rows):06d}", "image": image, "identity": identity_name})
            rows.append(anchor_rows[-1])
        if rng.random() >= lookalike_fraction:
            continue
        lookalike = make_lookalike(rng, family, params, taken)
        if lookalike is None:
            continue
        twin, changed = lookalike
        twin_name = f"{identity_name}-nearid"
        # Two instances so the twin is a valid identity of its own (it needs a positive).
        for anchor_row, context in zip(anchor_rows[:2], contexts[:2]):
            image = plan.image(split, image_set, single_spec(family, twin, context), {
                "identity": twin_name, "family": family, "identity_params": twin,
                "context": context_meta(context), "role": "lookalike", "anchor": identity_name,
                "anchor_image": anchor_row["image"], "changed": changed})
            twin_row = {"id": f"{id_prefix}-{len(rows):06d}", "image": image, "identity": twin_name,
                        "hard_negatives": [anchor_row["id"]]}
            anchor_row["hard_negatives"] = [twin_row["id"]]
            rows.append(twin_row)
    return rows


def _name_identities(prefix: str, params_list: list[Params], start: int) -> list[tuple[str, Params]]:
    return [(f"{prefix}-{start + k:05d}", params) for k, params in enumerate(params_list)]


class Planner:
    """Draws all datasets of one benchmark instance into a :class:`Plan`."""

    def __init__(self, seed: int, size: SynthSize) -> None:
        self.seed, self.size, self.plan = seed, size, Plan()
        # One registry per family: no identity (anchor or look-alike) is ever drawn twice, which
        # is what makes the train and eval identities disjoint.
        self.taken: dict[str, set[str]] = {"object": set(), "figure": set(), "vehicle": set()}
        self.next_number: dict[str, int] = {"obj": 0, "person": 0, "vehicle": 0}

    def identities(self, stream: str, family: str, prefix: str, count: int,
                   min_differences: int = 0) -> list[tuple[str, Params]]:
        drawn = sample_identities(stream_rng(self.seed, stream), family, count, self.taken[family], min_differences)
        named = _name_identities(prefix, drawn, self.next_number[prefix])
        self.next_number[prefix] += count
        return named

    # --- train -----------------------------------------------------------------------------

    def train_identity_set(self, name: str, family: str, prefix: str, count: int, namespace: str,
                           instructions: str) -> None:
        rng = stream_rng(self.seed, f"train/{name}/contexts")
        identities = self.identities(f"train/{name}", family, prefix, count)
        # its own stream: the default ("fixed") draws nothing, so its output is unchanged
        sizes = train_identity_sizes(stream_rng(self.seed, f"train/{name}/sizes"), count, self.size)
        rows = _identity_images(self.plan, rng, "train", name, family, identities, sizes,
                                self.size.lookalike_fraction, self.taken[family], name)
        self.add_train(name, "identity", rows, instructions, namespace)

    def train_grounding(self) -> None:
        rng = stream_rng(self.seed, "train/grd/scenes")
        targets = self.identities("train/grd", "object", "obj", self.size.grd_train_targets)
        fillers = self.identities("train/grd_fillers", "object", "obj", max(8, self.size.grd_train_targets // 3))
        rows: list[dict[str, Any]] = []
        for target_name, target in targets:
            for _ in range(2):
                image, index = self.scene(rng, "train", "grd", (target_name, target), fillers)
                rows.append({"id": f"grd-{len(rows):06d}", "image": image, "identity": target_name,
                             "bbox": BoxRef(f"train/images/{image}", index, CROP_MARGIN)})
        self.add_train("grd", "identity", rows, "grd", "objects")

    def scene_spec(self, rng: np.random.Generator, target: tuple[str, Params],
                   fillers: list[tuple[str, Params]], objects: int = 3) -> tuple[Params, int, dict[str, Any]]:
        """A multi-object scene holding ``target`` and ``objects - 1`` others from ``fillers``.

        Returns the render spec, the target's index in it and the scene's metadata.
        """
        chosen = [fillers[int(i)] for i in rng.choice(len(fillers), objects - 1, replace=False)]
        members = [target, *chosen]
        order = rng.permutation(objects)
        members = [members[int(i)] for i in order]
        target_index = int(np.argmax(order == 0))
        placements = sample_scene_placements(rng, objects)
        spec = {"background": sample_background(rng), "lighting": sample_lighting(rng), "occluder": None,
                "objects": [{"family": "object", "identity": params, "placement": placement}
                            for (_, params), placement in zip(members, placements)]}
        meta = {"identity": target[0], "family": "object", "identity_params": target[1],
                "target_index": target_index, "objects": [name for name, _ in members],
                "context": {"background": spec["background"], "placements": placements,
                            "lighting": spec["lighting"], "occluder": None}}
        return spec, target_index, meta

    def scene(self, rng: np.random.Generator, split: str, image_set: str, target: tuple[str, Params],
              fillers: list[tuple[str, Params]]) -> tuple[str, int]:
        """Schedule a scene image; returns its path and the target's object index."""
        spec, target_index, meta = self.scene_spec(rng, target, fillers)
        image = self.plan.image(split, image_set, spec, meta)
        # Pixel boxes of every object, filled in after rendering.
        meta_row = self.plan.meta[f"{split}/meta/{image_set}.jsonl"][-1]
        meta_row["boxes"] = [BoxRef(f"{split}/images/{image}", k) for k in range(len(spec["objects"]))]
        return image, target_index

    def train_edit(self) -> None:
        rng = stream_rng(self.seed, "train/edit/contexts")
        identities = self.identities("train/edit", "object", "obj", self.size.edit_train_identities)
        rows: list[dict[str, Any]] = []
        for name, params in identities:
            base = sample_edit_base(rng, params)
            edits = [sample_edit(rng, base, kind) for kind in rng.choice(
                ("background", "move", "scale", "lighting"), 2, replace=False)]
            twin = make_lookalike(rng, "object", params, self.taken["object"]) if rng.random() < 0.5 else None
            own = self.edit_rows(rows, "train", "edit", name, params, base, edits)
            if twin is not None:
                twin_rows = self.edit_rows(rows, "train", "edit", f"{name}-nearid", twin[0], base, edits,
                                           anchor=name, changed=twin[1])
                for mine, theirs in zip(own, twin_rows):
                    mine["hard_negatives"], theirs["hard_negatives"] = [theirs["id"]], [mine["id"]]
        self.add_train("edit", "pairs", rows, "edit", "objects")

    def edit_rows(self, rows: list[dict[str, Any]], split: str, image_set: str, name: str,
                  params: Params, base: Params, edits: list[Params], **extra: Any) -> list[dict[str, Any]]:
        """Rows ``source image + instruction -> edited image`` (one per edit) appended to ``rows``."""
        base_image = self.plan.image(split, image_set, single_spec("object", params, base), {
            "identity": name, "family": "object", "identity_params": params, **extra,
            "context": context_meta(base), "role": "edit_source"})
        new_rows = []
        for edit in edits:
            target = self.edit_target(split, image_set, name, params, base, edit, base_image, **extra)
            new_rows.append({"id": f"{image_set}-{len(rows):06d}", "identity": name,
                             "query": {"image": base_image, "text": edit["instruction"]},
                             "positive": {"image": target}})
            rows.append(new_rows[-1])
        return new_rows

    def edit_target(self, split: str, image_set: str, name: str, params: Params, base: Params,
                    edit: Params, source_image: str | None, **extra: Any) -> str:
        edited = apply_edit(base, edit)
        return self.plan.image(split, image_set, single_spec("object", params, edited), {
            "identity": name, "family": "object", "identity_params": params, **extra,
            "context": context_meta(edited), "role": "edit_target", "edit": edit,
            "source_image": source_image})

    def semantic_images(self, split: str, image_set: str, count: int) -> list[tuple[str, Params, Params]]:
        """``count`` single-object images of fresh identities: (image, identity, context)."""
        rng = stream_rng(self.seed, f"{split}/{image_set}/contexts")
        identities = self.identities(f"{split}/{image_set}", "object", "obj", count)
        out = []
        for name, params in identities:
            context = sample_context(rng, "object", params)
            image = self.plan.image(split, image_set, single_spec("object", params, context), {
                "identity": name, "family": "object", "identity_params": params,
                "context": context_meta(context), "caption": caption(params, context)})
            out.append((image, params, context))
        return out

    def train_semantic(self) -> None:
        for image, params, _ in self.semantic_images("train", "cls", self.size.cls_train_images):
            for task, label in (("cls_shape", params["shape"]), ("cls_colour", params["primary"])):
                rows = self.plan.tables.setdefault(f"train/{task}.jsonl", [])
                rows.append({"id": f"{task}-{len(rows):06d}", "query": {"image": image}, "positive": {"text": label}})
        for task in ("cls_shape", "cls_colour"):
            self.add_train(task, "pairs", self.plan.tables[f"train/{task}.jsonl"], task, None)
        rows = [{"id": f"ret-{k:06d}", "query": {"text": caption(params, context)}, "positive": {"image": image}}
                for k, (image, params, context) in enumerate(
                    self.semantic_images("train", "ret", self.size.ret_train_images))]
        self.add_train("ret", "pairs", rows, "ret", None)

    def add_train(self, name: str, kind: str, rows: list[dict[str, Any]], instructions: str,
                  namespace: str | None) -> None:
        path = f"train/{name}.jsonl"
        self.plan.tables[path] = rows
        query_instruction, candidate_instruction = INSTRUCTIONS[instructions]
        entry = {"name": f"synth_{name}", "kind": kind, "path": path, "image_root": "train/images",
                 "weight": 1.0, "query_instruction": query_instruction,
                 "candidate_instruction": candidate_instruction}
        if namespace:
            entry["identity_namespace"] = namespace
        self.plan.train_entries.append(entry)

    # --- eval ------------------------------------------------------------------------------

    def eval_gallery(self, name: str, dataset: str, family: str, prefix: str, count: int,
                     meta_task: str, split: str, instructions: str) -> None:
        rng = stream_rng(self.seed, f"eval/{name}/contexts")
        identities = self.identities(f"eval/{name}", family, prefix, count, min_differences=2)
        rows = _identity_images(self.plan, rng, "eval", name, family, identities,
                                self.size.eval_images_per_identity, 0.0, self.taken[family], name)
        # Every image is a query against all the others (its own row is excluded by the
        # evaluator): with n images per identity each query has n - 1 true matches.
        self.plan.tables[f"eval/{name}_queries.jsonl"] = rows
        self.plan.tables[f"eval/{name}_gallery.jsonl"] = rows
        self.add_eval(dataset, "MVEB", meta_task, split, instructions, layout="gallery",
                      queries=f"eval/{name}_queries.jsonl", gallery=f"eval/{name}_gallery.jsonl")

    def eval_grounding(self) -> None:
        rng = stream_rng(self.seed, "eval/grd/scenes")
        targets = self.identities("eval/grd", "object", "obj", self.size.grd_eval_queries, min_differences=2)
        fillers = self.identities("eval/grd_fillers", "object", "obj", max(8, self.size.grd_eval_queries // 2))
        queries, scenes = [], []
        for target in targets:
            # The query is the target cut out of another scene (other objects, other context).
            spec, index, meta = self.scene_spec(rng, target, fillers)
            queries.append(self.plan.image("eval", "grd_query", spec, {**meta, "role": "query_crop"},
                                           crop={"object": index, "margin": CROP_MARGIN}))
            scenes.append(self.scene(rng, "eval", "grd", target, fillers)[0])
        rows = [{"id": f"grd-{k:06d}", "query": {"image": query},
                 "candidates": [{"image": scenes[j]} for j in self.candidate_indices(rng, k, len(scenes))]}
                for k, query in enumerate(queries)]
        self.plan.tables["eval/grd.jsonl"] = rows
        self.add_eval("SynthGrd", "MVEB", "ID-Grd", "IND", "grd", path="eval/grd.jsonl")

    def identities_with_lookalikes(self, stream: str,
                                   count: int) -> list[tuple[tuple[str, Params], tuple[Params, str]]]:
        """``count`` new objects (pairwise distinct), each with a new look-alike.

        Objects whose every look-alike is already taken are passed over (rare: a few
        solid-colour objects at the ``full`` scale).
        """
        identity_rng = stream_rng(self.seed, stream)
        lookalike_rng = stream_rng(self.seed, f"{stream}/lookalikes")
        pairs: list[tuple[tuple[str, Params], tuple[Params, str]]] = []
        while len(pairs) < count:
            (params,) = sample_identities(identity_rng, "object", 1, self.taken["object"], 2,
                                          keep_apart=tuple(p for (_, p), _ in pairs))
            lookalike = make_lookalike(lookalike_rng, "object", params, self.taken["object"])
            if lookalike is not None:
                pairs.append(((f"obj-{self.next_number['obj']:05d}", params), lookalike))
                self.next_number["obj"] += 1
        return pairs

    def candidate_indices(self, rng: np.random.Generator, positive: int, pool: int) -> list[int]:
        """The positive first, then distinct random others from a pool of ``pool``."""
        others = [int(i) for i in rng.permutation(pool) if int(i) != positive]
        return [positive, *others[: self.size.candidates_per_query - 1]]

    def eval_edit(self) -> None:
        rng = stream_rng(self.seed, "eval/edit/contexts")
        scratch: list[dict[str, Any]] = []
        cases = []
        for (name, params), (twin, changed) in self.identities_with_lookalikes(
                "eval/edit", self.size.edit_eval_queries):
            base = sample_edit_base(rng, params)
            edit = sample_edit(rng, base)
            wrong = contrary_edit(edit, base, rng)
            (row, wrong_row) = self.edit_rows(scratch, "eval", "edit", name, params, base, [edit, wrong])
            # The look-alike, edited the same way from the same context (its source is never shown).
            twin_target = self.edit_target("eval", "edit", f"{name}-nearid", twin, base, edit,
                                           None, anchor=name, changed=changed)
            cases.append((row, wrong_row, {"positive": {"image": twin_target}}))
        rows = []
        for k, (row, wrong_row, twin_row) in enumerate(cases):
            # Hard candidates: the wrong edit of the same object, the right edit of its look-alike;
            # then right edits of other objects.  The query's own source image is never one: it is
            # the same identity in the query's own pixels, so a model that learned identity ranks it
            # first, and it is no valid target of an edit; composed-image retrieval protocols (CIRR)
            # leave the reference image out of the candidates for the same reason (docs/synth.md).
            others = [cases[int(j)][0]["positive"] for j in rng.permutation(len(cases)) if int(j) != k]
            candidates = [row["positive"], wrong_row["positive"], twin_row["positive"], *others]
            rows.append({"id": f"edit-{k:06d}", "query": row["query"],
                         "candidates": candidates[: max(3, self.size.candidates_per_query)]})
        self.plan.tables["eval/edit.jsonl"] = rows
        self.add_eval("SynthEdit", "MVEB", "ID-Edit", "IND", "edit", path="eval/edit.jsonl")

    def eval_semantic(self) -> None:
        rng = stream_rng(self.seed, "eval/semantic/candidates")
        images = self.semantic_images("eval", "cls", self.size.cls_eval_images)
        for task, dataset, labels, key in (("cls_shape", "SynthShapeCls", render.SHAPES, "shape"),
                                           ("cls_colour", "SynthColourCls", tuple(render.OBJECT_COLOURS), "primary")):
            rows = [{"id": f"{task}-{k:06d}", "query": {"image": image},
                     "candidates": [{"text": params[key]}] + [{"text": label} for label in labels
                                                               if label != params[key]]}
                    for k, (image, params, _) in enumerate(images)]
            self.plan.tables[f"eval/{task}.jsonl"] = rows
            self.add_eval(dataset, "MMEB", "Cls", "IND", task, path=f"eval/{task}.jsonl")
        pool = self.semantic_images("eval", "ret", self.size.ret_eval_queries)
        rows = [{"id": f"ret-{k:06d}", "query": {"text": caption(params, context)},
                 "candidates": [{"image": pool[j][0]} for j in self.candidate_indices(rng, k, len(pool))]}
                for k, (_, params, context) in enumerate(pool)]
        self.plan.tables["eval/ret.jsonl"] = rows
        self.add_eval("SynthRet", "MMEB", "Ret", "IND", "ret", path="eval/ret.jsonl")

    def eval_nearid(self) -> None:
        """Query vs {same object elsewhere, look-alike in the query's exact context}."""
        rng = stream_rng(self.seed, "eval/nearid/contexts")
        rows = []
        for k, ((name, params), (twin, changed)) in enumerate(self.identities_with_lookalikes(
                "eval/nearid", self.size.nearid_eval_queries)):
            query_context, other_context = (sample_context(rng, "object", params) for _ in range(2))
            common = {"family": "object"}
            query = self.plan.image("eval", "nearid", single_spec("object", params, query_context), {
                **common, "identity": name, "identity_params": params, "context": context_meta(query_context),
                "role": "query"})
            positive = self.plan.image("eval", "nearid", single_spec("object", params, other_context), {
                **common, "identity": name, "identity_params": params, "context": context_meta(other_context),
                "role": "positive"})
            distractor = self.plan.image("eval", "nearid", single_spec("object", twin, query_context), {
                **common, "identity": f"{name}-nearid", "identity_params": twin,
                "context": context_meta(query_context), "role": "lookalike", "anchor": name,
                "anchor_image": query, "changed": changed})
            rows.append({"id": f"nearid-{k:06d}", "query": {"image": query},
                         "candidates": [{"image": positive}, {"image": distractor}]})
        self.plan.tables["eval/nearid.jsonl"] = rows
        self.add_eval("SynthNearID", "other", "NearID", "IND", "rec", path="eval/nearid.jsonl")

    def add_eval(self, name: str, benchmark: str, meta_task: str, split: str, instructions: str,
                 layout: str = "candidates", **paths: str) -> None:
        query_instruction, candidate_instruction = INSTRUCTIONS[instructions]
        self.plan.manifest_entries.append({
            "name": name, "benchmark": benchmark, "meta_task": meta_task, "split": split,
            "layout": layout, **paths, "image_root": "eval/images",
            "query_instruction": query_instruction, "candidate_instruction": candidate_instruction})

    def build(self) -> Plan:
        size = self.size
        if size.dense is not None:
            plan_dense_training(self, size.dense)
        else:
            self.train_identity_set("rec", "object", "obj", size.rec_train_identities, "objects", "rec")
            self.train_identity_set("reid", "figure", "person", size.reid_train_identities, "persons", "reid")
            self.train_grounding()
            self.train_edit()
            self.train_semantic()
        self.eval_gallery("rec", "SynthRec", "object", "obj", size.rec_eval_identities, "ID-Rec", "IND", "rec")
        self.eval_gallery("reid", "SynthReID", "figure", "person", size.reid_eval_identities, "Re-ID", "IND", "reid")
        # Vehicles are never trained on: the out-of-distribution family.
        self.eval_gallery("vehicle", "SynthVehicleReID", "vehicle", "vehicle", size.vehicle_eval_identities,
                          "Re-ID", "OOD", "vehicle")
        self.eval_grounding()
        self.eval_edit()
        self.eval_semantic()
        self.eval_nearid()
        return self.plan


_ARTICLE_VOWELS = ("a", "e", "i", "o", "u")


def caption(params: Params, context: Params) -> str:
    """English description of an object image (for the Ret task)."""
    primary, secondary, shape = params["primary"], params["secondary"], params["shape"]
    body = {
        "solid": f"{primary} {shape}",
        "stripes": f"{primary} {shape} with {secondary} stripes",
        "checker": f"{primary} and {secondary} checkered {shape}",
        "halves": f"half {primary}, half {secondary} {shape}",
        "quarters": f"{primary} and {secondary} quartered {shape}",
        "rings": f"{primary} {shape} with {secondary} rings",
        "dots": f"{primary} {shape} with {secondary} dots",
    }[params["pattern"]]
    if params["texture"] == "speckled":
        body = f"speckled {body}"
    elif params["texture"] == "outlined":
        body = f"{body} with a {'white' if primary == 'black' else 'black'} outline,"
    article = "an" if body.startswith(_ARTICLE_VOWELS) else "a"
    return f"{article} {body} on a {context['background']['colour']} background"


# ---------------------------------------------------------------------------------------------
# Render and write
# ---------------------------------------------------------------------------------------------

def _render_job(job: tuple[str, Params, Params | None, int]) -> tuple[str, bytes, list[list[float]]]:
    path, spec, crop, image_size = job
    if (special := render_special(spec)) is not None:  # a document page (--modalities)
        return path, special, []
    image, boxes = render.compose(spec, image_size)
    if crop is not None:
        image = render.crop_to_box(image, boxes[crop["object"]], crop["margin"], image_size)
    return path, render.png_bytes(image), boxes


def _render_all(jobs: list[tuple[str, Params, Params | None]], image_size: int, workers: int,
                show_progress: bool) -> Iterator[tuple[str, bytes, list[list[float]]]]:
    from tqdm.auto import tqdm

    tasks = [(path, spec, crop, image_size) for path, spec, crop in jobs]
    progress = dict(total=len(tasks), desc="rendering", unit="img", disable=not show_progress)
    if workers <= 1:
        yield from tqdm(map(_render_job, tasks), **progress)
        return
    # fork (like torch's DataLoader on Linux): no re-import of the caller's __main__, which
    # spawn/forkserver need (they break scripts without a main guard and stdin programs).
    # Workers only run numpy/PIL code, so threads of a parent that imported torch are harmless.
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    with context.Pool(workers) as pool:
        yield from tqdm(pool.imap(_render_job, tasks, chunksize=64), **progress)


def _resolve_boxes(value: Any, boxes: dict[str, list[list[float]]], image_size: int) -> Any:
    if isinstance(value, BoxRef):
        box = boxes[value.path][value.index]
        if value.margin is not None:
            box = render.crop_window(box, value.margin, image_size, image_size)
        return [round(v, 1) for v in box]
    if isinstance(value, dict):
        return {key: _resolve_boxes(item, boxes, image_size) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve_boxes(item, boxes, image_size) for item in value]
    return value


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n" for row in rows).encode()


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _check_target(out_dir: Path) -> None:
    """Refuse to replace a non-empty folder that is not a previous synth output."""
    if out_dir.exists() and (not out_dir.is_dir() or (
            any(out_dir.iterdir()) and not (out_dir / MARKER_FILE).is_file())):
        raise ConfigError(f"{out_dir} exists and is not a synthetic benchmark folder (no {MARKER_FILE}); "
                          "choose a new or empty output folder")


def is_current(out_dir: str | Path) -> bool:
    """``out_dir`` holds a finished synth output of this generator version (its ``synth.json``):
    the study drivers reuse such a folder and re-render any other, so an older benchmark is never
    evaluated under the new one's name."""
    marker = Path(out_dir) / MARKER_FILE
    try:
        return json.loads(marker.read_text(encoding="utf-8")).get("generator_version") == GENERATOR_VERSION
    except (OSError, ValueError, AttributeError):
        return False


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
    if isinstance(size, str):
        if size not in SIZES:
            raise ConfigError(f"unknown size {size!r} (known: {', '.join(SIZES)})")
        size = SIZES[size]
    out_dir = Path(out_dir)
    _check_target(out_dir)
    modalities = check_modalities(modalities)
    workers = workers if workers is not None else min(4, os.cpu_count() or 1)
    planner = Planner(seed, size)
    plan = planner.build()
    modality_settings = plan_modalities(planner, modalities, size_name)
    boxes: dict[str, list[list[float]]] = {}
    with atomic_directory(out_dir) as tmp:
        for path, data, image_boxes in _render_all(plan.jobs, size.image_size, workers, show_progress):
            _write(tmp / path, data)
            boxes[path] = image_boxes
        for path, rows in {**plan.tables, **plan.meta}.items():
            _write(tmp / path, _jsonl(_resolve_boxes(rows, boxes, size.image_size)))
        _write(tmp / "train.yaml", _yaml({"datasets": plan.train_entries}))
        _write(tmp / "benchmark.yaml", _yaml({"name": "synth", "version": GENERATOR_VERSION,
                                              "datasets": plan.manifest_entries}))
        settings = dataclasses.asdict(size)
        if settings["dense"] is None:  # absent, so the other presets' synth.json stays as it was
            del settings["dense"]
        settings.update(modality_settings)
        summary = {
            "generator_version": GENERATOR_VERSION, "seed": seed, "size": size_name,
            "settings": settings, "images": len(plan.jobs),
            "tables": {path: len(rows) for path, rows in sorted(plan.tables.items())},
        }
        _write(tmp / MARKER_FILE, (json.dumps(summary, indent=2, sort_keys=True) + "\n").encode())
    if show_progress:
        log.info("rendered %d images in %.1f s -> %s", len(plan.jobs), time.perf_counter() - started, out_dir)
    return out_dir


def _yaml(obj: Any) -> bytes:
    header = "# Written by `vis-embed synth`; see docs/synth.md.\n"
    return (header + yaml.safe_dump(obj, sort_keys=False, width=120, allow_unicode=True)).encode()
