"""Request paths matched exactly: a path holding a control character is refused (404).

starlette matches a route by a regular expression ending in ``$``, which also matches before a
final newline: ``POST /v1/embeddings%0a`` (the ``%0a`` decoded into the path) was served as
``/v1/embeddings`` and counted under its raw path.  No route of this server has a control
character in it, so such a path is answered 404 in the API's error shape before routing.
A pure ASGI wrapper, like :class:`~vis_embed.serving.hosts.AllowedHosts`.
"""

from __future__ import annotations

import json
import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_BODY = json.dumps({"error": {"message": "no such endpoint (see /v1/embeddings, /v1/models)",
                              "type": "invalid_request_error", "param": None, "code": None}}).encode()


class ExactPaths:
    """ASGI middleware answering 404 to an HTTP request whose path holds a control character."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and _CONTROL.search(scope.get("path", "")):
            await send({"type": "http.response.start", "status": 404,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(_BODY)).encode())]})
            await send({"type": "http.response.body", "body": _BODY})
            return
        await self.app(scope, receive, send)
