"""What a saved directory holds: the ONE decision (:func:`saved_adaptation`).

The kind recorded in the directory's ``embedding_config.json`` selects the adaptation class from
the registry (:data:`~vis_embed.model.network.adaptation.ADAPTATIONS`), as peft's recorded
``peft_type`` selects its config class; the adapter files decide only for a directory written
before the kind was recorded, and a record they contradict is refused.  Export, merge, the
quickstart, the model card's base and ``EmbeddingModel.from_pretrained(adapter=...)`` ask here.
No torch at module level.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vis_embed.errors import ConfigError
from vis_embed.model.embedding_config import EMBEDDING_CONFIG_FILE, AdaptationKind, read_embedding_config
from vis_embed.model.network.adaptation.base import ADAPTATIONS, Adaptation, not_an_adapter
from vis_embed.model.references import HEAD_CONFIG, is_peft_adapter

if TYPE_CHECKING:
    import torch

    from vis_embed.model.network.projection_head import ProjectionHead


def _kind_by_files(path: Path) -> AdaptationKind | None:
    """What a directory written before embedding_config.json recorded the kind holds, by its
    config file (a projection head's, else a peft adapter's); None: neither."""
    return "head" if (path / HEAD_CONFIG).is_file() else "lora" if is_peft_adapter(path) else None


def saved_adaptation(directory: str | Path) -> Adaptation | None:
    """The adaptation saved in ``directory`` (None: none recorded and no adapter file: a plain
    checkpoint or not a model directory).  The ONE decision: the kind recorded in its
    embedding_config.json selects the class (:data:`ADAPTATIONS`); the adapter files decide only
    where no kind is recorded.  A record the files contradict is a ConfigError naming the file."""
    path = Path(directory).expanduser()
    recorded = read_embedding_config(path).get("adaptation")
    by_files = _kind_by_files(path)
    if recorded is None:
        return None if by_files is None else ADAPTATIONS[by_files].from_saved(path)
    cls = ADAPTATIONS[recorded]
    if not (path / cls.config_file).is_file() or by_files not in (None, recorded):
        found = f"holds {by_files}'s {ADAPTATIONS[by_files].config_file}" if by_files not in (None, recorded) \
            else f"has no {cls.config_file}"
        raise ConfigError(f"{path / EMBEDDING_CONFIG_FILE}: records adaptation {recorded!r}, but the "
                          f"directory {found}")
    return cls.from_saved(path)


def saved_adapter(directory: str | Path) -> Adaptation:
    """The adapter (LoRA or projection head) saved in ``directory``, to load over a base model;
    ConfigError for a directory that holds none (a full checkpoint is a model: pass it as one)."""
    path = Path(directory).expanduser()
    adaptation = saved_adaptation(path)
    if adaptation is None or not adaptation.is_adapter:
        raise not_an_adapter(path)
    return adaptation


def refuse_adapter_as_model(name: str | Path) -> None:
    """A ConfigError when ``name``, given where a model belongs (MODEL, ``--model``, ``--base``), is
    a saved adapter's directory (a run's ``final/``): pass it as ``--adapter`` (was transformers'
    'Unrecognized model' or 'processing class' message).  A checkpoint (``config.json``) is a model."""
    path = Path(name).expanduser()
    if not path.is_dir() or (path / "config.json").is_file():
        return
    adaptation = saved_adaptation(path)
    if adaptation is not None and adaptation.is_adapter:
        raise ConfigError(f"{name} holds a saved adapter ({adaptation.kind}), not a model: pass it as the adapter "
                          "(--adapter; merge's ADAPTER), over its base")


def attach_adapter(backbone: torch.nn.Module, directory: str | Path,
                   device: torch.device | str) -> tuple[torch.nn.Module, ProjectionHead | None]:
    """(backbone, head) with the adapter saved in ``directory`` applied for inference."""
    path = Path(directory).expanduser()
    return saved_adapter(path).attach(backbone, path, device)
