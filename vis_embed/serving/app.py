"""The FastAPI application: ``POST /v1/embeddings``, ``GET /v1/models``, ``GET /health``.

:func:`create_app` takes a loaded ``Embedder`` (tests and library users build the app around
their own); ``vis-embed serve`` (:mod:`vis_embed.serving.cli`) loads one and runs uvicorn.
Every refusal is a JSON ``{"error": {"message", "type", "param"}}`` with a 4xx status (5xx only
for a failure of the server itself); nothing a client sends stops the server.
"""

from __future__ import annotations

import asyncio
import base64
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from vis_embed.serving.batcher import MicroBatcher, QueueFullError
from vis_embed.serving.errors import RequestError
from vis_embed.serving.images import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_URL_TIMEOUT_S, decode_images
from vis_embed.serving.schemas import EmbeddingRequest, parse_items, parse_request

DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_ITEMS = 1024


@dataclass
class ServerSettings:
    model_name: str  # the name clients send as "model" and /v1/models lists
    max_batch_size: int = 32
    max_wait_ms: float = 5.0
    max_queue: int = 256
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_items: int = DEFAULT_MAX_ITEMS
    allow_local_files: bool = False
    url_timeout_s: float = DEFAULT_URL_TIMEOUT_S
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES


def create_app(embedder: Any, settings: ServerSettings) -> FastAPI:
    """The server around ``embedder``; its micro-batcher runs while the app is up (lifespan)."""
    batcher = MicroBatcher(embedder, settings.max_batch_size, settings.max_wait_ms, settings.max_queue)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        batcher.start()
        try:
            yield
        finally:
            await asyncio.to_thread(batcher.stop)

    app = FastAPI(title="vis_embed embeddings", lifespan=lifespan)
    app.state.batcher = batcher
    created = int(time.time())

    @app.exception_handler(RequestError)
    async def request_error(_request: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(Exception)
    async def unexpected_error(_request: Request, exc: Exception) -> JSONResponse:
        error = RequestError(500, f"internal error ({type(exc).__name__}: {exc})", error_type="server_error")
        return JSONResponse(error.body(), status_code=500)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": settings.model_name, **batcher.stats()}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": settings.model_name, "object": "model",
                                            "created": created, "owned_by": "vis_embed"}]}

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> JSONResponse:
        body = await _read_body(request, settings.max_request_bytes)
        parsed = parse_request(body)
        _check_model(parsed, settings.model_name, embedder.embedding_dim)
        items = parse_items(parsed.input, settings.max_items)
        if any("image" in item for item in items):
            model = getattr(embedder, "model", None)  # the pixel budget and decode mode, as encode uses them
            items = await asyncio.to_thread(decode_images, items, settings.allow_local_files,
                                            settings.url_timeout_s, settings.max_image_bytes,
                                            max_pixels=getattr(model, "max_pixels", None),
                                            decode=getattr(model, "decode", "exact"))
        try:
            future = batcher.submit(items, parsed.instruction)
        except QueueFullError as exc:
            raise RequestError(429, f"the server is busy: {exc}; retry later",
                               error_type="rate_limit_error") from None
        result = await asyncio.wrap_future(future)
        return JSONResponse(_response(result.embeddings, result.prompt_tokens, parsed.encoding_format,
                                      settings.model_name))

    return app


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, read no further than ``limit`` bytes (a 413 beyond: memory stays bounded)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int, limit: int) -> RequestError:
    return RequestError(413, f"the request body ({size}+ bytes) is larger than this server's limit of "
                             f"{limit} bytes (--max-request-bytes); split the request")


def _check_model(request: EmbeddingRequest, model_name: str, dim: int) -> None:
    if request.model != model_name:
        raise RequestError(404, f"model {request.model!r} is not served here (this server serves "
                                f"{model_name!r}; see GET /v1/models)", param="model",
                           error_type="model_not_found")
    if request.dimensions is not None and request.dimensions != dim:
        raise RequestError(400, f"dimensions: this model's vectors have {dim} dimensions, got "
                                f"{request.dimensions} (truncation is not supported)", param="dimensions")


def _response(embeddings: np.ndarray, prompt_tokens: int, encoding_format: str,
              model_name: str) -> dict[str, Any]:
    """OpenAI's response shape; base64 = the little-endian float32 bytes, as OpenAI sends them."""
    vectors = embeddings.astype("<f4", copy=False)
    if encoding_format == "base64":
        encoded: list[Any] = [base64.b64encode(row.tobytes()).decode("ascii") for row in vectors]
    else:
        encoded = vectors.tolist()
    return {"object": "list", "model": model_name,
            "data": [{"object": "embedding", "embedding": vector, "index": index}
                     for index, vector in enumerate(encoded)],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}
