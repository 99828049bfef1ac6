"""The planning phase: :class:`Planner` draws identities, contexts and edits with seeded streams
and decides every dataset of one benchmark instance into a :class:`~vis_embed.prep.synth.plan.Plan`
(single process; nothing is rendered here)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vis_embed.prep.synth import palette
from vis_embed.prep.synth.dense import plan_dense_training
from vis_embed.prep.synth.edits import apply_edit, contrary_edit, sample_edit, sample_edit_base
from vis_embed.prep.synth.sampling import (Params, context_meta, make_lookalike, sample_background, sample_context,
                                      sample_identities, sample_lighting, sample_scene_placements, single_spec,
                                      stream_rng)
from vis_embed.prep.synth.plan import (CROP_MARGIN, INSTRUCTIONS, BoxRef, Plan, caption, identity_images,
                                  name_identities)
from vis_embed.prep.synth.sizes import SynthSize, train_identity_sizes


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
        named = name_identities(prefix, drawn, self.next_number[prefix])
        self.next_number[prefix] += count
        return named

    # --- train -----------------------------------------------------------------------------

    def train_identity_set(self, name: str, family: str, prefix: str, count: int, namespace: str,
                           instructions: str) -> None:
        rng = stream_rng(self.seed, f"train/{name}/contexts")
        identities = self.identities(f"train/{name}", family, prefix, count)
        # its own stream: the default ("fixed") draws nothing, so its output is unchanged
        sizes = train_identity_sizes(stream_rng(self.seed, f"train/{name}/sizes"), count, self.size)
        rows = identity_images(self.plan, rng, "train", name, family, identities, sizes,
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
        rows = identity_images(self.plan, rng, "eval", name, family, identities,
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
        for task, dataset, labels, key in (("cls_shape", "SynthShapeCls", palette.SHAPES, "shape"),
                                           ("cls_colour", "SynthColourCls", tuple(palette.OBJECT_COLOURS), "primary")):
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
