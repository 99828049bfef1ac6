"""The one error a request can fail with: an HTTP status and an OpenAI-style error body."""

from __future__ import annotations

from typing import Any


class RequestError(Exception):
    """A request the server refuses: ``status`` (4xx/5xx) and ``{"error": {message, type, param}}``.

    ``param`` names the offending part of the request body (``input[3].image``,
    ``encoding_format``), as OpenAI's API does, so a client can find its mistake.
    """

    def __init__(self, status: int, message: str, param: str | None = None,
                 error_type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.error_type = error_type

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param,
                          "code": None}}
