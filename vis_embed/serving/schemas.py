"""Request parsing: JSON body -> :class:`EmbeddingRequest` -> checked items, or a RequestError.

The top level is a pydantic model (unknown fields and wrong types are refused, naming the
field); each input item goes through the project's one item validator,
:func:`vis_embed.data.items.check_item`, so an item means the same here as in
``vis-embed encode`` and ``Embedder.encode``.  Errors name the item as OpenAI does:
``param: "input[3].image"``.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from vis_embed.data.items import check_item
from vis_embed.errors import DataError
from vis_embed.serving.errors import RequestError

MAX_JSON_DEPTH = 8  # {"input": [{"bbox": [...]}]} is 4 deep
MAX_NUMBER_CHARS = 40  # digits of an int, characters of a float; a request needs far fewer
MAX_INSTRUCTION_CHARS = 4096
# JSON values (strings, numbers, lists, objects) a body may hold: a request needs ~13 an item
# ({"text", "image", "bbox": [4]}); the floor leaves room for long clips' frame lists.
JSON_VALUES_PER_ITEM = 64
JSON_VALUES_FLOOR = 65_536


class EmbeddingRequest(BaseModel):
    """``POST /v1/embeddings`` body (OpenAI's fields, plus ``instruction``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    # str | list[str | item]; checked item by item in parse_items (better error names).
    input: Any
    encoding_format: Literal["float", "base64"] = "float"
    instruction: str | None = None
    # OpenAI clients may send these; ``user`` is ignored, ``dimensions`` cuts a Matryoshka model's
    # vectors (serving/gallery_routes.py).
    user: str | None = None
    dimensions: int | None = None

    @field_validator("encoding_format", mode="before")
    @classmethod
    def _null_means_float(cls, value: Any) -> Any:
        # a client that serialises every optional field sends null for "not given" (OpenAI's
        # SDKs omit it): read it as the default rather than refuse the request
        return "float" if value is None else value


def check_content_type(content_type: str | None) -> None:
    """415 unless the body is declared JSON: a web page can only post ``text/plain`` or form
    bodies across origins without a CORS preflight, so accepting those would let any page the
    operator visits use the server."""
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    json_suffix = media_type.startswith("application/") and media_type.endswith("+json")
    if media_type != "application/json" and not json_suffix:
        raise RequestError(415, f"the request body must be JSON (Content-Type: application/json), got "
                                f"{media_type or 'no Content-Type'}")


def parse_json(body: bytes, max_values: int | None = None) -> Any:
    """``body`` as JSON, refusing what Python's reader would take but a request never needs:
    ``NaN``/``Infinity`` (not JSON; they broke batches), numbers of more than
    :data:`MAX_NUMBER_CHARS` characters (``int()`` of 5,000 digits raises), nesting deeper
    than :data:`MAX_JSON_DEPTH` (a request is at most 4 deep) and, before any is parsed, more
    than ``max_values`` values (413: a 32 MiB body of ``[],`` is 11 M lists, 1.6 GB and 6 s of
    the event loop to parse)."""
    if max_values is not None and (values := _json_values_at_most(body, max_values)) > max_values:
        raise RequestError(413, f"the request body holds about {values} JSON values, above this server's limit "
                                f"of {max_values} ({JSON_VALUES_PER_ITEM} x --max-items + {JSON_VALUES_FLOOR}); "
                                f"split the request")
    try:
        payload = json.loads(body, parse_constant=_no_constant, parse_int=_bounded_int, parse_float=_bounded_float)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(400, f"the request body is not valid JSON ({exc})") from None
    except RecursionError:
        raise _too_deep() from None
    if _depth_exceeds(payload, MAX_JSON_DEPTH):
        raise _too_deep()
    return payload


def _json_values_at_most(body: bytes, limit: int) -> int:
    """An upper bound of the values in ``body`` (a JSON text) -- every value is the first of its
    list or object or follows a comma: the commas, lists and objects outside strings, plus one --
    in C-speed passes over the bytes.  Above ``limit`` it may stop at a lower bound: half the
    strings (a value or a key each, and no more keys than values)."""
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")  # no quote left inside a string
    strings = unescaped.count(b'"') // 2
    if strings // 2 > limit:  # over already: no split into that many pieces
        return strings // 2
    outside = b"".join(unescaped.split(b'"')[0::2])
    return sum(outside.count(mark) for mark in (b",", b"[", b"{")) + 1


def _no_constant(name: str) -> Any:
    raise RequestError(400, f"the request body holds {name}, which is not JSON (numbers must be finite)")


def _bounded_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise RequestError(400, f"the request body holds a number of {len(text)} digits (at most {MAX_NUMBER_CHARS})")
    return int(text)


def _bounded_float(text: str) -> float:
    value = float(text) if len(text) <= MAX_NUMBER_CHARS else math.inf
    if not math.isfinite(value):
        raise RequestError(400, f"the request body holds the number {text[:40]}, which is too large or too long")
    return value


def _depth_exceeds(value: Any, limit: int) -> bool:
    """True if ``value`` nests lists/objects more than ``limit`` deep (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        children = current.values() if isinstance(current, dict) else current if isinstance(current, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _too_deep() -> RequestError:
    return RequestError(400, f"the request body nests deeper than {MAX_JSON_DEPTH} levels")


def parse_request(body: bytes, schema: type[BaseModel] = EmbeddingRequest, max_items: int | None = None) -> Any:
    """The request in ``body`` (an EmbeddingRequest, or ``schema``), or a 400 naming the first bad field;
    a body of more JSON values than ``max_items`` items could need is a 413 before it is parsed."""
    max_values = None if max_items is None else JSON_VALUES_PER_ITEM * max_items + JSON_VALUES_FLOOR
    payload = parse_json(body, max_values)
    if not isinstance(payload, dict):
        raise RequestError(400, f"the request body must be a JSON object, got {type(payload).__name__}")
    try:
        return schema.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        reason = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
        raise RequestError(400, f"{param}: {reason}", param=param) from None


def check_instruction(instruction: str | None) -> None:
    """The instruction joins every item's prompt: a lone surrogate would fail the whole batch."""
    if instruction is None:
        return
    try:
        instruction.encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError(400, "instruction: is not valid Unicode (it holds a lone surrogate such as \\ud800)",
                           param="instruction") from None
    if len(instruction) > MAX_INSTRUCTION_CHARS:
        raise RequestError(400, f"instruction: {len(instruction)} characters, above {MAX_INSTRUCTION_CHARS}",
                           param="instruction")


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
    return _item({"text": text}, param, field_of_text=param)


def _item(value: Any, param: str, field_of_text: str | None = None) -> dict[str, Any]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise RequestError(400, f"{param}: token-id inputs are not supported; send text or items",
                           param=param)
    value = _typed_clip(value, param)
    try:
        item = check_item(value, param)
    except DataError as exc:
        field = field_of_text or exc.field  # a string input is its own text: "input[2]"
        raise RequestError(400, f"{field}: {exc.reason}", param=field) from None
    if "video" in item and not isinstance(item["video"], list):
        # A clip is its frames, each one an image to the server's fetch, decode and pixel budgets
        # (serving/images.py).  A folder or a video file would be read and decoded by the model's
        # preparation, outside those budgets: not served.
        raise RequestError(400, f"{param}.video: send a clip as a list of frames (data: URIs, or URLs with "
                                "--allow-urls); a folder or a video file is not read by this server",
                           param=f"{param}.video")
    if "image" in item and not isinstance(item["image"], str):  # JSON: always a string, but be sure
        raise RequestError(400, f"{param}.image: must be a string", param=f"{param}.image")
    return item


def _typed_clip(value: Any, param: str) -> Any:
    """``{"type": "video", "frames": [...], "text"?}`` (the typed content-part spelling of a clip,
    as OpenAI-style multimodal clients send parts) as the item ``{"video": [...], "text"?}``; any
    other value unchanged.  One spelling in, one item contract after this line."""
    if not isinstance(value, dict) or value.get("type") != "video":
        return value
    if "video" in value:
        raise RequestError(400, f"{param}: a typed clip gives its frames as 'frames', not 'video'", param=param)
    if "frames" not in value:
        raise RequestError(400, f"{param}.frames: required for an item of type 'video'", param=f"{param}.frames")
    clip = {key: item for key, item in value.items() if key not in ("type", "frames")}
    return {**clip, "video": value["frames"]}


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__
