"""How many tokens an item will cost the model, known before its image is decoded.

``Embedder.encode`` groups items of similar length so that batches carry little padding
(:func:`vis_embed.model.batching.chunk_order`); that only works if the lengths it groups by are
the ones the model will see.  An item's sequence is

    template tokens (chat turn, generation prompt, vision start/end)
    + tokens of "<instruction> <text>"
    + merged visual tokens of its image (size from the header or bbox, resized by the
      processor's own rule: transformers' smart_resize with its patch and merge sizes).

The prompt is built and tokenised exactly as ``prepare_one`` does, only with the image left as
its one placeholder.  The count is exact but where ``prepare_one`` cuts a text to the token
limit (or an image's header lies): a grouping hint, never a limit.  Leaving the template out
made image+text items look 10 tokens shorter than they were (12% real padding where 10% was
asked for).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vis_embed.data.image_geometry import fitted_size
from vis_embed.data.images import image_size, is_url
from vis_embed.data.items import check_item
from vis_embed.errors import DataError


def estimated_lengths(model: Any, items: Sequence[Any], instruction: str | None,
                      base_dir: str | Path | None = None) -> list[int]:
    """Sequence length of each item as ``model.prepare_one`` will build it (see module doc);
    an item that breaks the item contract counts as its text alone."""
    visual = [visual_tokens(model, item, base_dir) for item in items]
    preparer = model.preparer()  # the prompt exactly as the real preparation builds it
    prompts = [preparer.prompt(count is not None, instruction, _text(item)) for item, count in zip(items, visual)]
    if not prompts:
        return []
    prompt_ids = model.processor.tokenizer(prompts, add_special_tokens=False)["input_ids"]
    # The one image placeholder in a prompt becomes the image's visual tokens.
    return [len(ids) + (count - 1 if count is not None else 0) for ids, count in zip(prompt_ids, visual)]


def visual_tokens(model: Any, item: Any, base_dir: str | Path | None = None) -> int | None:
    """Merged visual tokens of the item's image; None without an image.  The size comes from
    the bbox or the file's header; for a URL (not fetched here) the pixel budget is assumed."""
    try:
        checked = check_item(item)
    except DataError:
        return None
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


def processor_size(image_processor: Any, min_pixels: int, max_pixels: int, width: int, height: int) -> tuple[int, int]:
    """(width, height) the model's processor resizes a ``width`` x ``height`` image to: its own
    rule (transformers' smart_resize on the patch x merge grid, after fit_aspect_ratio's padding;
    qwen-vl-utils' copy rounds slivers differently).  Token counts and the fast decode's floor
    (data/images.fast_decode_floor) both come from here.  ValueError for a shape it refuses."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    width, height = fitted_size(width, height)
    factor = int(image_processor.patch_size) * int(image_processor.merge_size)
    resized_height, resized_width = smart_resize(height, width, factor, min_pixels, max_pixels)
    return resized_width, resized_height


def _text(item: Any) -> str | None:
    text = item.get("text") if isinstance(item, dict) else None
    return text if isinstance(text, str) else None
