"""``vis-embed serve``: argument parsing and start-up (FastAPI, uvicorn and torch load on run).

    vis-embed serve --model M [--adapter A] [--host 127.0.0.1] [--port 8000] [--api-key KEY]
                    [--max-batch-size N] [--max-wait-ms T] [--max-queue Q] [--allow-local-files]
                    [--allow-urls [--allow-private-urls]] [--max-input-tokens N] [--long-input MODE]
                    [--max-request-pixels P] [--request-timeout S] ...

The flags but --model, --adapter, --served-model-name and the index's are generated from
:class:`vis_embed.serving.settings.ServerSettings` (defaults, help and bounds written once there).
The security-relevant defaults and what each protects against: docs/serving.md#deploying.

glibc's allocator gives each thread that allocates under contention an arena of its own (up to
8 x cores) and rarely returns their memory: the server's RSS crept 1.1 -> 1.45 GB over six
1,000-request runs while Python's heap stayed flat.  :func:`limit_malloc_arenas` caps the
arenas at :data:`MALLOC_ARENAS` (``MALLOC_ARENA_MAX``, respected if the operator set it) first
thing when the command runs -- before the model, the thread pools or uvicorn start a thread --
and exports it, so the preparation worker processes start with it too.

The arena cap alone did not level the RSS off, and round 2's pixel budget still let 16
concurrent 7999^2 PNGs grow the server by 3.5 GB: glibc raises its mmap threshold each time a
large block is freed, so later blocks of up to 32 MB come from the heap and stay there.
:func:`fix_mmap_threshold` fixes it at :data:`MMAP_THRESHOLD` (``MALLOC_MMAP_THRESHOLD_``,
respected if set) the same way: every block above 128 KiB gets its own mapping, returned to
the system when freed (:func:`tune_malloc` applies both).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from vis_embed.config import add_model_arguments, from_arguments
from vis_embed.errors import ConfigError
from vis_embed.gallery.options import ALLOW_ANY_MODEL_HELP, add_rescore_argument
from vis_embed.model.cli import add_model_loading_arguments, model_settings
from vis_embed.model.defaults import add_model_reference_arguments, add_preparation_arguments
from vis_embed.serving.hosts import default_allowed_hosts
from vis_embed.serving.settings import API_KEY_ENV, GALLERIES, LIMITS, ServerSettings

MALLOC_ARENAS = 2
MMAP_THRESHOLD = 131_072  # bytes: every block above it gets its own mapping, returned when freed
_M_ARENA_MAX = -8  # glibc's mallopt parameter number for MALLOC_ARENA_MAX (malloc.h)
_M_MMAP_THRESHOLD = -3  # and for M_MMAP_THRESHOLD


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--model, --adapter, --served-model-name, --index, --allow-any-model and --rescore by hand (no
    ServerSettings field of their own: the index is loaded before the app, with --rescore as
    ``vis-embed search`` loads it), every other serve flag generated from ServerSettings' fields."""
    add_model_reference_arguments(parser)
    parser.add_argument("--served-model-name", default=None,
                        help="the name clients send as \"model\" (default: the --model argument)")
    groups = {LIMITS: parser.add_argument_group("exposure and limits"),
              GALLERIES: parser.add_argument_group("galleries (docs/galleries.md)")}
    add_model_arguments(parser, ServerSettings, groups)
    groups[GALLERIES].add_argument("--index", type=Path, default=None, metavar="DIR",
                                   help="a vis-embed index directory of this model's vectors: adds POST /v1/search")
    groups[GALLERIES].add_argument("--allow-any-model", action="store_true",
                                   help=ALLOW_ANY_MODEL_HELP)
    add_rescore_argument(groups[GALLERIES])  # as vis-embed search's
    add_model_loading_arguments(parser)
    add_preparation_arguments(parser)


def server_settings(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> ServerSettings:
    """The parsed flags as ServerSettings (a bad value: a ConfigError naming the flag), with the
    fields the command derives: the served name, the key (or ``$VIS_EMBED_API_KEY``) and the
    allowed Host names (default from ``--host``; ``*``: any)."""
    if args.allow_private_urls and not args.allow_urls:
        raise ConfigError("--allow-private-urls widens --allow-urls; give both")
    api_key = args.api_key if args.api_key is not None else environ.get(API_KEY_ENV) or None
    allowed_hosts = tuple(args.allowed_hosts) if args.allowed_hosts else default_allowed_hosts(args.host)
    if allowed_hosts is not None and "*" in allowed_hosts:
        allowed_hosts = None
    return from_arguments(ServerSettings, args, model_name=args.served_model_name or args.model, api_key=api_key,
                          allowed_hosts=allowed_hosts)


def tune_malloc(environ: dict[str, str] | os._Environ = os.environ) -> dict[str, int | None]:
    """The allocator settings `vis-embed serve` runs with (module notes): the arena cap and a
    fixed mmap threshold; what each applied (None off glibc)."""
    return {"MALLOC_ARENA_MAX": limit_malloc_arenas(environ),
            "MALLOC_MMAP_THRESHOLD_": fix_mmap_threshold(environ)}


def limit_malloc_arenas(environ: dict[str, str] | os._Environ = os.environ) -> int | None:
    """Cap glibc's malloc arenas at ``MALLOC_ARENA_MAX`` (default :data:`MALLOC_ARENAS`) in this
    process (``mallopt``) and its children (the variable); the value applied, None off glibc."""
    return _mallopt(environ, "MALLOC_ARENA_MAX", MALLOC_ARENAS, _M_ARENA_MAX)


def fix_mmap_threshold(environ: dict[str, str] | os._Environ = os.environ) -> int | None:
    """Fix glibc's mmap threshold at ``MALLOC_MMAP_THRESHOLD_`` (default :data:`MMAP_THRESHOLD`)
    in this process and its children; the value applied, None off glibc."""
    return _mallopt(environ, "MALLOC_MMAP_THRESHOLD_", MMAP_THRESHOLD, _M_MMAP_THRESHOLD)


def _mallopt(environ: dict[str, str] | os._Environ, variable: str, default: int, parameter: int) -> int | None:
    """``mallopt(parameter, value)``: ``value`` from ``environ[variable]`` (the operator's), else
    ``default``, exported there for child processes; the value applied, None off glibc."""
    value = int(environ.setdefault(variable, str(default)))
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt): nothing to set
        return None
    return value if mallopt(parameter, value) == 1 else None


# What `vis-embed serve` imports from the [serve] extra: (module, pip package).
SERVER_MODULES = (("fastapi", "fastapi"), ("uvicorn", "uvicorn"), ("prometheus_client", "prometheus_client"))


def run(args: argparse.Namespace) -> int:
    from vis_embed.integrations import require

    for module, package in SERVER_MODULES:  # the [serve] extra, named before anything loads
        require(module, "serve", "vis-embed serve", package)
    tune_malloc()  # before torch, the pools or uvicorn start threads or allocate (module notes)
    import uvicorn  # heavy imports only when the command runs

    from vis_embed.model.runtime.embedder import Embedder
    from vis_embed.model.runtime.prepare_pool import resolve_workers
    from vis_embed.gallery.store import GalleryIndex
    from vis_embed.serving.app import create_app
    from vis_embed.serving.protocol import header_timeout_protocol

    settings = server_settings(args)  # before anything loads: a bad flag costs no model load
    if args.rescore is not None and args.index is None:
        raise ConfigError("--rescore re-ranks the shortlist of an --index; give --index")
    # a bad index (or --rescore for it) fails before the model loads
    index = None if args.index is None else GalleryIndex.load(args.index, rescore=args.rescore)
    if index is not None:
        index.require_model(args.allow_any_model)
    embedder = Embedder.from_pretrained(
        args.model, adapter=args.adapter, **model_settings(args),
        # A long-lived process: "auto" means the workers, whatever the size of the first request,
        # resolved before the model loads: the CPU rule's cap (8) on any device, each a
        # process's memory held while the server runs (--workers N for more).
        workers=resolve_workers(args.workers))
    if index is not None:
        # the gallery's model, or exit 2
        index.check_queries(embedder.fingerprint(), embedder.embedding_dim, args.allow_any_model)
    embedder.start_workers(background=True)  # requests are prepared in-process until they are up
    app = create_app(embedder, settings, index)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info",
                http=header_timeout_protocol(settings.header_timeout_s, settings.max_header_bytes,
                                             app.state.send_guard),
                timeout_keep_alive=settings.keep_alive_timeout_s, limit_concurrency=settings.max_connections,
                h11_max_incomplete_event_size=settings.max_header_bytes)
    return 0
