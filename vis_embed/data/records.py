"""Row-level validation shared by the training and evaluation loaders.

Every check raises ``DataError(path=, line=, field=)`` so a user sees e.g.
``train/rec.jsonl:17: field 'hard_negatives': unknown id 'x9' ...``.
Field names inside nested objects are dotted: ``query.image``, ``candidates[3].text``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vis_embed.data.image_geometry import bbox_outside
from vis_embed.data.images import displayed_size, is_data_uri, is_url
from vis_embed.data.items import NOT_UNICODE, is_encodable
from vis_embed.errors import DataError


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
    if not is_encodable(value):  # no file, log or table written later could hold it
        raise ctx.error(name, NOT_UNICODE)
    if not value.strip() and not optional:
        raise ctx.error(name, "must not be empty")
    return value


def check_id_list(value: Any, field: str, ctx: RowContext) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ctx.error(field, f"expected a list of id strings, got {value!r:.80}")
    return value


class ImageChecker:
    """Checks that image files exist, stat-ing each distinct path once, and that boxes lie
    inside their image (its displayed size read once per file from the header: no decode)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._seen: set[str] = set()
        self._sizes: dict[str, tuple[int, int]] = {}

    def check(self, resolved: str, field: str, ctx: RowContext) -> None:
        if not self.enabled or resolved in self._seen or is_url(resolved):
            return
        if not os.path.isfile(resolved):
            raise ctx.error(field, f"image file not found: {resolved}")
        self._seen.add(resolved)

    def check_video(self, resolved: str | tuple[str, ...], field: str, ctx: RowContext) -> None:
        """A resolved video (data/video.resolve_video) found: each frame of a list, else the
        folder of frames or the video file (its frames are listed and decoded when encoded)."""
        if isinstance(resolved, tuple):
            for position, frame in enumerate(resolved):
                self.check(frame, f"{field}[{position}]", ctx)
        elif self.enabled and resolved not in self._seen:
            if not os.path.exists(resolved):
                raise ctx.error(field, f"video not found (a folder of frames or a video file): {resolved}")
            self._seen.add(resolved)

    def check_bbox(self, resolved: str, bbox: list[float], field: str, ctx: RowContext) -> None:
        """A box reaching past the image is an error at load time, naming the row, not mid-run."""
        if not self.enabled or is_url(resolved) or is_data_uri(resolved):
            return
        if resolved not in self._sizes:
            try:
                self._sizes[resolved] = displayed_size(resolved)
            except DataError as exc:
                raise ctx.error(field, f"{exc.reason}: {resolved}") from None
        width, height = self._sizes[resolved]
        if (problem := bbox_outside(bbox, width, height, resolved)) is not None:
            raise ctx.error(field, problem)
