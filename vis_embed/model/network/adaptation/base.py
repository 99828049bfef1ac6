"""What every adaptation kind shares: the :class:`Adaptation` base class, its registry
:data:`ADAPTATIONS` (kind -> class; each subclass registers itself, keyed on
``embedding_config.AdaptationKind``, the vocabulary declared once), :class:`AdaptedModel` (what an
adaptation reads and sets of a model), the state-dict helper of their ``save``, :func:`has_lora`
(the probe for peft) and :func:`warm_start`.

Each kind owns its config file (:attr:`Adaptation.config_file`), ``apply`` (make a freshly loaded
EmbeddingModel train that way: which parameters train is decided there and nowhere else),
``save`` (the ONE save path: ``EmbeddingModel.save_pretrained`` and the trainer's checkpoints
both call it), ``load_weights`` (resume and warm start into a built model), ``attach`` (load a
saved one for inference), ``base_model`` (the base a saved one names), ``fold`` (a saved one
made standalone: merge and export), what the model card says of it, and ``kind``.

No torch at module level: the recipe (read by ``--help``) and the export command import this.
"""

from __future__ import annotations

import typing
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from vis_embed.errors import ConfigError
from vis_embed.model.embedding_config import AdaptationKind
from vis_embed.model.references import ADAPTER_CONFIG, HEAD_CONFIG

if TYPE_CHECKING:
    from collections.abc import Iterator

    import torch
    from torch import Tensor
    from transformers import PreTrainedModel

    from vis_embed.model.network.projection_head import ProjectionHead

ADAPTATION_KINDS: tuple[str, ...] = typing.get_args(AdaptationKind)
ADAPTATIONS: dict[str, type[Adaptation]] = {}  # kind -> class (each subclass registers itself)


class AdaptedModel(Protocol):
    """What an adaptation reads and sets of the model it adapts: an EmbeddingModel.  That class
    is not imported here, not even for annotations: model/network/embedding_model.py imports this
    package, and the import graph stays acyclic (tests/test_architecture.py)."""

    backbone: torch.nn.Module  # the transformers model, peft-wrapped under LoRA
    head: ProjectionHead | None
    name_or_path: str | None

    @property
    def device(self) -> torch.device: ...

    def base_model(self) -> PreTrainedModel: ...

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]: ...


class Adaptation(ABC):
    """What is trained on top of (or instead of) the base model, and how it is kept on disk."""

    kind: ClassVar[AdaptationKind]
    config_file: ClassVar[str]  # the file a saved directory of this kind is recognised by
    is_adapter: ClassVar[bool] = True  # saved over a base model (not a model of its own)
    card_title: ClassVar[str]  # what the model card calls a directory of this kind
    export_title: ClassVar[str] = "Model"  # ... and a `vis-embed export` of it (merge or Dense module)
    card_library: ClassVar[str]  # the card's library_name
    card_tags: ClassVar[tuple[str, ...]] = ()  # the card's tags of this kind (unless merged)
    merges: ClassVar[bool] = False  # folds into the base's weights (``vis-embed merge``)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind not in ADAPTATION_KINDS or cls.kind in ADAPTATIONS:
            raise TypeError(f"{cls.__name__}: kind {cls.kind!r} is not a new one of {ADAPTATION_KINDS}")
        ADAPTATIONS[cls.kind] = cls

    @classmethod
    @abstractmethod
    def from_options(cls, options: Any) -> Adaptation:
        """This kind configured by its own section of the recipe's ``adaptation:`` (the field
        named after the kind: ``adaptation.lora:``, ``adaptation.head:``; None for a kind without
        one); ``AdaptationOptions.build`` hands it over."""

    @classmethod
    @abstractmethod
    def from_saved(cls, directory: Path) -> Adaptation:
        """This kind as saved in ``directory`` (its config file read)."""

    @abstractmethod
    def apply(self, model: AdaptedModel) -> None:
        """Make a freshly loaded EmbeddingModel train this adaptation (fresh weights)."""

    @property
    def trains_vision(self) -> bool:
        """Whether vision-tower parameters train (DDP must then look for unused parameters:
        a chunk without images leaves them out of the graph)."""
        return False

    @abstractmethod
    def save(self, model: AdaptedModel, directory: Path, state: dict[str, Tensor] | None = None) -> None:
        """Write this adaptation's files into ``directory``; ``state``: the model's trainable
        weights by parameter name when not taken from the model (gathered by a backend)."""

    @abstractmethod
    def check_saved(self, directory: Path, model: AdaptedModel, source: str) -> None:
        """ConfigError (naming ``source``) unless ``directory`` holds weights this model's
        adaptation can start from."""

    @abstractmethod
    def load_weights(self, model: AdaptedModel, directory: Path) -> None:
        """Load saved weights into the already-built training model (resume, warm start)."""

    def attach(self, backbone: torch.nn.Module, directory: Path,
               device: torch.device | str) -> tuple[torch.nn.Module, ProjectionHead | None]:
        """(backbone, head) for inference with the saved adaptation in ``directory``."""
        raise not_an_adapter(directory)

    def base_model(self, directory: Path) -> str:
        """The base model ``directory`` (saved of this kind) records (a hub id or a path)."""
        raise not_an_adapter(directory)

    def fold(self, backbone: torch.nn.Module, directory: Path) -> tuple[torch.nn.Module, ProjectionHead | None]:
        """(backbone, head): the base ``backbone`` with the adaptation saved in ``directory`` made
        standalone (what ``vis-embed merge`` writes and ``vis-embed export`` ships)."""
        raise not_an_adapter(directory)


def not_an_adapter(directory: Path) -> ConfigError:
    return ConfigError(f"not an adapter directory (no {ADAPTER_CONFIG} or {HEAD_CONFIG}): {directory}")


def prefixed(state: dict[str, Tensor] | None, prefix: str) -> dict[str, Tensor] | None:
    """The entries of ``state`` under ``prefix``, the prefix cut (None: take the module's own)."""
    if state is None:
        return None
    return {name[len(prefix):]: tensor for name, tensor in state.items() if name.startswith(prefix)}


def has_lora(backbone: torch.nn.Module) -> bool:
    """Whether ``backbone`` is peft-wrapped (the one probe: everything else asks ``adaptation_of``)."""
    return hasattr(backbone, "peft_config")


def warm_start(model: AdaptedModel, adaptation: Adaptation, directory: str | Path) -> None:
    """Initialise ``model``'s adaptation from a saved one (recipe ``init_adapter``).

    Refuses (ConfigError) a directory without weights of the recipe's adaptation, a LoRA adapter
    that lacks some of the recipe's LoRA weights (other ``lora.r`` / ``target_modules`` /
    ``vision``) or has other shapes: a warm start that silently kept random weights for part of
    the adapter would not be the warm start the experiment claims.
    """
    directory = Path(directory)
    source = f"init_adapter {directory}"
    if not directory.is_dir():
        raise ConfigError(f"{source}: not a directory")
    adaptation.check_saved(directory, model, source)
    try:
        adaptation.load_weights(model, directory)
    except RuntimeError as exc:  # size mismatch: another lora.r or head dim
        raise ConfigError(f"{source}: does not fit the recipe's adapter: {str(exc).splitlines()[0]}") from None
