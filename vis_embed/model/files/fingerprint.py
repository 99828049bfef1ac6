"""An Embedder's identity for caches: checkpoint files + adapter files + every setting.

:func:`model_fingerprint` is what ``Embedder.fingerprint()`` returns and every embedding cache
key (the eval cache, encode's shards) starts from.  The settings part is the hash of the
effective :class:`~vis_embed.model.embedding_config.EmbeddingConfig`'s dump, not a list of
fields, so a field added to the config joins every key (all but ``adaptation``: what trained,
not how the model embeds; :meth:`EmbeddingConfig.fingerprint`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vis_embed.io import fingerprint_files, fingerprint_json, read_json_value
from vis_embed.model.embedding_config import EmbeddingConfig
from vis_embed.model.references import ADAPTER_CONFIG, HEAD_CONFIG

if TYPE_CHECKING:
    import torch

    from vis_embed.model.network.embedding_model import EmbeddingModel

# Keys that record how a file was loaded or written, not what the model computes.
_VOLATILE_JSON_KEYS = {"is_local", "local_files_only", "name_or_path", "_name_or_path",
                       "transformers_version", "_commit_hash"}
# Files whose contents define a checkpoint's behaviour (for fingerprints).
_CHECKPOINT_FILES = ("*.safetensors", "*.bin", "config.json", "tokenizer.json",
                     "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
                     "processor_config.json", "preprocessor_config.json",
                     "video_preprocessor_config.json", ADAPTER_CONFIG, HEAD_CONFIG,
                     # an export's projection head (a Dense module), which the model loads with it
                     "modules.json", "*_Dense/config.json", "*_Dense/model.safetensors")


def model_fingerprint(model: EmbeddingModel, config: EmbeddingConfig) -> str:
    """Weights + adapter + the effective settings ``config`` of a loaded ``model``."""
    return fingerprint_json({
        "weights": checkpoint_fingerprint(model.name_or_path, model.backbone),
        "adapter": checkpoint_fingerprint(model.adapter, None) if model.adapter else None,
        "settings": config.fingerprint(),
    })


def checkpoint_fingerprint(name_or_path: str | None, backbone: torch.nn.Module | None) -> str:
    """Content hash of a local checkpoint's files, or hub id + resolved commit.

    JSON files are hashed after parsing, without keys that only record how a file was loaded
    (``is_local``, ...), so a checkpoint re-saved unchanged keeps its fingerprint.
    """
    if name_or_path is None:
        return "in-memory"
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        commit = getattr(getattr(backbone, "config", None), "_commit_hash", None)
        return f"{name_or_path}@{commit}"
    files = sorted({f for pattern in _CHECKPOINT_FILES for f in path.glob(pattern)})
    parts = {}
    for file in files:
        if file.suffix == ".json":
            content = read_json_value(file)
            if isinstance(content, dict):
                content = {k: v for k, v in content.items() if k not in _VOLATILE_JSON_KEYS}
            parts[_relative_name(file, path)] = fingerprint_json(content)
        else:
            parts[_relative_name(file, path)] = fingerprint_files([file])
    return fingerprint_json(parts)


def _relative_name(file: Path, root: Path) -> str:
    """A file's key in the fingerprint: its path under the checkpoint (a top-level file's name, as
    before; a module's ``3_Dense/model.safetensors`` kept apart from the weights' ``model.safetensors``)."""
    return file.relative_to(root).as_posix()
