"""``vis-embed merge --base MODEL --adapter DIR --out DIR``: fold a LoRA adapter into the weights.

The output is a full checkpoint (weights + config + processor) that
``Embedder.from_pretrained(OUT)`` loads without peft -- what one ships or serves.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vis_embed.errors import ConfigError
from vis_embed.io import atomic_directory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("adapter", help="adapter directory (OUTPUT_DIR/final or a checkpoint-STEP)")
    parser.add_argument("--base", default=None,
                        help="base model (default: base_model_name_or_path in adapter_config.json)")
    parser.add_argument("--out", required=True, help="directory of the merged checkpoint")
    parser.add_argument("--dtype", choices=["auto", "bfloat16", "float32"], default="auto",
                        help="dtype of the merged weights (auto: the base checkpoint's)")


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
    import torch
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    adapter_dir = Path(adapter)
    base = base or base_model_of(adapter_dir)
    torch_dtype = {"auto": "auto", "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    model = AutoModelForImageTextToText.from_pretrained(base, dtype=torch_dtype)
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    processor = AutoProcessor.from_pretrained(base)
    with atomic_directory(out) as tmp:
        merged.save_pretrained(str(tmp), safe_serialization=True)
        processor.save_pretrained(str(tmp))
    return Path(out)


def run(args: argparse.Namespace) -> int:
    out = merge_adapter(args.adapter, args.out, base=args.base, dtype=args.dtype)
    print(f"merged checkpoint written to {out}")
    return 0
