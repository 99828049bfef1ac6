"""How many tokens an item will cost the model, known before its image is decoded.

``Embedder.encode`` groups items of similar length so that batches carry little padding
(:func:`vis_embed.model.inputs.batching.chunk_order`); that only works if the lengths it groups by are
the ones the model will see.  An item's sequence is

    template tokens (chat turn, generation prompt, vision start/end)
    + tokens of "<instruction> <text>"
    + merged visual tokens of its image (size from the header or bbox, resized by the
      processor's own rule: transformers' smart_resize with its patch and merge sizes),
      or of its video: every frame pair (the picked frames, padded to pairs: data/video.py) at
      the size of its first frame under ``video_max_pixels``.

The prompt is built and tokenised exactly as ``prepare_one`` does, only with the image left as
its one placeholder.  The count is exact but where ``prepare_one`` cuts a text to the token
limit (or an image's header lies): a grouping hint, never a limit.  Leaving the template out
made image+text items look 10 tokens shorter than they were (12% real padding where 10% was
asked for).

A text is never tokenised whole when it cannot fit: :func:`within_token_budget` first cuts it to
:data:`CHARS_PER_TOKEN` characters per allowed token (more than any real text needs, so nothing
that fits is cut).  Tokenising a 2 MB line took 26 s and 730 MB, a 20 MB one over 7.5 GB; the
server's limits (serving/limits.py), ``prepare_one`` and this estimate all cut by this one rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from vis_embed.data.image_geometry import fitted_size
from vis_embed.data.images import image_size, is_url
from vis_embed.data.items import check_item
from vis_embed.errors import DataError

if TYPE_CHECKING:
    from transformers import BaseImageProcessor, BaseVideoProcessor, ProcessorMixin

    from vis_embed.model.embedding_config import EmbeddingConfig


class _Prompts(Protocol):
    """The model's Preparer, as far as the estimate uses it."""

    def prompt(self, visual: bool | str | None, instruction: str | None, text: str | None) -> str: ...


class MeasuredModel(Protocol):
    """What the estimate reads of a model: an EmbeddingModel or the dry run's processor-only
    stand-in.  Neither is imported here: the network is a higher layer, and
    model/inputs/preparer.py (their shared base, PreparesItems) imports this module."""

    processor: ProcessorMixin
    embedding_config: EmbeddingConfig

    def preparer(self) -> _Prompts: ...


CHARS_PER_TOKEN = 16  # English averages ~4 characters per token; 16 leaves room for long tokens


def within_token_budget(text: str | None, max_tokens: int | None) -> str | None:
    """``text`` cut to ``max_tokens`` x :data:`CHARS_PER_TOKEN` characters (the part a token
    budget can ever hold), before any tokenising; None or no budget: unchanged."""
    if text is None or max_tokens is None or len(text) <= max_tokens * CHARS_PER_TOKEN:
        return text
    return text[:max_tokens * CHARS_PER_TOKEN]


def estimated_lengths(model: MeasuredModel, items: Sequence[Any], instruction: str | None,
                      base_dir: str | Path | None = None) -> list[int]:
    """Sequence length of each item as ``model.prepare_one`` will build it (see module doc);
    an item that breaks the item contract counts as its text alone."""
    visual = [visual_tokens(model, item, base_dir) for item in items]
    preparer = model.preparer()  # the prompt exactly as the real preparation builds it
    kinds = [None if count is None else "video" if _has_video(item) else "image" for item, count in zip(items, visual)]
    limit = getattr(model, "token_limit", None)
    prompts = [preparer.prompt(kind, instruction, within_token_budget(_text(item), limit))
               for item, kind in zip(items, kinds)]
    if not prompts:
        return []
    prompt_ids = model.processor.tokenizer(prompts, add_special_tokens=False)["input_ids"]
    # The one image placeholder in a prompt becomes the image's visual tokens.
    return [len(ids) + (count - 1 if count is not None else 0) for ids, count in zip(prompt_ids, visual)]


def visual_tokens(model: MeasuredModel, item: Any, base_dir: str | Path | None = None) -> int | None:
    """Merged visual tokens of the item's image; None without an image.  The size comes from
    the bbox or the file's header; for a URL (not fetched here) the pixel budget is assumed."""
    try:
        checked = check_item(item)
    except DataError:
        return None
    if "video" in checked:
        return video_tokens(model, checked["video"], base_dir)
    image, bbox = checked.get("image"), checked.get("bbox")
    if image is None:
        return None
    image_processor = model.processor.image_processor
    patch_size, merge_size = int(image_processor.patch_size), int(image_processor.merge_size)
    if bbox is not None:
        size = (max(1, round(bbox[2] - bbox[0])), max(1, round(bbox[3] - bbox[1])))
    else:
        size = None if is_url(image) else image_size(image, base_dir)
    if size is None:
        return math.ceil(model.embedding_config.max_pixels / (patch_size * merge_size) ** 2)
    if min(size) < 1:  # no pixels: prepare_one reports it; the estimate must not fail first
        return 0
    factor = patch_size * merge_size
    resized_width, resized_height = processor_size(image_processor, model.embedding_config.min_pixels,
                                                   model.embedding_config.max_pixels, *size)
    return (resized_height // factor) * (resized_width // factor)


def video_tokens(model: MeasuredModel, video: Any, base_dir: str | Path | None = None) -> int:
    """Tokens a clip's placeholder becomes: frame pairs x merged tokens of one frame at the size
    its first frame is resized to (header only; a video file's stream header), plus Qwen3-VL's
    timestamp text around each pair.  Unknown (unreadable, URL frames): the per-frame budget is
    assumed; a video file's frame count (not read here) as ``video_frames`` at least."""
    from vis_embed.data.video import first_frame_size, frame_indices, frames_timeline, video_sources

    config = model.embedding_config
    video_processor = model.processor.video_processor
    factor = int(video_processor.patch_size) * int(video_processor.merge_size)
    temporal = int(getattr(video_processor, "temporal_patch_size", 2))
    try:
        sources = video_sources(video, base_dir)
    except DataError:
        sources = None
    count = len(sources) if isinstance(sources, list) else config.video_frames  # a file's count: no decode
    indices = frame_indices(count, config.video_frames, temporal)
    pairs = len(indices) // temporal
    size = None if sources is None else first_frame_size(sources)
    if size is None or min(size) < 1:
        per_pair = math.ceil(config.video_max_pixels / factor ** 2)
    else:
        width, height = processor_size(video_processor, config.min_pixels, config.video_max_pixels, *size)
        per_pair = (height // factor) * (width // factor)
    # a clip of frames sits on its own timeline; a file's rate and positions are not read: assumed alike
    return pairs * per_pair + _timestamp_tokens(model.processor, frames_timeline(indices), temporal)


def _timestamp_tokens(processor: ProcessorMixin, timeline: list[int], temporal: int) -> int:
    """Qwen3-VL's text around each frame pair (``<1.2 seconds>`` + vision start and end tokens),
    as its processor writes it for a clip of frames at positions ``timeline``
    (data/video.FRAMES_FPS); 0 for processors that write none."""
    timestamps = getattr(processor, "_calculate_timestamps", None)  # Qwen3-VL's processor: its own rule
    if timestamps is None:
        return 0
    from vis_embed.data.video import FRAMES_FPS

    texts = [f"<{seconds:.1f} seconds>" for seconds in timestamps(list(timeline), FRAMES_FPS, temporal)]
    return sum(len(ids) + 2 for ids in processor.tokenizer(texts, add_special_tokens=False)["input_ids"])


def processor_size(image_processor: BaseImageProcessor | BaseVideoProcessor, min_pixels: int, max_pixels: int,
                   width: int, height: int) -> tuple[int, int]:
    """(width, height) the model's processor resizes a ``width`` x ``height`` image to: its own
    rule (transformers' smart_resize on the patch x merge grid, after fit_aspect_ratio's padding;
    qwen-vl-utils' copy rounds slivers differently).  Token counts and the fast decode's floor
    (data/images.fast_decode_floor) both come from here.  ValueError for a shape it refuses."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    width, height = fitted_size(width, height)
    factor = int(image_processor.patch_size) * int(image_processor.merge_size)
    resized_height, resized_width = smart_resize(height, width, factor, min_pixels, max_pixels)
    return resized_width, resized_height


def _has_video(item: Any) -> bool:
    return isinstance(item, dict) and item.get("video") is not None


def _text(item: Any) -> str | None:
    text = item.get("text") if isinstance(item, dict) else None
    return text if isinstance(text, str) else None
