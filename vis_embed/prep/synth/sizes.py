"""How much the synthetic benchmark renders: :class:`SynthSize` and the named presets (``SIZES``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from vis_embed.prep.synth.dense import DenseLayout
from vis_embed.errors import ConfigError


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
    # Set: the training split is the dense-identity layout instead (vis_embed/prep/synth/dense.py);
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
