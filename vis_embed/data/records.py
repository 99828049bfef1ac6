"""Row-level validation shared by the training and evaluation loaders.

Every check raises ``DataError(path=, line=, field=)`` so a user sees e.g.
``train/rec.jsonl:17: field 'hard_negatives': unknown id 'x9' ...``.
Field names inside nested objects are dotted: ``query.image``, ``candidates[3].text``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vis_embed.errors import DataError

Item = dict[str, Any]
ITEM_KEYS: frozenset[str] = frozenset({"image", "text"})


class RowContext:
    """Where a row came from, to build errors that name file and line."""

    __slots__ = ("path", "line")

    def __init__(self, path: str | Path, line: int) -> None:
        self.path = path
        self.line = line

    def error(self, field: str | None, message: str) -> DataError:
        return DataError(message, path=self.path, line=self.line, field=field)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def require_str(row: dict[str, Any], field: str, ctx: RowContext, *, prefix: str = "",
                optional: bool = False) -> str | None:
    """Return ``row[field]`` as a non-empty string (``None`` if optional and absent)."""
    name = prefix + field
    if field not in row:
        if optional:
            return None
        raise ctx.error(name, "missing required field")
    value = row[field]
    if not isinstance(value, str):
        raise ctx.error(name, f"expected a string, got {_type_name(value)} ({value!r:.60})")
    if not value.strip() and not optional:
        raise ctx.error(name, "must not be empty")
    return value


def check_item(value: Any, field: str, ctx: RowContext) -> Item:
    """Validate an item object ``{"image"?: str, "text"?: str}`` with at least one of them."""
    if not isinstance(value, dict):
        raise ctx.error(field, f"expected an object with 'image' and/or 'text', got {_type_name(value)}")
    for key in value:
        if key not in ITEM_KEYS:  # e.g. a typo ("img") or a per-item "bbox" that would be ignored
            raise ctx.error(f"{field}.{key}", "unknown item key (items have 'image' and/or 'text'; "
                                              "crops are the 'bbox' of identity rows)")
    image = require_str(value, "image", ctx, prefix=f"{field}.", optional=True)
    text = require_str(value, "text", ctx, prefix=f"{field}.", optional=True)
    if not image and not text:
        raise ctx.error(field, "an item needs a non-empty 'image' or 'text'")
    return value


def check_bbox(value: Any, ctx: RowContext, field: str = "bbox") -> list[float]:
    """``[x0, y0, x1, y1]`` in pixels of the stored image, with ``0 <= x0 < x1`` and ``0 <= y0 < y1``."""
    if (not isinstance(value, list) or len(value) != 4
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise ctx.error(field, f"expected [x0, y0, x1, y1] (4 numbers), got {value!r:.80}")
    x0, y0, x1, y1 = value
    if not (0 <= x0 < x1 and 0 <= y0 < y1):
        raise ctx.error(field, f"empty or negative box {value}: need 0 <= x0 < x1 and 0 <= y0 < y1")
    return list(value)


def check_id_list(value: Any, field: str, ctx: RowContext) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ctx.error(field, f"expected a list of id strings, got {value!r:.80}")
    return value


def is_url(image: str) -> bool:
    return image.startswith(("http://", "https://"))


def resolve_image(image_root: Path, image: str) -> str:
    """Absolute path string (URLs unchanged); relative paths are relative to ``image_root``."""
    if is_url(image):
        return image
    return os.path.normpath(os.path.join(image_root, os.path.expanduser(image)))


class ImageChecker:
    """Checks that image files exist, stat-ing each distinct path once."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._seen: set[str] = set()

    def check(self, resolved: str, field: str, ctx: RowContext) -> None:
        if not self.enabled or resolved in self._seen or is_url(resolved):
            return
        if not os.path.isfile(resolved):
            raise ctx.error(field, f"image file not found: {resolved}")
        self._seen.add(resolved)
