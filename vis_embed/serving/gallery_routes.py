"""The server's gallery features: the ``dimensions`` request field and ``POST /v1/search``.

``dimensions`` (OpenAI's field) cuts the vectors to their first N coordinates, renormalised
(:func:`vis_embed.vectors.transforms.truncate`).  Like vLLM, only a model that records Matryoshka
dimensions (``matryoshka_dims`` in its ``embedding_config.json``) takes any N up to its width;
any other model answers 400 unless N is its full width.  ``vis-embed serve --dim N`` sets the
width answered when a request names none.

``POST /v1/search`` (with ``vis-embed serve --index DIR``): ``{"model", "input", "instruction"?,
"k"?}``; the input items are embedded as ``/v1/embeddings`` embeds them (same body and item
limits, API key, micro-batching and per-request isolation) but with ``vis-embed search``'s
instruction (:func:`~vis_embed.gallery.search_file.query_instruction`: the request's, else the
model's recorded query instruction), cut to the index's width and searched
(:mod:`vis_embed.gallery.store`), the work bounded by :mod:`.search_work`.  Answer:
``{"object": "list", "model", "data": [{"object": "search_result", "index": i, "hits": [{"id",
"score"}, ...]}], "usage"}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from vis_embed.errors import ConfigError, DataError
from vis_embed.gallery.search_file import query_instruction  # the one rule, shared with vis-embed search
from vis_embed.vectors.stored_form import warn_if_not_matryoshka
from vis_embed.vectors.transforms import check_dim, truncate
from vis_embed.serving.errors import RequestError
from vis_embed.serving.search_work import SearchWork

if TYPE_CHECKING:
    from vis_embed.model.runtime.embedder import Embedder

MAX_SEARCH_K = 1000


class SearchRequest(BaseModel):
    """``POST /v1/search`` body."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    input: Any
    instruction: str | None = None
    k: int = Field(10, ge=1, le=MAX_SEARCH_K)
    user: str | None = None


def matryoshka_dims_of(embedder: Embedder) -> list[int] | None:
    config = getattr(embedder, "embedding_config", None)
    return getattr(config, "matryoshka_dims", None)


def check_default_dim(dim: int | None, embedder: Embedder) -> None:
    """``serve --dim``: at most the model's width (checked at start-up); a model not trained for
    it is served cut all the same (the operator's choice), with a warning."""
    full_dim = embedder.embedding_dim
    if dim is not None:
        try:
            check_dim(dim, full_dim, field="--dim")  # the one width rule
        except DataError as error:
            raise ConfigError(f"--dim {error.reason}") from None
    warn_if_not_matryoshka(dim, full_dim, matryoshka_dims_of(embedder))


def answered_dimensions(requested: int | None, default: int | None, full_dim: int,
                        matryoshka_dims: list[int] | None) -> int:
    """The width a request is answered with, or a 400 naming ``dimensions``."""
    if requested is None:
        return default or full_dim
    if requested == full_dim:
        return full_dim
    if not matryoshka_dims:
        raise RequestError(400, f"dimensions: this model was not trained with Matryoshka dimensions (no "
                                f"matryoshka_dims recorded); its vectors have {full_dim} dimensions, "
                                f"got {requested}", param="dimensions")
    try:
        return check_dim(requested, full_dim, field="dimensions")  # the one width rule
    except DataError as error:
        raise RequestError(400, f"dimensions: {error.reason}", param="dimensions") from None


def cut(embeddings: np.ndarray, dim: int) -> np.ndarray:
    return truncate(embeddings, dim) if dim != embeddings.shape[1] else embeddings


EmbedItems = Callable[..., Awaitable[tuple[Any, Any]]]


def install_search(app: FastAPI, work: SearchWork, embed_items: EmbedItems, authorized: Any,
                   with_deadline: Callable[[Awaitable[Response]], Awaitable[Response]],
                   model_name: str, embedder: Embedder) -> None:
    """``POST /v1/search`` over ``work.index`` (a loaded :class:`~vis_embed.gallery.store.GalleryIndex`),
    its work bounded by ``work`` (:mod:`.search_work`).

    ``embed_items(request, schema, check)`` is the app's own path from body to vectors (limits,
    parsing, batching; ``check(parsed, n_items)`` refuses before any work); ``with_deadline``
    its request timeout; queries are embedded with :func:`query_instruction` of ``embedder``, as
    ``vis-embed search`` embeds them (the same query, the same hits)."""
    async def search(request: Request) -> Response:
        parsed, result = await embed_items(request, SearchRequest,
                                           lambda parsed, n_items: work.check(n_items, parsed.k),
                                           lambda given: query_instruction(given, embedder))
        queries = truncate(result.embeddings, work.index.dim)
        usage = {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens}
        body = await work.answer(request, queries, parsed.k, model_name, usage)
        return Response(body, media_type="application/json")

    @app.post("/v1/search", dependencies=[authorized])
    async def search_route(request: Request) -> Response:
        from vis_embed.serving.schemas import check_content_type

        check_content_type(request.headers.get("content-type"))
        return await with_deadline(search(request))
