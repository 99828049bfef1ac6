"""``vis-embed serve``: argument parsing and start-up (FastAPI, uvicorn and torch load on run).

    vis-embed serve --model M [--adapter A] [--host 127.0.0.1] [--port 8000] [--api-key KEY]
                    [--max-batch-size N] [--max-wait-ms T] [--max-queue Q] [--allow-local-files]
                    [--allow-urls [--allow-private-urls]] [--max-input-tokens N] [--long-input MODE]
                    [--max-request-pixels P] [--request-timeout S] ...

The security-relevant defaults and what each protects against: docs/serving.md#deploying.

glibc's allocator gives each thread that allocates under contention an arena of its own (up to
8 x cores) and rarely returns their memory: the server's RSS crept 1.1 -> 1.45 GB over six
1,000-request runs while Python's heap stayed flat.  :func:`limit_malloc_arenas` caps the
arenas at :data:`MALLOC_ARENAS` (``MALLOC_ARENA_MAX``, respected if the operator set it) first
thing when the command runs -- before the model, the thread pools or uvicorn start a thread --
and exports it, so the preparation worker processes start with it too.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

from vis_embed.errors import ConfigError
from vis_embed.gallery.options import add_dim_argument
from vis_embed.model.cli import add_model_loading_arguments, model_settings
from vis_embed.model.defaults import add_preparation_arguments

# Kept in step with vis_embed.serving.app / images (not imported: they import FastAPI).
_MAX_REQUEST_BYTES = 32 * 1024 * 1024
_MAX_ITEMS = 1024
_URL_TIMEOUT_S = 5.0
_URL_WORKERS = 4
_MAX_REQUEST_PIXELS = 64_000_000
_REQUEST_TIMEOUT_S = 60.0
_MAX_REQUEST_TOKENS = 131_072
_MAX_PIXELS_IN_FLIGHT = 128_000_000
_DECODE_WORKERS = 2
_DECODE_TIMEOUT_S = 10.0
API_KEY_ENV = "VIS_EMBED_API_KEY"
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter number for MALLOC_ARENA_MAX (malloc.h)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="hub id or local checkpoint directory")
    parser.add_argument("--adapter", type=Path, default=None, help="peft LoRA adapter directory")
    parser.add_argument("--served-model-name", default=None,
                        help="the name clients send as \"model\" (default: the --model argument)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    parser.add_argument("--max-batch-size", type=int, default=32,
                        help="most items per micro-batch across requests (default: 32)")
    parser.add_argument("--max-wait-ms", type=float, default=5.0,
                        help="longest wait for more requests before a batch starts (default: 5)")
    parser.add_argument("--max-queue", type=int, default=256,
                        help="requests that may wait; beyond, 429 (default: 256)")
    parser.add_argument("--max-request-bytes", type=int, default=_MAX_REQUEST_BYTES,
                        help=f"largest request body; beyond, 413 (default: {_MAX_REQUEST_BYTES})")
    parser.add_argument("--max-items", type=int, default=_MAX_ITEMS,
                        help=f"most items per request; beyond, 413 (default: {_MAX_ITEMS})")
    parser.add_argument("--url-timeout", type=float, default=_URL_TIMEOUT_S,
                        help=f"seconds one whole image-URL fetch may take (default: {_URL_TIMEOUT_S})")
    parser.add_argument("--allow-local-files", action="store_true",
                        help="accept image paths on the server's disk (off: any client could read its files)")
    add_security_arguments(parser)
    add_model_loading_arguments(parser)
    add_preparation_arguments(parser)
    add_gallery_arguments(parser)


def add_gallery_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("galleries (docs/galleries.md)")
    add_dim_argument(group, "width of the vectors answered when a request names no `dimensions` (Matryoshka "
                            "prefix, renormalised; default: the model's full width)")
    group.add_argument("--index", type=Path, default=None, metavar="DIR",
                       help="a vis-embed index directory of this model's vectors: adds POST /v1/search")


def add_security_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that bound what one client can make the server do (docs/serving.md#deploying)."""
    group = parser.add_argument_group("exposure and limits")
    group.add_argument("--api-key", default=None,
                       help=f"require 'Authorization: Bearer KEY' on every endpoint but /health "
                            f"(default: ${API_KEY_ENV} if set, else no key)")
    group.add_argument("--allowed-hosts", default=None,
                       help="comma-separated Host header names the server answers (defence against DNS "
                            "rebinding); default: localhost,127.0.0.1,::1 when --host is loopback, else any")
    group.add_argument("--allow-urls", action="store_true",
                       help="fetch http(s) image URLs (off: a client could make the server request any URL)")
    group.add_argument("--allow-private-urls", action="store_true",
                       help="with --allow-urls, also fetch loopback, private, link-local and multicast "
                            "addresses (off: the server's own machine and network stay out of reach)")
    group.add_argument("--url-workers", type=int, default=_URL_WORKERS,
                       help=f"threads fetching URLs; more fetches wait (default: {_URL_WORKERS})")
    group.add_argument("--max-input-tokens", type=int, default=None,
                       help="most tokens per input (instruction + text + image); default: the model's "
                            "recorded max length, else 8192")
    group.add_argument("--long-input", choices=("refuse", "truncate"), default="refuse",
                       help="an input over --max-input-tokens: refused with 400 (default, as OpenAI) or "
                            "its text cut at the end")
    group.add_argument("--max-request-pixels", type=int, default=_MAX_REQUEST_PIXELS,
                       help=f"most image pixels per request, from the headers, before decoding; beyond, "
                            f"413 (default: {_MAX_REQUEST_PIXELS})")
    group.add_argument("--request-timeout", type=float, default=_REQUEST_TIMEOUT_S,
                       help=f"seconds one request may take, body to answer; beyond, 504 "
                            f"(default: {_REQUEST_TIMEOUT_S:g})")
    group.add_argument("--header-timeout", type=float, default=10.0,
                       help="seconds a new connection may take to send its request headers (default: 10)")
    group.add_argument("--keep-alive-timeout", type=float, default=5.0,
                       help="seconds an idle keep-alive connection stays open (default: 5)")
    group.add_argument("--max-connections", type=int, default=512,
                       help="open connections and requests at once; beyond, 503 (default: 512)")
    group.add_argument("--max-header-bytes", type=int, default=16384,
                       help="largest request head (request line + headers); beyond, 431 (default: 16384)")
    group.add_argument("--max-request-tokens", type=int, default=_MAX_REQUEST_TOKENS,
                       help=f"most tokens per request (items x tokens, the instruction in each); beyond, 413 "
                            f"(default: {_MAX_REQUEST_TOKENS})")
    group.add_argument("--max-pixels-in-flight", type=int, default=_MAX_PIXELS_IN_FLIGHT,
                       help=f"most decoded image pixels of all requests at once; more wait "
                            f"(default: {_MAX_PIXELS_IN_FLIGHT})")
    group.add_argument("--decode-workers", type=int, default=_DECODE_WORKERS,
                       help=f"threads decoding request images; more images wait (default: {_DECODE_WORKERS})")
    group.add_argument("--decode-timeout", type=float, default=_DECODE_TIMEOUT_S,
                       help=f"seconds one image's decode may take; beyond, 400 (default: {_DECODE_TIMEOUT_S:g})")


def limit_malloc_arenas(environ: dict[str, str] | os._Environ = os.environ) -> int | None:
    """Cap glibc's malloc arenas at ``MALLOC_ARENA_MAX`` (default :data:`MALLOC_ARENAS`) in this
    process (``mallopt``) and its children (the variable); the value applied, None off glibc."""
    arenas = int(environ.setdefault("MALLOC_ARENA_MAX", str(MALLOC_ARENAS)))
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt): nothing to cap
        return None
    return arenas if mallopt(_M_ARENA_MAX, arenas) == 1 else None


def run(args: argparse.Namespace) -> int:
    limit_malloc_arenas()  # before torch, the pools or uvicorn start threads (module notes)
    import uvicorn  # heavy imports only when the command runs

    from vis_embed.model.embedder import Embedder
    from vis_embed.model.prepare_pool import resolve_workers
    from vis_embed.gallery.store import GalleryIndex
    from vis_embed.serving.app import ServerSettings, create_app
    from vis_embed.serving.hosts import default_allowed_hosts
    from vis_embed.serving.protocol import header_timeout_protocol

    for name in ("max_batch_size", "max_queue", "max_request_bytes", "max_items", "port", "url_workers",
                 "max_request_pixels", "max_connections", "max_header_bytes", "max_request_tokens",
                 "max_pixels_in_flight", "decode_workers"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("url_timeout", "request_timeout", "header_timeout", "keep_alive_timeout", "decode_timeout"):
        if not getattr(args, name) > 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    if args.max_input_tokens is not None and args.max_input_tokens < 1:
        raise ConfigError(f"--max-input-tokens must be >= 1, got {args.max_input_tokens}")
    if args.allow_private_urls and not args.allow_urls:
        raise ConfigError("--allow-private-urls widens --allow-urls; give both")
    api_key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV) or None
    allowed_hosts = (tuple(host.strip() for host in args.allowed_hosts.split(",") if host.strip())
                     if args.allowed_hosts else default_allowed_hosts(args.host))
    if allowed_hosts is not None and "*" in allowed_hosts:
        allowed_hosts = None
    index = None if args.index is None else GalleryIndex.load(args.index)  # a bad index fails before the model loads
    embedder = Embedder.from_pretrained(
        args.model, adapter=args.adapter, **model_settings(args),
        # A long-lived process: "auto" means the workers, whatever the size of the first request.
        workers=resolve_workers(args.workers))
    if index is not None:
        index.check_queries(embedder.fingerprint(), embedder.embedding_dim)  # the gallery's model, or exit 2
    embedder.start_workers(background=True)  # requests are prepared in-process until they are up
    settings = ServerSettings(
        model_name=args.served_model_name or args.model, max_batch_size=args.max_batch_size,
        max_wait_ms=args.max_wait_ms, max_queue=args.max_queue, max_request_bytes=args.max_request_bytes,
        max_items=args.max_items, allow_local_files=args.allow_local_files, url_timeout_s=args.url_timeout,
        allow_urls=args.allow_urls, allow_private_urls=args.allow_private_urls, url_workers=args.url_workers,
        api_key=api_key, max_input_tokens=args.max_input_tokens, long_input=args.long_input,
        max_request_pixels=args.max_request_pixels, request_timeout_s=args.request_timeout,
        allowed_hosts=allowed_hosts, max_request_tokens=args.max_request_tokens,
        max_pixels_in_flight=args.max_pixels_in_flight, decode_workers=args.decode_workers,
        decode_timeout_s=args.decode_timeout, dim=args.dim)
    uvicorn.run(create_app(embedder, settings, index), host=args.host, port=args.port, log_level="info",
                http=header_timeout_protocol(args.header_timeout, args.max_header_bytes),
                timeout_keep_alive=args.keep_alive_timeout,
                limit_concurrency=args.max_connections, h11_max_incomplete_event_size=args.max_header_bytes)
    return 0
