"""The plan of a synthetic benchmark: every image to render (a spec), every row and metadata row,
with the pixel boxes known only after rendering as :class:`BoxRef` placeholders; the task
instructions and the captions of the retrieval task."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from vis_embed.prep.synth.sampling import Params, context_meta, make_lookalike, sample_context, single_spec


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


def identity_images(plan: Plan, rng: np.random.Generator, split: str, image_set: str, family: str,
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


def name_identities(prefix: str, params_list: list[Params], start: int) -> list[tuple[str, Params]]:
    return [(f"{prefix}-{start + k:05d}", params) for k, params in enumerate(params_list)]


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
