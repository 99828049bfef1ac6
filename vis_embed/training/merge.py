"""Fold a LoRA adapter into the base weights (the library half of ``vis-embed merge``).

The output is a full checkpoint (weights + config + processor) that
``Embedder.from_pretrained(OUT)`` loads without peft -- what one ships or serves.  The command
line is in :mod:`vis_embed.training.cli`.
"""

from __future__ import annotations

import json
from pathlib import Path

from peft import PeftModel
from transformers import AutoModelForImageTextToText, AutoProcessor

from vis_embed.errors import ConfigError
from vis_embed.io import atomic_directory
from vis_embed.model.embedding_model import resolve_dtype


def base_model_of(adapter_dir: Path) -> str:
    config_path = adapter_dir / "adapter_config.json"
    if not config_path.is_file():
        raise ConfigError(f"{adapter_dir}: no adapter_config.json (not a LoRA adapter directory)")
    base = json.loads(config_path.read_text(encoding="utf-8")).get("base_model_name_or_path")
    if not base:
        raise ConfigError(f"{config_path}: no base_model_name_or_path; pass --base")
    return str(base)


def merge_adapter(adapter: str | Path, out: str | Path, base: str | None = None, dtype: str = "auto") -> Path:
    """Merge ``adapter`` into ``base`` and save a full checkpoint to ``out`` (atomically)."""
    adapter_dir = Path(adapter)
    base = base or base_model_of(adapter_dir)
    # "auto" here keeps the base checkpoint's own dtype (transformers' "auto"), not the device default.
    torch_dtype = "auto" if dtype == "auto" else resolve_dtype(dtype)
    model = AutoModelForImageTextToText.from_pretrained(base, dtype=torch_dtype)
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    processor = AutoProcessor.from_pretrained(base)
    with atomic_directory(out) as tmp:
        merged.save_pretrained(str(tmp), safe_serialization=True)
        processor.save_pretrained(str(tmp))
    return Path(out)
