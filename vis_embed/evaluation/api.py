"""The function form of ``vis-embed eval``: manifest -> dataset specs -> harness -> results.

Library code shared by the command line (:mod:`vis_embed.evaluation.cli`) and the
quickstart; nothing here parses arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vis_embed.data import load_benchmark
from vis_embed.errors import ConfigError, DataError
from vis_embed.evaluation.harness import Encoder, EvalSettings, Harness, describe_encoder
from vis_embed.evaluation.layouts import LAYOUTS, DatasetSpec
from vis_embed.evaluation.settings import INDEX_KINDS
from vis_embed.model.embedder import Embedder


def _get(entry: Any, key: str, default: Any = None) -> Any:
    if isinstance(entry, dict):
        return entry.get(key, default)
    return getattr(entry, key, default)


def spec_from_entry(entry: Any) -> DatasetSpec:
    """Adapt one entry of ``vis_embed.data.load_benchmark`` (object or dict) to a DatasetSpec."""
    files = {}
    for role in ("path", "queries", "gallery"):
        value = _get(entry, role)
        if value is None and isinstance(_get(entry, "paths"), dict):
            value = _get(entry, "paths").get(role)
        if value is not None:
            files[role] = Path(value)
    image_root = _get(entry, "image_root")
    layout = str(_get(entry, "layout", "candidates"))
    if layout not in LAYOUTS:
        raise ConfigError(f"dataset {_get(entry, 'name')!r}: unknown layout {layout!r}; expected one of {LAYOUTS}")
    instructions = _get(entry, "instructions") or {}
    options = dict(_get(entry, "options") or {})
    if "index" in options and options["index"] not in INDEX_KINDS:
        raise DataError(f"unknown index {options['index']!r}; expected one of {', '.join(INDEX_KINDS)}",
                        path=_get(entry, "manifest_path"), line=_get(entry, "line"),
                        field=f"{_get(entry, 'name')}.options.index")
    return DatasetSpec(
        name=str(_get(entry, "name")), layout=layout, meta_task=str(_get(entry, "meta_task")),
        split=_get(entry, "split"), benchmark=_get(entry, "benchmark"), files=files,
        image_root=Path(image_root) if image_root else None,
        query_instruction=_get(entry, "query_instruction", instructions.get("query")),
        candidate_instruction=_get(entry, "candidate_instruction", instructions.get("candidate")),
        options=options,
    )


def load_specs(manifest: Path) -> tuple[list[DatasetSpec], str]:
    """Dataset specs of a manifest and the manifest's fingerprint.

    Parsing and validation belong to ``vis_embed.data.load_benchmark`` (errors name the file,
    line and key); this only adapts its entries to the harness's DatasetSpec.
    """
    benchmark = load_benchmark(manifest)
    return [spec_from_entry(entry) for entry in benchmark.datasets], benchmark.fingerprint()


def load_embedder(model: str | Path, adapter: str | Path | None = None, **overrides: Any) -> Embedder:
    """``Embedder.from_pretrained`` with the overrides that are not None (prompt_format, max_pixels, device)."""
    given = {key: value for key, value in overrides.items() if value is not None}
    return Embedder.from_pretrained(str(model), adapter=None if adapter is None else str(adapter), **given)


def evaluate_encoder(encoder: Encoder, specs: list[DatasetSpec], benchmark_fingerprint: str, out: str | Path,
                     settings: EvalSettings, *, model_name: str | None = None,
                     adapter: str | Path | None = None) -> dict[str, Any]:
    """Run the harness for ``encoder`` on loaded specs; write OUT/results.json etc.; return the results."""
    model_info = describe_encoder(encoder, model_name, None if adapter is None else str(adapter))
    return Harness(encoder, Path(out), settings, model_info).run(specs, benchmark_fingerprint)


def evaluate_model(model: str | Path, benchmark: str | Path, out: str | Path, *, adapter: str | Path | None = None,
                   show_progress: bool = True, **settings: Any) -> dict[str, Any]:
    """Evaluate ``model`` (+ ``adapter``) on a manifest; write OUT/results.json etc.; return the results.

    ``settings`` are EvalSettings fields (batch_size, datasets, max_queries, pictures, ...).  The
    manifest is validated before the model is loaded, so a bad manifest fails in milliseconds.
    """
    specs, benchmark_fingerprint = load_specs(Path(benchmark))
    encoder = load_embedder(model, adapter)
    return evaluate_encoder(encoder, specs, benchmark_fingerprint, out,
                            EvalSettings(show_progress=show_progress, **settings), model_name=str(model), adapter=adapter)
