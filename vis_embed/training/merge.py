"""Fold a LoRA adapter into the base weights (the library half of ``vis-embed merge``).

The output is a full checkpoint (weights + config + processor) that
``Embedder.from_pretrained(OUT)`` loads without peft -- what one ships or serves.  It works
from any directory: the base is the adapter's recorded ``base_model_name_or_path`` (a hub id or
an absolute path) or ``--base``; a base that looks like a path and does not exist fails at
once, and a path is never looked up on the hub (no network retries).  The command line is in
:mod:`vis_embed.training.cli`; loading and merging are shared with ``vis-embed export``
(:func:`vis_embed.model.files.export.load_merged`).
"""

from __future__ import annotations

from pathlib import Path

from vis_embed.io import atomic_directory
from vis_embed.model.defaults import CHECKPOINT_MARKER
from vis_embed.model.embedding_config import resolve_embedding_config
from vis_embed.model.files.export import load_merged, recorded_base
from vis_embed.model.network.adaptation import FullAdaptation
from vis_embed.model.references import local_model_dir

__all__ = ["merge_adapter"]


def merge_adapter(adapter: str | Path, out: str | Path, base: str | None = None,
                  dtype: str | None = "checkpoint") -> Path:
    """Merge ``adapter`` into ``base`` and save a full checkpoint to ``out`` (atomically), with the
    adapter's recorded ``embedding_config.json`` (over the base's) beside it.  ``dtype``: the merged
    weights' ("checkpoint", the default: the base checkpoint's own; "auto": by device)."""
    adapter = local_model_dir(adapter)  # a Hub id: its cached snapshot
    base = recorded_base(base, adapter)
    # ``out`` checked before the model loads: a folder of other files, or holding the inputs, is refused
    with atomic_directory(out, marker=CHECKPOINT_MARKER, what="a model checkpoint", inputs=(adapter, base)) as tmp:
        # ``dtype`` is the written weights' only: the recorded dtype policy (how the model loads
        # for inference: auto, float32 on a CPU) stays the adapter's
        config = resolve_embedding_config(base, adapter)
        merged, processor = load_merged(base, adapter, dtype)
        merged.save_pretrained(str(tmp), safe_serialization=True)
        processor.save_pretrained(str(tmp))
        config.model_copy(update={"adaptation": FullAdaptation.kind}).save(tmp)  # full weights now
    return Path(out)
