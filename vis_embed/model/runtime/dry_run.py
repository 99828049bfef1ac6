"""``vis-embed encode --dry-run``: prepare every item as a real encode would, without the model
(the library half, beside encode_file.py; arguments: model/cli.py).

Loads only the processor (and the model's config, for its token limit), then runs the encode
path's own steps -- reading the JSONL (:func:`~vis_embed.model.runtime.encode_file.read_items`), the
length estimate and length-sorted batches (``Embedder.batch_plan``),
and :meth:`Embedder.prepared_batches` in N worker processes (validation, decoding, resizing,
tokenising) -- and reports the bad items (with ``--on-error skip``: ``OUTPUT.rejects.jsonl``
as a real encode writes it) and token-count statistics.  The check to run on a million-item
gallery before booking GPUs, and a clean measure of the preparation side alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vis_embed.errors import ConfigError, DataError
from vis_embed.model.embedding_config import EmbeddingConfig
from vis_embed.model.inputs.preparer import Preparer, PreparesItems, token_limit

if TYPE_CHECKING:
    from transformers import PretrainedConfig, ProcessorMixin

    from vis_embed.model.runtime.embedder import Embedder


class ProcessorOnlyModel(PreparesItems):
    """What the Embedder's preparation path reads from an EmbeddingModel, without weights."""

    def __init__(self, processor: ProcessorMixin, config: PretrainedConfig, embedding_config: EmbeddingConfig) -> None:
        self.processor = processor
        self.config = config  # the checkpoint's transformers config (its token limit)
        self.embedding_config = embedding_config
        self.truncated_items = 0

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, embedding_config: EmbeddingConfig) -> ProcessorOnlyModel:
        from transformers import AutoConfig, AutoProcessor

        try:
            return cls(AutoProcessor.from_pretrained(str(name_or_path)), AutoConfig.from_pretrained(str(name_or_path)),
                       embedding_config)
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigError(f"cannot load the processor of {str(name_or_path)!r}: {exc}") from exc

    def eval(self) -> ProcessorOnlyModel:
        return self

    def preparer(self) -> Preparer:
        return Preparer(self.processor, self.embedding_config,
                        token_limit(self.embedding_config.max_length, self.processor.tokenizer, self.config))


@dataclass
class DryRunReport:
    """What a dry run found: items prepared, rejected, token counts, padding at the batch rule."""

    input: Path
    prepared: int
    rejects: int
    rejects_path: Path | None
    lengths: list[int] = field(repr=False)
    padded_tokens: int
    truncated: int
    workers: int
    seconds: float

    def statistics(self) -> dict[str, Any]:
        lengths = np.asarray(self.lengths or [0])
        real = int(lengths.sum()) if self.lengths else 0
        return {"items": self.prepared, "rejected": self.rejects, "truncated": self.truncated,
                "tokens": {"count": real, "mean": float(lengths.mean()), "p50": float(np.percentile(lengths, 50)),
                           "p95": float(np.percentile(lengths, 95)), "max": int(lengths.max())},
                "padding_fraction": self.padded_tokens / max(real + self.padded_tokens, 1),
                "workers": self.workers, "seconds": self.seconds,
                "items_per_s": self.prepared / self.seconds if self.seconds > 0 else None}

    def summary(self) -> str:
        stats = self.statistics()
        tokens = stats["tokens"]
        text = (f"dry run of {self.input}: {self.prepared} item(s) prepared in {self.seconds:.2f} s with "
                f"{self.workers} worker process(es) ({stats['items_per_s'] or 0:.1f} items/s); tokens per item: "
                f"mean {tokens['mean']:.1f}, p50 {tokens['p50']:.0f}, p95 {tokens['p95']:.0f}, max {tokens['max']}; "
                f"{tokens['count']} tokens, padding at the batch rule {100 * stats['padding_fraction']:.1f}%")
        if self.rejects:
            text += f"; {self.rejects} rejected line(s)" + (f" in {self.rejects_path}" if self.rejects_path else "")
        if self.truncated:
            text += f"; {self.truncated} item(s) would have their text cut to the model's token limit"
        return text


def dry_run_jsonl(model: str | Path, input_path: Path, *, adapter: str | Path | None = None,
                  output: Path | None = None, instruction: str | None = None, batch_size: int = 16,
                  workers: int | str = "auto", on_error: str = "raise", show_progress: bool = False,
                  **settings: Any) -> DryRunReport:
    """Prepare every item of ``input_path`` as ``encode_jsonl`` would; write nothing but, with
    ``on_error="skip"`` and an ``output``, the rejects file a real encode would write beside it.
    ``settings`` are EmbeddingConfig values given explicitly; the rest come from the files
    recorded with ``model`` / ``adapter`` (as a real encode resolves them)."""
    from vis_embed.model.embedding_config import resolve_embedding_config
    from vis_embed.io import write_jsonl
    from vis_embed.model.runtime.embedder import Embedder
    from vis_embed.model.runtime.encode_file import read_items, rejects_of, sidecar_paths

    input_path = Path(input_path)
    items, ids, lines, rejects = read_items(input_path, on_error)
    config = resolve_embedding_config(model, adapter, **settings)
    stand_in = ProcessorOnlyModel.from_pretrained(model, config)
    embedder = Embedder(stand_in, workers=workers)  # type: ignore[arg-type]  # its preparation path only
    started = time.perf_counter()
    batches = embedder.batch_plan(items, instruction, batch_size, input_path.parent)
    errors: dict[int, DataError] = {}
    lengths: list[int] = []
    padded = 0
    try:
        for prepared, _indices in embedder.prepared_batches(items, batches, instruction, input_path.parent,
                                                            on_error, errors, collate=False):
            batch_lengths = [item.length for item in prepared or []]
            lengths += batch_lengths
            padded += len(batch_lengths) * max(batch_lengths, default=0) - sum(batch_lengths)
    except DataError as exc:
        from vis_embed.model.runtime.encode_file import anchor_error

        raise anchor_error(exc, input_path, lines) from None
    finally:
        embedder.close()
    seconds = time.perf_counter() - started
    rejects = rejects_of(errors, items, ids, lines, rejects, input_path)
    rejects_path = None
    if on_error == "skip" and output is not None:
        rejects_path = sidecar_paths(Path(output))[1]
        write_jsonl(rejects_path, rejects)
    return DryRunReport(input=input_path, prepared=len(lengths), rejects=len(rejects), rejects_path=rejects_path,
                        lengths=lengths, padded_tokens=padded, truncated=stand_in.truncated_items,
                        workers=_workers_used(embedder, items), seconds=seconds)


def _workers_used(embedder: Embedder, items: list[dict[str, Any]]) -> int:
    from vis_embed.model.runtime.prepare_pool import resolve_workers

    from vis_embed.data.items import decoded_items

    return resolve_workers(embedder.workers, decoded_items(items))
