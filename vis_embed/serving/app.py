"""The FastAPI application: ``POST /v1/embeddings``, ``GET /v1/models`` (and ``/{id}``), ``GET /health``,
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
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
from vis_embed.serving.settings import ServerSettings
from vis_embed.serving.waiting import answer_unless_abandoned

if TYPE_CHECKING:
    from vis_embed.model.runtime.embedder import Embedder
    from vis_embed.gallery.store import GalleryIndex

_log = logging.getLogger(__name__)


def create_app(embedder: Embedder, settings: ServerSettings, index: GalleryIndex | None = None) -> FastAPI:
    """The server around ``embedder``; its micro-batcher runs while the app is up (lifespan).
    ``index``: a loaded GalleryIndex of this model's vectors, searched by ``POST /v1/search``."""
    check_default_dim(settings.dim, embedder)
    parts = _Parts.build(embedder, settings, index)
    # No interactive docs, key or not: they describe the server to anyone who can connect.
    app = FastAPI(title="vis_embed embeddings", lifespan=parts.lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    _add_middleware(app, settings)
    _keep_state(app, parts)
    _install_error_handlers(app)
    authorized = Depends(_authorization(settings.api_key))
    _install_routes(app, parts, _Requests(parts), authorized)
    parts.metrics.install(app, authorized)
    return app


@dataclass
class _Parts:
    """What the server's routes share: the batcher, the limits, the pools and the metrics."""

    embedder: Embedder
    settings: ServerSettings
    metrics: ServerMetrics
    batcher: MicroBatcher
    limiter: InputLimiter
    url_pool: ThreadPoolExecutor | None
    decode_pool: ThreadPoolExecutor
    pixel_budget: PixelBudget
    image_policy: ImagePolicy
    search_work: SearchWork | None

    @classmethod
    def build(cls, embedder: Embedder, settings: ServerSettings, index: GalleryIndex | None) -> _Parts:
        metrics = ServerMetrics()
        batcher = MicroBatcher(metrics.observing(embedder), settings)
        metrics.watch_queue(batcher.stats)
        url_pool = ThreadPoolExecutor(settings.url_workers, thread_name_prefix="vis-embed-fetch") \
            if settings.allow_urls else None
        decode_pool = ThreadPoolExecutor(settings.decode_workers, thread_name_prefix="vis-embed-decode")
        search_work = None if index is None else SearchWork(
            index, settings.max_search_floats, settings.max_search_floats_in_flight, settings.search_workers)
        return cls(embedder, settings, metrics, batcher, InputLimiter(embedder, settings), url_pool, decode_pool,
                   PixelBudget(settings.max_pixels_in_flight), _image_policy(embedder, settings, url_pool, decode_pool),
                   search_work)

    @asynccontextmanager
    async def lifespan(self, _app: FastAPI) -> AsyncIterator[None]:
        """The batcher runs while the app is up; its pools and the search work close with it."""
        self.batcher.start()
        try:
            yield
        finally:
            await asyncio.to_thread(self.batcher.stop)
            for pool in (self.url_pool, self.decode_pool):
                if pool is not None:
                    pool.shutdown(wait=False, cancel_futures=True)
            if self.search_work is not None:
                self.search_work.close()


def _image_policy(embedder: Embedder, settings: ServerSettings, url_pool: ThreadPoolExecutor | None,
                  decode_pool: ThreadPoolExecutor) -> ImagePolicy:
    """How the server takes images: the pixel budget, decode mode and size rule as the model's own
    preparation uses them, and a clip's frames picked and budgeted as the preparer will take them."""
    model = getattr(embedder, "model", None)
    preparer = model.preparer() if hasattr(model, "preparer") else None
    preparer_config = getattr(preparer, "config", None)  # the EmbeddingConfig it prepares with
    return ImagePolicy(
        settings, url_pool=url_pool, decode_pool=decode_pool,
        max_pixels=getattr(preparer_config, "max_pixels", None), decode=getattr(preparer_config, "decode", "exact"),
        target_size=getattr(preparer, "target_size", None),
        video_frames=getattr(preparer_config, "video_frames", 8),
        temporal_patch=int(getattr(getattr(getattr(preparer, "processor", None), "video_processor", None),
                                   "temporal_patch_size", 2)),
        video_max_pixels=getattr(preparer_config, "video_max_pixels", None),
        video_target_size=getattr(preparer, "video_target_size", None))


def _add_middleware(app: FastAPI, settings: ServerSettings) -> None:
    app.add_middleware(ExactPaths)  # "/v1/embeddings\n" is not /v1/embeddings
    if settings.allowed_hosts is not None:
        app.add_middleware(AllowedHosts, hosts=settings.allowed_hosts)


def _keep_state(app: FastAPI, parts: _Parts) -> None:
    """``app.state``: the batcher, the limiter and the send guard (the send deadline and
    unsent-byte bounds; `vis-embed serve` hands it to its h11 protocol)."""
    settings = parts.settings
    app.state.batcher = parts.batcher
    app.state.send_guard = SendGuard(settings.send_timeout_s, settings.max_unsent_bytes,
                                     settings.max_unsent_bytes_total)
    parts.metrics.watch_sends(app.state.send_guard)
    app.state.limiter = parts.limiter


class _Requests:
    """A request's path from body to answer, shared by the embedding and search routes."""

    def __init__(self, parts: _Parts) -> None:
        self.parts = parts
        self.settings = parts.settings

    async def embed_items(self, request: Request, schema: type[BaseModel] = EmbeddingRequest,
                          check: Any = None, instruction_of: Any = None) -> tuple[Any, Any]:
        """``(the request's other fields, its EmbeddingResult)``: body to vectors, every limit applied;
        ``check(parsed, n_items)`` refuses what the route cannot answer before any work;
        ``instruction_of(given)`` the instruction embedded with (default: the request's own, as
        OpenAI's /v1/embeddings, where the client says what an item is)."""
        settings, parts = self.settings, self.parts
        deadline = time.monotonic() + settings.request_timeout_s  # with_deadline's clock, give or take
        parsed = parse_request(await _read_body(request, settings.max_request_bytes), schema, settings.max_items)
        check_served_model(parsed.model, settings.model_name)
        check_instruction(parsed.instruction)
        instruction = parsed.instruction if instruction_of is None else instruction_of(parsed.instruction)
        items = parse_items(parsed.input, settings.max_items)
        if check is not None:
            check(parsed, len(items))
        parsed = parsed.model_copy(update={"input": None})  # the raw input (base64 images) is not held
        # The instruction's share of the token budget, before any image is decoded.
        await asyncio.to_thread(parts.limiter.check_instruction_share, len(items), instruction)
        async with parts.pixel_budget.reservation() as reservation:  # the images' pixels, held to the answer
            if any("image" in item or "video" in item for item in items):
                items = await decode_request_images(items, parts.image_policy, reservation, deadline)
            items, prompt_tokens = await asyncio.to_thread(parts.limiter.apply, items, instruction)
            try:
                future = parts.batcher.submit(items, instruction, prompt_tokens)
            except QueueFullError as exc:
                raise RequestError(429, f"the server is busy: {exc}; retry later",
                                   error_type="rate_limit_error") from None
            parts.metrics.items.labels(route_template(request.scope)).inc(len(items))  # queued: accepted
            del items  # the job holds the decoded images until it is answered (or given up), then drops them
            return parsed, await answer_unless_abandoned(request, future)

    def dimensions(self, parsed: EmbeddingRequest, _n_items: int = 0) -> int:
        embedder = self.parts.embedder
        return answered_dimensions(parsed.dimensions, self.settings.dim, embedder.embedding_dim,
                                   matryoshka_dims_of(embedder))

    async def embed(self, request: Request) -> JSONResponse:
        parsed, result = await self.embed_items(request, check=self.dimensions)
        dim = self.dimensions(parsed)
        return JSONResponse(_response(cut(result.embeddings, dim), result.prompt_tokens, parsed.encoding_format,
                                      self.settings.model_name))

    async def with_deadline(self, answer: Any) -> JSONResponse:
        timeout = self.settings.request_timeout_s
        try:
            async with asyncio.timeout(timeout):  # cancelling it drops the queued job
                return await answer
        except TimeoutError:
            raise RequestError(504, f"the request took longer than this server's limit of "
                                    f"{timeout:g} s (--request-timeout); send fewer items",
                               error_type="server_error") from None


def _install_error_handlers(app: FastAPI) -> None:
    """Every refusal as ``{"error": {...}}``; an unexpected error's text stays in the log."""

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


def _install_routes(app: FastAPI, parts: _Parts, requests: _Requests, authorized: Any) -> None:
    """``/health``, ``/v1/models``, ``/v1/embeddings`` and, with an index, ``/v1/search``."""
    settings, embedder = parts.settings, parts.embedder
    created = int(time.time())
    # The effective settings the vectors are made with (EmbeddingConfig), listed by /v1/models.
    config = getattr(embedder, "embedding_config", None)
    embedding_config = config.to_json() if hasattr(config, "to_json") else None

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health(request: Request) -> Any:
        """Liveness for anyone (503 when the model's worker thread is gone: every request would
        time out); the model and queue for a request with the key (a key-less server shows them to
        none: its model path is not for whoever can connect).  HEAD too: load balancers probe so."""
        if not parts.batcher.alive:
            return JSONResponse({"status": "unavailable"}, status_code=503)
        if settings.api_key is not None and _has_key(request, settings.api_key):
            return {"status": "ok", "model": settings.model_name, **parts.batcher.stats(),
                    "pixels_in_flight": parts.pixel_budget.used}
        return {"status": "ok"}

    served_model = {"id": settings.model_name, "object": "model", "created": created, "owned_by": "vis_embed",
                    "embedding_config": embedding_config}

    @app.get("/v1/models", dependencies=[authorized])
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [served_model]}

    @app.get("/v1/models/{model_id:path}", dependencies=[authorized])
    async def model(model_id: str) -> dict[str, Any]:
        """OpenAI's ``models.retrieve``: the served model, or 404 as for an unknown model in a request."""
        check_served_model(model_id, settings.model_name)
        return served_model

    @app.post("/v1/embeddings", dependencies=[authorized])
    async def embeddings(request: Request) -> JSONResponse:
        check_content_type(request.headers.get("content-type"))
        return await requests.with_deadline(requests.embed(request))

    if parts.search_work is not None:
        install_search(app, parts.search_work, requests.embed_items, authorized, requests.with_deadline,
                       settings.model_name, embedder)


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


def check_served_model(requested: str, model_name: str) -> None:
    """404 in OpenAI's shape unless ``requested`` is the served model (a request's ``model``, or
    the id of ``GET /v1/models/{id}``)."""
    if requested != model_name:
        raise RequestError(404, f"model {requested!r} is not served here (this server serves "
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
