"""Request parsing: JSON body -> :class:`EmbeddingRequest` -> checked items, or a RequestError.

The top level is a pydantic model (unknown fields and wrong types are refused, naming the
field); each input item goes through the project's one item validator,
:func:`vis_embed.data.items.check_item`, so an item means the same here as in
``vis-embed encode`` and ``Embedder.encode``.  Errors name the item as OpenAI does:
``param: "input[3].image"``.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from vis_embed.data.items import check_item
from vis_embed.errors import DataError
from vis_embed.serving.errors import RequestError


class EmbeddingRequest(BaseModel):
    """``POST /v1/embeddings`` body (OpenAI's fields, plus ``instruction``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    # str | list[str | item]; checked item by item in parse_items (better error names).
    input: Any
    encoding_format: Literal["float", "base64"] = "float"
    instruction: str | None = None
    # OpenAI clients may send these; ``user`` is ignored, ``dimensions`` must be the model's.
    user: str | None = None
    dimensions: int | None = None


def parse_request(body: bytes) -> EmbeddingRequest:
    """The request in ``body``, or a 400 naming the first bad field."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(400, f"the request body is not valid JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise RequestError(400, f"the request body must be a JSON object, got {type(payload).__name__}")
    try:
        return EmbeddingRequest.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        reason = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
        raise RequestError(400, f"{param}: {reason}", param=param) from None


def parse_items(raw_input: Any, max_items: int) -> list[dict[str, Any]]:
    """``input`` as a list of checked items (a string is a text item), or a 4xx naming the item.

    More than ``max_items`` items is a 413 (the request is too large, not malformed).
    """
    if raw_input is None:
        raise RequestError(400, "input: required (a string, a list of strings or a list of items)",
                           param="input")
    if isinstance(raw_input, str):
        return [_text_item(raw_input, "input")]
    if not isinstance(raw_input, list):
        raise RequestError(400, f"input: must be a string or a list, got {_type_name(raw_input)}",
                           param="input")
    if not raw_input:
        raise RequestError(400, "input: must not be empty", param="input")
    if len(raw_input) > max_items:
        raise RequestError(413, f"input: {len(raw_input)} items, above this server's limit of "
                                f"{max_items} per request (--max-items); split the request", param="input")
    return [_text_item(value, f"input[{index}]") if isinstance(value, str) else _item(value, f"input[{index}]")
            for index, value in enumerate(raw_input)]


def _text_item(text: str, param: str) -> dict[str, Any]:
    if not text.strip():
        raise RequestError(400, f"{param}: empty text (an item needs a non-blank text or an image)",
                           param=param)
    return {"text": text}


def _item(value: Any, param: str) -> dict[str, Any]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise RequestError(400, f"{param}: token-id inputs are not supported; send text or items",
                           param=param)
    try:
        item = check_item(value, param)
    except DataError as exc:
        raise RequestError(400, f"{exc.field}: {exc.reason}", param=exc.field) from None
    if "image" in item and not isinstance(item["image"], str):  # JSON: always a string, but be sure
        raise RequestError(400, f"{param}.image: must be a string", param=f"{param}.image")
    return item


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__
