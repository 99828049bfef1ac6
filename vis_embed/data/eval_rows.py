"""Row helpers every evaluation layout's loader shares: a row's item validated and resolved
(:func:`resolved_item`), and an id unique within its file (:func:`unique_id`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vis_embed.data.images import resolve_image
from vis_embed.data.items import ITEM_KEYS, Item, ResolvedItem, check_item
from vis_embed.data.records import ImageChecker, RowContext, require_str
from vis_embed.data.video import resolve_video


def resolved_item(raw: Any, image_root: Path, field_name: str | None, ctx: RowContext,
                   checker: ImageChecker, shared: dict[ResolvedItem, Item] | None = None) -> Item:
    """The validated item with its image resolved; equal items share one dict via ``shared``
    (keyed on the item as written: a repeat skips validation and resolution)."""
    if shared is not None and isinstance(raw, dict):
        try:
            known = shared.get(ResolvedItem.unchecked(raw))
        except TypeError:  # an unhashable (hence invalid) value: check_item names it below
            known = None
        if known is not None and raw.keys() <= set(ITEM_KEYS):
            return known  # an identical item was already validated
    item = check_item(raw, field_name, path=ctx.path, line=ctx.line)
    prefix = "" if field_name is None else f"{field_name}."  # None: the row itself is the item
    key = ResolvedItem.unchecked(item)
    resolved = {"image": item.get("image"), "text": item.get("text")}
    if resolved["image"] is not None:
        resolved["image"] = resolve_image(resolved["image"], image_root)
        checker.check(resolved["image"], f"{prefix}image", ctx)
    if "video" in item:
        resolved["video"] = resolved_video(item["video"], image_root, f"{prefix}video", ctx, checker)
    if "bbox" in item:
        resolved["bbox"] = item["bbox"]
        checker.check_bbox(resolved["image"], item["bbox"], f"{prefix}bbox", ctx)  # header only
    if shared is not None:
        shared[key] = resolved
    return resolved


def resolved_video(video: Any, image_root: Path, field: str, ctx: RowContext,
                   checker: ImageChecker) -> str | list[str]:
    """An item's video resolved against ``image_root`` like an image, and checked to exist."""
    resolved = resolve_video(video, image_root)
    checker.check_video(resolved, field, ctx)
    return list(resolved) if isinstance(resolved, tuple) else resolved


def unique_id(row: dict[str, Any], ctx: RowContext, seen: dict[str, int]) -> str:
    row_id = require_str(row, "id", ctx)
    if row_id in seen:
        raise ctx.error("id", f"duplicate id {row_id!r} (first on line {seen[row_id]})")
    seen[row_id] = ctx.line
    return row_id  # type: ignore[return-value]
