"""The FastAPI application: ``POST /v1/embeddings``, ``GET /v1/models``, ``GET /health``,
``GET /metrics`` (:mod:`.metrics`) and, with an index, ``POST /v1/search`` (:mod:`.gallery_routes`).

:func:`create_app` takes a loaded ``Embedder`` (tests and library users build the app around
their own); ``vis-embed serve`` (:mod:`vis_embed.serving.cli`) loads one and runs uvicorn.
Every refusal is a JSON ``{"error": {"message", "type", "param"}}`` with a 4xx status (5xx only
for a failure of the server itself), unknown routes and methods (404, 405) included; nothing a
client sends stops the server, and no error text shows an address, a path or a command.
``/health`` says only ``{"status": "ok"}`` (its details need the key); there are no
``/docs``, ``/redoc`` or ``/openapi.json``.

Where a request's work runs: parsing on the event loop; text checks and token counting in the
event loop's default thread pool (short, bounded work); image sources, headers and decodes in
the server's own decode pool (``--decode-workers``) and URL fetches in the fetch pool, so a
text-only request never waits behind an image; the model in the batcher's one thread; a
search, its hits and its answer's JSON in the search pool (``--search-workers``, :mod:`.search_work`).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from pydantic import BaseModel

from vis_embed.serving.batcher import MicroBatcher, QueueFullError
from vis_embed.serving.budget import PixelBudget
from vis_embed.serving.errors import RequestError
from vis_embed.serving.gallery_routes import (answered_dimensions, check_default_dim, cut, install_search,
                                              matryoshka_dims_of)
from vis_embed.serving.hosts import AllowedHosts
from vis_embed.serving.paths import ExactPaths
from vis_embed.serving.images import ImagePolicy, decode_request_images
from vis_embed.serving.limits import InputLimiter
from vis_embed.serving.metrics import ServerMetrics, route_template
from vis_embed.serving.search_work import SearchWork
from vis_embed.serving.sends import SendGuard
from vis_embed.serving.schemas import (
    EmbeddingRequest,
    check_content_type,
    check_instruction,
    parse_items,
    parse_request,
)
from vis_embed.serving.settings import ServerSettings  # its home; imported from here too
from vis_embed.serving.waiting import answer_unless_abandoned

_log = logging.getLogger(__name__)


def create_app(embedder: Any, settings: ServerSettings, index: Any = None) -> FastAPI:
    """The server around ``embedder``; its micro-batcher runs while the app is up (lifespan).
    ``index``: a loaded GalleryIndex of this model's vectors, searched by ``POST /v1/search``."""
    metrics = ServerMetrics()
    check_default_dim(settings.dim, embedder)
    batcher = MicroBatcher(metrics.observing(embedder), settings)
    metrics.watch_queue(batcher.stats)
    limiter = InputLimiter(embedder, settings)
    url_pool = ThreadPoolExecutor(settings.url_workers, thread_name_prefix="vis-embed-fetch") \
        if settings.allow_urls else None
    decode_pool = ThreadPoolExecutor(settings.decode_workers, thread_name_prefix="vis-embed-decode")
    pixel_budget = PixelBudget(settings.max_pixels_in_flight)
    search_work = None if index is None else SearchWork(index, settings.max_search_floats,
                                                         settings.max_search_floats_in_flight, settings.search_workers)
    model = getattr(embedder, "model", None)
    preparer = model.preparer() if hasattr(model, "preparer") else None
    preparer_config = getattr(preparer, "config", None)  # the EmbeddingConfig it prepares with
    image_policy = ImagePolicy(
        settings, url_pool=url_pool, decode_pool=decode_pool,
        # the pixel budget, decode mode and size rule, as the model's own preparation uses them
        max_pixels=getattr(preparer_config, "max_pixels", None), decode=getattr(preparer_config, "decode", "exact"),
        target_size=getattr(preparer, "target_size", None),
        # a clip's frames: picked and budgeted as the preparer will take them
        video_frames=getattr(preparer_config, "video_frames", 8),
        temporal_patch=int(getattr(getattr(getattr(preparer, "processor", None), "video_processor", None),
                                   "temporal_patch_size", 2)),
        video_max_pixels=getattr(preparer_config, "video_max_pixels", None),
        video_target_size=getattr(preparer, "video_target_size", None))

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        batcher.start()
        try:
            yield
        finally:
            await asyncio.to_thread(batcher.stop)
            for pool in (url_pool, decode_pool):
                if pool is not None:
                    pool.shutdown(wait=False, cancel_futures=True)
            if search_work is not None:
                search_work.close()

    # No interactive docs, key or not: they describe the server to anyone who can connect.
    app = FastAPI(title="vis_embed embeddings", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.add_middleware(ExactPaths)  # "/v1/embeddings\n" is not /v1/embeddings
    if settings.allowed_hosts is not None:
        app.add_middleware(AllowedHosts, hosts=settings.allowed_hosts)
    app.state.batcher = batcher
    # the send deadline and unsent-byte bounds; `vis-embed serve` hands it to its h11 protocol
    app.state.send_guard = SendGuard(settings.send_timeout_s, settings.max_unsent_bytes,
                                     settings.max_unsent_bytes_total)
    metrics.watch_sends(app.state.send_guard)
    app.state.limiter = limiter
    created = int(time.time())
    # The effective settings the vectors are made with (EmbeddingConfig), listed by /v1/models.
    config = getattr(embedder, "embedding_config", None)
    embedding_config = config.to_json() if hasattr(config, "to_json") else None
    authorized = Depends(_authorization(settings.api_key))

    async def embed_items(request: Request, schema: type[BaseModel] = EmbeddingRequest,
                          check: Any = None) -> tuple[Any, Any]:
        """``(the request's other fields, its EmbeddingResult)``: body to vectors, every limit applied;
        ``check(parsed, n_items)`` refuses what the route cannot answer before any work."""
        deadline = time.monotonic() + settings.request_timeout_s  # with_deadline's clock, give or take
        parsed = parse_request(await _read_body(request, settings.max_request_bytes), schema)
        _check_model(parsed, settings.model_name)
        check_instruction(parsed.instruction)
        instruction = parsed.instruction
        items = parse_items(parsed.input, settings.max_items)
        if check is not None:
            check(parsed, len(items))
        metrics.items.labels(route_template(request.scope)).inc(len(items))
        parsed = parsed.model_copy(update={"input": None})  # the raw input (base64 images) is not held
        # The instruction's share of the token budget, before any image is decoded.
        await asyncio.to_thread(limiter.check_instruction_share, len(items), instruction)
        async with pixel_budget.reservation() as reservation:  # the images' pixels, held to the answer
            if any("image" in item or "video" in item for item in items):
                items = await decode_request_images(items, image_policy, reservation, deadline)
            items, prompt_tokens = await asyncio.to_thread(limiter.apply, items, instruction)
            try:
                future = batcher.submit(items, instruction, prompt_tokens)
            except QueueFullError as exc:
                raise RequestError(429, f"the server is busy: {exc}; retry later",
                                   error_type="rate_limit_error") from None
            del items  # the job holds the decoded images until it is answered (or given up), then drops them
            return parsed, await answer_unless_abandoned(request, future)

    def dimensions(parsed: EmbeddingRequest, _n_items: int = 0) -> int:
        return answered_dimensions(parsed.dimensions, settings.dim, embedder.embedding_dim,
                                   matryoshka_dims_of(embedder))

    async def embed(request: Request) -> JSONResponse:
        parsed, result = await embed_items(request, check=dimensions)
        dim = dimensions(parsed)
        return JSONResponse(_response(cut(result.embeddings, dim), result.prompt_tokens, parsed.encoding_format,
                                      settings.model_name))

    async def with_deadline(answer: Any) -> JSONResponse:
        try:
            async with asyncio.timeout(settings.request_timeout_s):  # cancelling it drops the queued job
                return await answer
        except TimeoutError:
            raise RequestError(504, f"the request took longer than this server's limit of "
                                    f"{settings.request_timeout_s:g} s (--request-timeout); send fewer items",
                               error_type="server_error") from None

    @app.exception_handler(RequestError)
    async def request_error(_request: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """Routing's own errors (404, 405) in the same shape as every other refusal."""
        message = {404: "no such endpoint (see /v1/embeddings, /v1/models)",
                   405: "this endpoint does not take that HTTP method"}.get(exc.status_code, "request refused")
        return JSONResponse(RequestError(exc.status_code, message).body(), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, _exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(RequestError(400, "malformed request").body(), status_code=400)

    @app.exception_handler(Exception)
    async def unexpected_error(_request: Request, exc: Exception) -> JSONResponse:
        # The exception's text stays in the server's log: it can hold paths, addresses, commands.
        _log.error("internal error", exc_info=exc)
        error = RequestError(500, "internal error", error_type="server_error")
        return JSONResponse(error.body(), status_code=500)

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        """Liveness for anyone; the model and queue for a request with the key (a key-less
        server shows them to none: its model path is not for whoever can connect)."""
        if settings.api_key is not None and _has_key(request, settings.api_key):
            return {"status": "ok", "model": settings.model_name, **batcher.stats(),
                    "pixels_in_flight": pixel_budget.used}
        return {"status": "ok"}

    @app.get("/v1/models", dependencies=[authorized])
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": settings.model_name, "object": "model", "created": created,
                                            "owned_by": "vis_embed", "embedding_config": embedding_config}]}

    @app.post("/v1/embeddings", dependencies=[authorized])
    async def embeddings(request: Request) -> JSONResponse:
        check_content_type(request.headers.get("content-type"))
        return await with_deadline(embed(request))

    if search_work is not None:
        install_search(app, search_work, embed_items, authorized, with_deadline, settings.model_name)
    metrics.install(app, authorized)
    return app


def _authorization(api_key: str | None):
    """A dependency refusing (401) a request without ``Authorization: Bearer <api_key>``
    (OpenAI's scheme: the ``openai`` client's ``api_key=`` sends it); compared in constant time."""

    async def authorize(request: Request) -> None:
        if api_key is not None and not _has_key(request, api_key):
            raise RequestError(401, "missing or wrong API key: send the header 'Authorization: Bearer KEY'",
                               error_type="authentication_error")

    return authorize


def _has_key(request: Request, api_key: str) -> bool:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode("utf-8"),
                                                              api_key.encode("utf-8"))


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


def _check_model(request: Any, model_name: str) -> None:
    if request.model != model_name:
        raise RequestError(404, f"model {request.model!r} is not served here (this server serves "
                                f"{model_name!r}; see GET /v1/models)", param="model",
                           error_type="model_not_found")


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
