"""The dense-identity training layout (``--size small-dense``), modelled on Re-ID and product data.

Real identity collections used for instance-level embedding (person / vehicle Re-ID, product
retrieval) are split into many sub-datasets, each with *few* identities photographed *many*
times, and their identities come in look-alike families (product variants, people dressed
alike).  A naive batch drawn from one such sub-dataset puts the same identity in several
times -- the false negatives of the paper's sampling ablation (its Table 2) -- and the
look-alikes are the hard negatives an identity-aware scheduler can place next to each other.

Each training sub-dataset here holds ``families`` look-alike families of ``family_size``
identities: an anchor drawn as usual and ``family_size - 1`` *variants* that change one
detail attribute each (:func:`~vis_embed.prep.synth.sampling.make_variant`).  Every identity has
``images_per_identity`` images, and image ``i`` of every member of a family is rendered in
the same context ``i`` (background, placement, lighting, occluder): a row's designated hard
negatives are the same-context images of its family's other members, which differ from it
only in identity.  The evaluation sets are those of the base preset (held-out identities).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from vis_embed.prep.synth.sampling import (Params, context_meta, make_variant, sample_context, single_spec,
                                       stream_rng)


class ImagePlan(Protocol):
    def image(self, split: str, image_set: str, spec: Params, meta: dict[str, Any],
              crop: Params | None = None) -> str: ...


class Planner(Protocol):
    """What the dense layout needs of ``planner.Planner`` (a protocol, so planner -> dense is one-way)."""

    seed: int
    plan: ImagePlan
    taken: dict[str, set[str]]

    def identities(self, stream: str, family: str, prefix: str, count: int,
                   min_differences: int = 0) -> list[tuple[str, Params]]: ...

    def add_train(self, name: str, kind: str, rows: list[dict[str, Any]], instructions: str,
                  namespace: str | None) -> None: ...


@dataclass(frozen=True)
class DenseLayout:
    """Counts of the dense training layout (per sub-dataset unless they say otherwise)."""

    object_subdatasets: int         # `synth_rec_<n>` sets (objects)
    person_subdatasets: int         # `synth_reid_<n>` sets (persons)
    families: int                   # look-alike families per sub-dataset
    family_size: int                # identities per family: the anchor and family_size - 1 variants
    images_per_identity: int


# A person variant changes one small garment detail (bag, sleeves, trousers, top pattern) that
# an occluder bar can hide completely (~2.5% of occluded person pairs rendered pixel-identical
# to their anchor): the designated hard negative would then be a false one.  Objects always
# show their changed detail, so they keep the usual occlusion rate.
_OCCLUSION = {"object": 0.3, "figure": 0.0}


def plan_dense_training(planner: Planner, layout: DenseLayout) -> None:
    """Add the dense identity sub-datasets to ``planner``'s plan (train split only)."""
    for number in range(layout.object_subdatasets):
        _plan_subdataset(planner, layout, f"rec_{number}", "object", "obj", "objects", "rec")
    for number in range(layout.person_subdatasets):
        _plan_subdataset(planner, layout, f"reid_{number}", "figure", "person", "persons", "reid")


def _family(planner: Planner, stream: str, family: str, anchor: tuple[str, Params],
            size: int) -> list[tuple[str, Params, str | None]]:
    """``[(name, params, changed attribute or None for the anchor), ...]`` of one family."""

    rng = stream_rng(planner.seed, stream)
    name, params = anchor
    members: list[tuple[str, Params, str | None]] = [(name, params, None)]
    while len(members) < size:
        variant = make_variant(rng, family, params, planner.taken[family])
        if variant is None:  # every variant drawn is already an identity: a smaller family
            break
        members.append((f"{name}-v{len(members)}", variant[0], variant[1]))
    return members


def _plan_subdataset(planner: Planner, layout: DenseLayout, name: str, family: str, prefix: str,
                     namespace: str, instructions: str) -> None:

    context_rng = stream_rng(planner.seed, f"train/{name}/contexts")
    # Anchors of one sub-dataset differ in >= 2 main attributes, so families are told apart
    # by coarse cues and members within a family by their one changed detail.
    anchors = planner.identities(f"train/{name}", family, prefix, layout.families, min_differences=2)
    rows: list[dict[str, Any]] = []
    for anchor in anchors:
        members = _family(planner, f"train/{name}/variants/{anchor[0]}", family, anchor, layout.family_size)
        for _ in range(layout.images_per_identity):
            context = sample_context(context_rng, family, anchor[1], _OCCLUSION[family])
            same_context: list[dict[str, Any]] = []
            for member_name, params, changed in members:
                meta: dict[str, Any] = {"identity": member_name, "family": family, "identity_params": params,
                                        "context": context_meta(context), "role": "anchor"}
                if changed is not None:
                    meta.update(role="lookalike", anchor=anchor[0], anchor_image=same_context[0]["image"],
                                changed=changed)
                image = planner.plan.image("train", name, single_spec(family, params, context), meta)
                same_context.append({"id": f"{name}-{len(rows) + len(same_context):06d}", "image": image,
                                     "identity": member_name})
            for row in same_context:
                row["hard_negatives"] = [other["id"] for other in same_context if other is not row]
            rows.extend(same_context)
    planner.add_train(name, "identity", rows, instructions, namespace)
