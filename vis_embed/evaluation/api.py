"""The function form of ``vis-embed eval``: manifest -> dataset specs -> harness -> results.

Library code shared by the command line (:mod:`vis_embed.evaluation.cli`) and the
quickstart; nothing here parses arguments.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from vis_embed.data import EvalDatasetSpec, load_benchmark
from vis_embed.distributed import torchrun_group
from vis_embed.embedding_cache import CacheStats
from vis_embed.evaluation.harness import Encoder, EvalSettings, Harness, describe_encoder
from vis_embed.evaluation.protocol_runs import protocol_embedding_values
from vis_embed.model.runtime.embedder import load_embedder
from vis_embed.model.embedding_config import EmbeddingConfig

log = logging.getLogger(__name__)


def load_specs(manifest: Path) -> tuple[list[EvalDatasetSpec], str]:
    """Dataset specs of a manifest and the manifest's fingerprint.

    Parsing and validation, dataset options included, belong to ``vis_embed.data.load_benchmark``
    (errors name the file, line and key).
    """
    specs, fingerprint, _protocol = load_benchmark_specs(manifest)
    return specs, fingerprint


def load_benchmark_specs(manifest: Path) -> tuple[list[EvalDatasetSpec], str, str | None]:
    """:func:`load_specs` and the manifest's ``protocol`` (None when it names none)."""
    benchmark = load_benchmark(manifest)
    return list(benchmark.datasets), benchmark.fingerprint(), benchmark.protocol


def protocol_settings(protocol: str | None, given: dict[str, Any]) -> dict[str, Any]:
    """``Embedder.from_pretrained``'s keywords: the flags given, then the protocol's EmbeddingConfig
    values (:func:`vis_embed.evaluation.protocol_runs.protocol_embedding_values`)."""
    return protocol_embedding_values(protocol, given, EmbeddingConfig.model_fields)


def evaluate_encoder(encoder: Encoder, specs: list[EvalDatasetSpec], benchmark_fingerprint: str, out: str | Path,
                     settings: EvalSettings, *, model_name: str | None = None,
                     adapter: str | Path | None = None, cache_stats: CacheStats | None = None) -> dict[str, Any] | None:
    """Run the harness for ``encoder`` on loaded specs; write OUT/results.json etc.; return the results.

    Under torchrun (inside :func:`vis_embed.distributed.torchrun_group`) every rank calls this;
    rank 0 writes and returns the results, the others return None.  ``cache_stats``, when
    given, counts this rank's encoded and reused shards.
    """
    model_info = describe_encoder(encoder, model_name, None if adapter is None else str(adapter))
    results = Harness(encoder, Path(out), settings, model_info, cache_stats).run(specs, benchmark_fingerprint)
    if results is not None and adapter is not None:
        try:
            record_run_evaluation(Path(adapter), results)
        except OSError as exc:  # a read-only model directory: the results themselves are written
            log.warning("could not put the evaluation on %s's model card: %s", adapter, exc)
    return results


def record_run_evaluation(adapter: Path, results: dict[str, Any]) -> None:
    """An evaluated adapter that carries a vis_embed model card (a training run's ``final/``)
    gets the results on its card (model-index) and, when its run logged to Weights & Biases,
    in that run's summary: the run's last evaluation travels with the model."""
    from vis_embed.integrations.wandb import log_evaluation
    from vis_embed.model.files.model_card import evaluation_summary, record_evaluation

    if not record_evaluation(adapter, results):
        return
    summary = evaluation_summary(results)
    metrics = {f"{name}/{entry['metric']}": entry["value"] for name, entry in summary["datasets"].items()}
    metrics.update({f"group/{name}": value for name, value in summary["groups"].items()})
    log_evaluation(adapter.parent, metrics)


def evaluate_model(model: str | Path, benchmark: str | Path, out: str | Path, *, adapter: str | Path | None = None,
                   show_progress: bool = True, **settings: Any) -> dict[str, Any] | None:
    """Evaluate ``model`` (+ ``adapter``) on a manifest; write OUT/results.json etc.; return the results.

    ``settings`` are EvalSettings fields (batch_size, datasets, max_queries, pictures, ...).  The
    manifest is validated before the model is loaded, so a bad manifest fails in milliseconds.
    Launched by torchrun, the ranks share the encoding and rank 0 returns the results (the
    others None).
    """
    specs, benchmark_fingerprint, manifest_protocol = load_benchmark_specs(Path(benchmark))
    eval_settings = EvalSettings(show_progress=show_progress, **settings)
    eval_settings = eval_settings.model_copy(update={"protocol": eval_settings.protocol or manifest_protocol})
    with torchrun_group():
        encoder = load_embedder(model, adapter, **protocol_settings(eval_settings.protocol, {}))
        return evaluate_encoder(encoder, specs, benchmark_fingerprint, out, eval_settings,
                                model_name=str(model), adapter=adapter)
