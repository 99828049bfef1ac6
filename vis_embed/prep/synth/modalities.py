"""Which modalities ``vis-embed synth`` writes (``--modalities image,video,document``).

``image`` is the identity benchmark of :mod:`vis_embed.prep.synth.build` (its training data and
image tasks), always written; ``video`` adds the clip tasks of :mod:`vis_embed.prep.synth.video`
and ``document`` the page-retrieval task of :mod:`vis_embed.prep.synth.documents`.  Both are
opt-in so the default output (and the quickstart that renders it) is unchanged byte for byte.

The added tasks are planned *after* the image plan, from their own random streams and with
identities taken from the same per-family registry, so they never change an image-task byte
and never reuse a train or eval identity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vis_embed.prep.synth import documents, video
from vis_embed.prep.synth.planner_api import SynthPlanner
from vis_embed.prep.synth.sampling import Params
from vis_embed.config import comma_list
from vis_embed.errors import ConfigError

MODALITIES: tuple[str, ...] = ("image", "video", "document")
DEFAULT_MODALITIES: tuple[str, ...] = ("image",)


def check_modalities(modalities: str | Sequence[str]) -> tuple[str, ...]:
    """The modalities in canonical order; a ConfigError for an unknown one or a list without ``image``."""
    names = comma_list(modalities) if isinstance(modalities, str) else list(modalities)
    unknown = [name for name in names if name not in MODALITIES]
    if unknown:
        raise ConfigError(f"unknown modality {unknown[0]!r} (known: {', '.join(MODALITIES)})")
    if "image" not in names:
        # The image part holds the training data every synthetic run trains on.
        raise ConfigError(f"--modalities must include image (got {','.join(names) or 'nothing'}): "
                          "the training data and image tasks are always written; add video or document to them")
    return tuple(name for name in MODALITIES if name in names)


def preset_of(size_name: str) -> str:
    """The video/document preset that goes with an image preset: ``tiny`` and ``full`` have
    their own, every other (``small`` and its variants, a custom size) uses ``small``'s."""
    return size_name if size_name in ("tiny", "full") else "small"


def plan_modalities(planner: SynthPlanner, modalities: tuple[str, ...], size_name: str) -> dict[str, Any]:
    """Add the opt-in modalities' tasks to ``planner.plan``; returns their settings for
    ``synth.json`` (empty for the default, so its bytes stay as they were)."""
    if modalities == DEFAULT_MODALITIES:
        return {}
    settings: dict[str, Any] = {"modalities": list(modalities)}
    preset = preset_of(size_name)
    if "video" in modalities:
        settings["video"] = video.plan_video(planner, video.VIDEO_SIZES[preset])
    if "document" in modalities:
        settings["document"] = documents.plan_documents(planner, documents.DOCUMENT_SIZES[preset])
    return settings


def render_special(spec: Params) -> bytes | None:
    """PNG bytes of a render spec that is not a :func:`vis_embed.prep.synth.render.compose` scene
    (a document page), else None."""
    if "page" in spec:
        return documents.page_png(spec["page"])
    return None
