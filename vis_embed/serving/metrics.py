"""``GET /metrics``: the server's counters in Prometheus' text format (as TEI and vLLM expose).

Through ``prometheus_client``, on a registry of this app's own (two apps in one process, as in
the tests, do not share counters):

- ``vis_embed_requests_total{endpoint, code}``: answered requests by route and HTTP status
  (errors are the 4xx/5xx codes: ``sum by (code) (vis_embed_requests_total{code=~"4..|5.."})``);
- ``vis_embed_request_seconds{endpoint}``: latency histogram, body read to answer;
- ``vis_embed_items_total{endpoint}``: items accepted into the batcher;
- ``vis_embed_batch_items``: items per model batch (histogram, as the micro-batcher forms them);
- ``vis_embed_batch_seconds``: model time per batch (histogram);
- ``vis_embed_queue_depth``: requests waiting for the model, read at scrape time;
- ``vis_embed_connections_cut_total{reason}``: connections cut because their client did not
  read its answer (``send_timeout``, ``unsent_bytes``, ``unsent_bytes_total``: :mod:`.sends`);
- ``vis_embed_unsent_bytes``: answer bytes waiting for their clients, read at scrape time.

Behind the API key like every endpoint but ``/health``.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
METRICS_PATH = "/metrics"


class ServerMetrics:
    """The counters of one app (see the module docstring)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("vis_embed_requests", "answered requests by endpoint and HTTP status",
                                ["endpoint", "code"], registry=self.registry)
        self.latency = Histogram("vis_embed_request_seconds", "request latency, body read to answer",
                                 ["endpoint"], registry=self.registry)
        self.items = Counter("vis_embed_items", "items accepted for embedding", ["endpoint"], registry=self.registry)
        self.batch_items = Histogram("vis_embed_batch_items", "items per model batch", buckets=BATCH_BUCKETS,
                                     registry=self.registry)
        self.batch_seconds = Histogram("vis_embed_batch_seconds", "model time per batch", registry=self.registry)
        self.queue_depth = Gauge("vis_embed_queue_depth", "requests waiting for the model", registry=self.registry)
        self.cuts = Counter("vis_embed_connections_cut", "connections cut because their client did not read its "
                            "answer", ["reason"], registry=self.registry)
        self.unsent = Gauge("vis_embed_unsent_bytes", "answer bytes waiting for their clients",
                            registry=self.registry)

    def observing(self, embedder: Any) -> Any:
        """``embedder`` seen through a proxy that times each batch the micro-batcher runs."""
        return _ObservedEmbedder(embedder, self)

    def watch_queue(self, stats: Any) -> None:
        """Read the queue depth from ``stats()`` (the batcher's) at every scrape."""
        self.queue_depth.set_function(lambda: float(stats()["queued_requests"]))

    def watch_sends(self, guard: Any) -> None:
        """Count ``guard``'s cuts (a :class:`~vis_embed.serving.sends.SendGuard`) and read its unsent bytes."""
        for reason in guard.cuts:
            self.cuts.labels(reason)  # listed at 0 before the first cut
        guard.on_cut = lambda reason: self.cuts.labels(reason).inc()
        self.unsent.set_function(lambda: float(guard.unsent_bytes()))

    def install(self, app: FastAPI, authorized: Any) -> None:
        """The middleware counting every answered request, and ``GET /metrics``."""
        app.add_middleware(_CountingMiddleware, metrics=self)

        @app.get(METRICS_PATH, dependencies=[authorized])
        async def metrics() -> Response:
            return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    def record(self, endpoint: str, code: int, seconds: float) -> None:
        if endpoint != METRICS_PATH:
            self.requests.labels(endpoint, str(code)).inc()
            self.latency.labels(endpoint).observe(seconds)


def route_template(scope: dict[str, Any]) -> str:
    """The label of a request: its route's template, never the raw path (an unknown path is one
    label, not one per URL)."""
    return getattr(scope.get("route"), "path", None) or "unmatched"


class _CountingMiddleware:
    """Plain ASGI: sees the status of every answer, error handlers' included (a request that
    dies without one counts as 500)."""

    def __init__(self, app: Any, metrics: ServerMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [500]

        async def send_and_note(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            self.metrics.record(route_template(scope), status[0], time.perf_counter() - started)


class _ObservedEmbedder:
    """Delegates everything to the embedder; ``encode_partial`` (one model batch) is measured."""

    def __init__(self, embedder: Any, metrics: ServerMetrics) -> None:
        self._embedder, self._metrics = embedder, metrics

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)

    def encode_partial(self, items: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self._embedder.encode_partial(items, *args, **kwargs)
        finally:
            self._metrics.batch_items.observe(len(items))
            self._metrics.batch_seconds.observe(time.perf_counter() - started)
