"""``vis-embed serve``: argument parsing and start-up (FastAPI, uvicorn and torch load on run).

    vis-embed serve --model M [--adapter A] [--host 127.0.0.1] [--port 8000]
                    [--max-batch-size N] [--max-wait-ms T] [--max-queue Q] [--allow-local-files]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vis_embed.errors import ConfigError
from vis_embed.model.cli import add_model_loading_arguments
from vis_embed.model.defaults import add_preparation_arguments

# Kept in step with vis_embed.serving.app / images (not imported: they import FastAPI).
_MAX_REQUEST_BYTES = 32 * 1024 * 1024
_MAX_ITEMS = 1024
_URL_TIMEOUT_S = 5.0


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
                        help=f"seconds to fetch an image URL (default: {_URL_TIMEOUT_S})")
    parser.add_argument("--allow-local-files", action="store_true",
                        help="accept image paths on the server's disk (off: any client could read its files)")
    add_model_loading_arguments(parser)
    add_preparation_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import uvicorn  # heavy imports only when the command runs

    from vis_embed.model.embedder import Embedder
    from vis_embed.model.prepare_pool import resolve_workers
    from vis_embed.serving.app import ServerSettings, create_app

    for name in ("max_batch_size", "max_queue", "max_request_bytes", "max_items", "port"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    embedder = Embedder.from_pretrained(
        args.model, adapter=args.adapter, device=args.device, dtype=args.dtype,
        min_pixels=args.min_pixels, max_pixels=args.max_pixels, prompt_format=args.prompt_format,
        compile=args.compile, decode=args.decode or "exact",
        # A long-lived process: "auto" means the workers, whatever the size of the first request.
        workers=resolve_workers(args.workers))
    embedder.start_workers(background=True)  # requests are prepared in-process until they are up
    settings = ServerSettings(
        model_name=args.served_model_name or args.model, max_batch_size=args.max_batch_size,
        max_wait_ms=args.max_wait_ms, max_queue=args.max_queue, max_request_bytes=args.max_request_bytes,
        max_items=args.max_items, allow_local_files=args.allow_local_files, url_timeout_s=args.url_timeout)
    uvicorn.run(create_app(embedder, settings), host=args.host, port=args.port, log_level="info")
    return 0
