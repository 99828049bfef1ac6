"""Settings of the server and of ``vis-embed serve``, and the defaults of its limits.

ServerSettings is a pydantic model like every validated config of the package: its bounds are
checked on construction (a SettingsError naming the field, or, from the command line, the
flag: :class:`vis_embed.config.Settings`), and ``vis-embed serve`` generates its flags from the fields
(:func:`vis_embed.config.add_model_arguments`: each field's ``json_schema_extra`` names its
flag), so a default or help text is written once.  ``model_name``, ``api_key`` (also from
``$VIS_EMBED_API_KEY``) and ``allowed_hosts`` (default from ``--host``) are derived by the
command (:mod:`vis_embed.serving.cli`); :func:`vis_embed.serving.app.create_app` reads the
rest but ``host`` .. ``max_header_bytes``, which the command hands to uvicorn.

Kept free of heavy imports (no torch, FastAPI or PIL) because the command line builds its
``--help`` from it before anything is loaded; the limits' defaults live here for the same
reason (images.py, limits.py and budget.py import them).

The security-relevant defaults and what each protects against: docs/serving.md#deploying.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import ConfigDict, Field

from vis_embed.config import Settings, flag

API_KEY_ENV = "VIS_EMBED_API_KEY"
DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_ITEMS = 1024
DEFAULT_REQUEST_TIMEOUT_S = 60.0
DEFAULT_URL_TIMEOUT_S = 5.0
DEFAULT_MAX_IMAGE_BYTES = 20 * 1024 * 1024
DEFAULT_URL_WORKERS = 4
DEFAULT_MAX_REQUEST_PIXELS = 64_000_000  # five 12 MP photos, or ~300 of 448 x 448; RGB: 192 MB
DEFAULT_DECODE_WORKERS = 2
DEFAULT_DECODE_TIMEOUT_S = 10.0
DEFAULT_MAX_REQUEST_TOKENS = 131_072  # 1,024 items of 128 tokens, or 16 at the model's 8,192
DEFAULT_MAX_PIXELS_IN_FLIGHT = 128_000_000  # two requests at --max-request-pixels; RGB in PIL: 512 MB
# queries x k x rescore x width: 64 queries x k 1000 at width 1,024, or 1,024 x k 16 x 4 at 1,024
DEFAULT_MAX_SEARCH_FLOATS = 2 ** 26
DEFAULT_MAX_SEARCH_FLOATS_IN_FLIGHT = 2 ** 27  # two requests at --max-search-floats
DEFAULT_SEARCH_WORKERS = 2
DEFAULT_SEND_TIMEOUT_S = 30.0
DEFAULT_MAX_UNSENT_BYTES = 128 * 1024 * 1024  # above the largest answer: 1,024 vectors of 4,096 floats as JSON
DEFAULT_MAX_UNSENT_BYTES_TOTAL = 512 * 1024 * 1024

LongInput = Literal["refuse", "truncate"]  # an input over max_input_tokens: 400, or its text cut
LONG_INPUT_MODES: tuple[str, ...] = get_args(LongInput)
LIMITS = "limits"  # the argument group of the flags that bound what one client can make the server do
GALLERIES = "galleries"


def _limit(spelling: str, **extra: Any) -> dict[str, Any]:
    return flag(spelling, group=LIMITS, **extra)


class ServerSettings(Settings):
    """How the server answers (:func:`vis_embed.serving.app.create_app`) and listens (``vis-embed serve``)."""

    # protected_namespaces: model_name is the field's name since before it was a pydantic model
    model_config = ConfigDict(protected_namespaces=())

    model_name: str  # the name clients send as "model" and /v1/models lists (serve: --served-model-name / --model)
    host: str = Field("127.0.0.1", description="address to listen on (127.0.0.1: this machine only)",
                      json_schema_extra=flag("--host"))
    port: int = Field(8000, gt=0, le=65535, description="port", json_schema_extra=flag("--port"))
    max_batch_size: int = Field(32, gt=0, description="most items per micro-batch across requests",
                                json_schema_extra=flag("--max-batch-size"))
    max_wait_ms: float = Field(5.0, ge=0, description="longest wait for more requests before a batch starts",
                               json_schema_extra=flag("--max-wait-ms"))
    max_queue: int = Field(256, gt=0, description="requests that may wait; beyond, 429",
                           json_schema_extra=flag("--max-queue"))
    max_request_bytes: int = Field(DEFAULT_MAX_REQUEST_BYTES, gt=0, description="largest request body; beyond, 413",
                                   json_schema_extra=flag("--max-request-bytes"))
    max_items: int = Field(DEFAULT_MAX_ITEMS, gt=0, description="most items per request; beyond, 413",
                           json_schema_extra=flag("--max-items"))
    url_timeout_s: float = Field(DEFAULT_URL_TIMEOUT_S, gt=0, description="seconds one whole image-URL fetch may take",
                                 json_schema_extra=flag("--url-timeout", metavar="URL_TIMEOUT"))
    allow_local_files: bool = Field(False, description="accept image paths on the server's disk (off: any client "
                                    "could read its files)", json_schema_extra=flag("--allow-local-files"))
    max_image_bytes: int = Field(DEFAULT_MAX_IMAGE_BYTES, gt=0)  # one encoded image (no flag)
    # ---- exposure and limits (docs/serving.md#deploying)
    api_key: str | None = Field(None, description=f"require 'Authorization: Bearer KEY' on every endpoint but "
                                f"/health (default: ${API_KEY_ENV} if set, else no key)",
                                json_schema_extra=_limit("--api-key"))
    allowed_hosts: tuple[str, ...] | None = Field(
        None, description="comma-separated Host header names the server answers (defence against DNS rebinding); "
        "default: localhost,127.0.0.1,::1 when --host is loopback, else any",  # None: any (serving.hosts)
        json_schema_extra=_limit("--allowed-hosts", parse="comma_list", metavar="ALLOWED_HOSTS"))
    allow_urls: bool = Field(False, description="fetch http(s) image URLs (off: a client could make the server "
                             "request any URL)", json_schema_extra=_limit("--allow-urls"))
    allow_private_urls: bool = Field(False, description="with --allow-urls, also fetch loopback, private, "
                                     "link-local and multicast addresses (off: the server's own machine and "
                                     "network stay out of reach)", json_schema_extra=_limit("--allow-private-urls"))
    url_workers: int = Field(DEFAULT_URL_WORKERS, gt=0, description="threads fetching URLs; more fetches wait",
                             json_schema_extra=_limit("--url-workers"))
    max_input_tokens: int | None = Field(None, gt=0, description="most tokens per input (instruction + text + "
                                         "image); default: the model's recorded max length, else 8192",
                                         json_schema_extra=_limit("--max-input-tokens"))
    long_input: LongInput = Field(
        "refuse", description="an input over --max-input-tokens: refused with 400 (as OpenAI) or its text cut at "
        "the end", json_schema_extra=_limit("--long-input"))
    max_request_pixels: int = Field(DEFAULT_MAX_REQUEST_PIXELS, gt=0, description="most image pixels per request, "
                                    "from the headers, before decoding; beyond, 413",
                                    json_schema_extra=_limit("--max-request-pixels"))
    request_timeout_s: float = Field(DEFAULT_REQUEST_TIMEOUT_S, gt=0, description="seconds one request may take, "
                                     "body to answer; beyond, 504",
                                     json_schema_extra=_limit("--request-timeout", metavar="REQUEST_TIMEOUT"))
    header_timeout_s: float = Field(10.0, gt=0, description="seconds a new connection may take to send its "
                                    "request headers",
                                    json_schema_extra=_limit("--header-timeout", metavar="HEADER_TIMEOUT"))
    keep_alive_timeout_s: float = Field(5.0, gt=0, description="seconds an idle keep-alive connection stays open",
                                        json_schema_extra=_limit("--keep-alive-timeout", metavar="KEEP_ALIVE_TIMEOUT"))
    max_connections: int = Field(512, gt=0, description="open connections and requests at once; beyond, 503",
                                 json_schema_extra=_limit("--max-connections"))
    max_header_bytes: int = Field(16384, gt=0, description="largest request head (request line + headers); "
                                  "beyond, 431", json_schema_extra=_limit("--max-header-bytes"))
    max_request_tokens: int = Field(DEFAULT_MAX_REQUEST_TOKENS, gt=0, description="most tokens per request "
                                    "(items x tokens, the instruction in each); beyond, 413",
                                    json_schema_extra=_limit("--max-request-tokens"))
    max_pixels_in_flight: int = Field(DEFAULT_MAX_PIXELS_IN_FLIGHT, gt=0, description="most decoded image pixels "
                                      "of all requests at once; more wait",
                                      json_schema_extra=_limit("--max-pixels-in-flight"))
    decode_workers: int = Field(DEFAULT_DECODE_WORKERS, gt=0, description="threads decoding request images; more "
                                "images wait", json_schema_extra=_limit("--decode-workers"))
    decode_timeout_s: float = Field(DEFAULT_DECODE_TIMEOUT_S, gt=0, description="seconds one image's decode may "
                                    "take; beyond, 400",
                                    json_schema_extra=_limit("--decode-timeout", metavar="DECODE_TIMEOUT"))
    max_search_floats: int = Field(DEFAULT_MAX_SEARCH_FLOATS, gt=0, description="most search work per request: "
                                   "queries x k x rescore (1 for a flat index) x the index's width, in floats; "
                                   "beyond, 413", json_schema_extra=_limit("--max-search-floats"))
    max_search_floats_in_flight: int = Field(DEFAULT_MAX_SEARCH_FLOATS_IN_FLIGHT, gt=0, description="most search "
                                             "work of all requests at once (as --max-search-floats); more wait",
                                             json_schema_extra=_limit("--max-search-floats-in-flight"))
    search_workers: int = Field(DEFAULT_SEARCH_WORKERS, gt=0, description="threads searching the index and "
                                "encoding search answers; more searches wait",
                                json_schema_extra=_limit("--search-workers"))
    send_timeout_s: float = Field(DEFAULT_SEND_TIMEOUT_S, gt=0, description="seconds an answer may wait for its "
                                  "client to read it; beyond, the connection is cut",
                                  json_schema_extra=_limit("--send-timeout", metavar="SEND_TIMEOUT"))
    max_unsent_bytes: int = Field(DEFAULT_MAX_UNSENT_BYTES, gt=0, description="most answer bytes waiting for one "
                                  "client to read them; beyond, its connection is cut",
                                  json_schema_extra=_limit("--max-unsent-bytes"))
    max_unsent_bytes_total: int = Field(DEFAULT_MAX_UNSENT_BYTES_TOTAL, gt=0, description="most answer bytes "
                                        "waiting for all clients together; beyond, the longest-waiting are cut",
                                        json_schema_extra=_limit("--max-unsent-bytes-total"))
    # ---- galleries (docs/galleries.md)
    dim: int | None = Field(None, gt=0, description="width of the vectors answered when a request names no "
                            "`dimensions` (Matryoshka prefix, renormalised; default: the model's full width)",
                            json_schema_extra=flag("--dim", group=GALLERIES, metavar="N"))
