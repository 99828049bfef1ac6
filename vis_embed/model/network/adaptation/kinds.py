"""The adaptation kinds (a LoRA adapter, a projection head, full weights) and their registry.

One object per kind answers every question about it, so no other module decides "which
adaptation is this" on its own: :class:`LoraAdaptation` holds a peft ``LoraConfig`` (built whole
from the recipe's ``lora:`` section, :class:`LoraOptions`, or read back from a saved
``adapter_config.json``); :class:`HeadAdaptation` a projection head
(:mod:`vis_embed.model.network.projection_head`, ``head_config.json``); :class:`FullAdaptation`
full fine-tuning (the whole backbone trains and is saved as a checkpoint).

Each owns its config file (:attr:`Adaptation.config_file`), ``apply`` (make a freshly loaded
EmbeddingModel train that way: which parameters train is decided there and nowhere else),
``save`` (the ONE save path: ``EmbeddingModel.save_pretrained`` and the trainer's checkpoints
both call it), ``load_weights`` (resume and warm start into a built model), ``attach`` (load a
saved one for inference), ``base_model`` (the base a saved one names), ``fold`` (a saved one
made standalone: merge and export), what the model card says of it, and ``kind``.

:data:`ADAPTATIONS` is the registry, keyed on the kind (``embedding_config.AdaptationKind``, the
vocabulary declared once): the recipe's kind and a directory's recorded kind
(:mod:`vis_embed.model.network.adaptation.saved`) select the class, as peft's ``peft_type`` does.
:func:`adaptation_of` finds what a loaded model holds (the one place that probes for peft).

No torch at module level: the recipe (read by ``--help``) and the export command import this.
"""

from __future__ import annotations

import typing
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from vis_embed.config import Settings
from vis_embed.errors import ConfigError
from vis_embed.model.embedding_config import AdaptationKind
from vis_embed.model.network.adaptation.options import (VISION_PATTERN, AdaptedModel, HeadOptions, LoraOptions,
                                                     full_state, prefixed)
from vis_embed.model.references import (ADAPTER_CONFIG, HEAD_CONFIG, absolute_model_reference, base_model_of,
                                        peft_adapter_config, record_absolute_base)

if TYPE_CHECKING:
    import torch
    from peft import LoraConfig
    from torch import Tensor

    from vis_embed.model.network.projection_head import ProjectionHead

__all__ = ["ADAPTATIONS", "ADAPTATION_KINDS", "Adaptation", "AdaptationOptions", "FullAdaptation", "HeadAdaptation",
           "LoraAdaptation", "adaptation_of", "adapter_kind", "build_adaptation", "has_lora", "warm_start"]

ADAPTATION_KINDS: tuple[str, ...] = typing.get_args(AdaptationKind)
LORA_WEIGHTS = "adapter_model.safetensors"


class AdaptationOptions(Settings):
    """The recipe's ``adaptation:`` section: which adaptation trains (``kind``) and each kind's
    config; :meth:`build` makes the :class:`Adaptation` object.  The older spellings (a bare
    ``adaptation: KIND``, top-level ``lora:`` / ``head:`` sections, ``lora.enabled: false`` for
    ``full``) are read with the same meaning (``training.recipe_spellings``)."""

    kind: AdaptationKind = "lora"  # lora; head: frozen backbone + projection head; full: every weight
    lora: LoraOptions = Field(default_factory=LoraOptions)
    head: HeadOptions = Field(default_factory=HeadOptions)

    def build(self) -> Adaptation:
        return ADAPTATIONS[self.kind].from_options(self)


ADAPTATIONS: dict[str, type[Adaptation]] = {}  # kind -> class (each subclass registers itself)


class Adaptation(ABC):
    """What is trained on top of (or instead of) the base model, and how it is kept on disk."""

    kind: ClassVar[AdaptationKind]
    config_file: ClassVar[str]  # the file a saved directory of this kind is recognised by
    is_adapter: ClassVar[bool] = True  # saved over a base model (not a model of its own)
    card_title: ClassVar[str]  # what the model card calls a directory of this kind
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
    def from_options(cls, options: AdaptationOptions) -> Adaptation:
        """This kind configured by the recipe's ``adaptation:`` section."""

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


class LoraAdaptation(Adaptation):
    """A peft LoRA adapter: ``adapter_config.json`` + ``adapter_model.safetensors``."""

    kind = "lora"
    config_file = ADAPTER_CONFIG
    card_title = "LoRA adapter"
    card_library = "peft"
    card_tags = ("lora",)
    merges = True

    def __init__(self, peft_config: LoraConfig) -> None:
        self.peft_config = peft_config  # peft.LoraConfig

    @classmethod
    def from_options(cls, options: AdaptationOptions) -> Adaptation:
        return cls(options.lora.peft_config())

    @classmethod
    def from_saved(cls, directory: Path) -> Adaptation:
        return cls(peft_adapter_config(directory))  # type: ignore[arg-type]

    @property
    def trains_vision(self) -> bool:
        return VISION_PATTERN in str(self.peft_config.target_modules)

    def apply(self, model: AdaptedModel) -> None:
        from peft import get_peft_model

        from vis_embed.model.network.aligned_mlp import restore_mlps

        if has_lora(model.backbone):
            raise ConfigError("the backbone already has a LoRA adapter; merge it first")
        restore_mlps(model.base_model())  # LoRA targets the original linears (model/network/aligned_mlp.py)
        model.backbone = get_peft_model(model.backbone, self.peft_config)

    def save(self, model: AdaptedModel, directory: Path, state: dict[str, Tensor] | None = None) -> None:
        model.backbone.save_pretrained(str(directory), state_dict=prefixed(state, "backbone."),
                                       save_embedding_layers=False, safe_serialization=True)
        (directory / "README.md").unlink(missing_ok=True)  # peft's auto model card: noise here
        record_absolute_base(directory)

    def check_saved(self, directory: Path, model: AdaptedModel, source: str) -> None:
        from peft import get_peft_model_state_dict
        from safetensors import safe_open

        weights = directory / LORA_WEIGHTS
        if not weights.is_file():
            raise ConfigError(f"{source}: no {LORA_WEIGHTS} (a LoRA adapter directory)")
        with safe_open(str(weights), framework="pt") as saved:
            missing = sorted(set(get_peft_model_state_dict(model.backbone)) - set(saved.keys()))
        if missing:
            raise ConfigError(f"{source}: lacks {len(missing)} of the recipe's LoRA weights (e.g. {missing[0]}); "
                              "adaptation.lora.target_modules and adaptation.lora.vision must match the adapter's")

    def load_weights(self, model: AdaptedModel, directory: Path) -> None:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        result = set_peft_model_state_dict(model.backbone, load_file(str(directory / LORA_WEIGHTS)))
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ConfigError(f"{directory}: adapter does not match the model (unexpected keys {unexpected[:3]})")

    def attach(self, backbone: torch.nn.Module, directory: Path,
               device: torch.device | str) -> tuple[torch.nn.Module, ProjectionHead | None]:
        from peft import PeftModel

        return PeftModel.from_pretrained(backbone, str(directory), is_trainable=False), None

    def base_model(self, directory: Path) -> str:
        return base_model_of(directory)

    def fold(self, backbone: torch.nn.Module, directory: Path) -> tuple[torch.nn.Module, ProjectionHead | None]:
        from peft import PeftModel

        return _merged(PeftModel.from_pretrained(backbone, str(directory))), None

    def merge(self, model: AdaptedModel) -> None:
        """Fold the LoRA weights into the base weights (same vectors, no adapter overhead)."""
        model.backbone = _merged(model.backbone)


def _merged(peft_model: torch.nn.Module) -> torch.nn.Module:
    """The base model with the LoRA weights folded in (the one merge)."""
    return peft_model.merge_and_unload()


class HeadAdaptation(Adaptation):
    """A frozen backbone and a trained :class:`ProjectionHead`: ``head_config.json`` + ``head.safetensors``."""

    kind = "head"
    config_file = HEAD_CONFIG
    card_title = "Projection head"
    card_library = "vis_embed"

    def __init__(self, out_dim: int | None = None) -> None:
        self.out_dim = out_dim

    @classmethod
    def from_options(cls, options: AdaptationOptions) -> Adaptation:
        return cls(options.head.dim)

    @classmethod
    def from_saved(cls, directory: Path) -> Adaptation:
        from vis_embed.model.network.projection_head import read_head_file

        return cls(read_head_file(directory).out_dim)

    def apply(self, model: AdaptedModel) -> None:
        from vis_embed.model.network.projection_head import ProjectionHead

        if model.head is not None or has_lora(model.backbone):
            raise ConfigError("the model already has an adapter (LoRA or head); use one adaptation")
        for parameter in model.backbone.parameters():
            parameter.requires_grad_(False)
        in_dim = int(model.base_model().config.text_config.hidden_size)
        model.head = ProjectionHead(in_dim, self.out_dim).to(model.device)

    def save(self, model: AdaptedModel, directory: Path, state: dict[str, Tensor] | None = None) -> None:
        from vis_embed.model.network.projection_head import save_head

        base = model.name_or_path
        save_head(directory, model.head, absolute_model_reference(base) if base else None,
                  state=prefixed(state, "head."))

    def check_saved(self, directory: Path, model: AdaptedModel, source: str) -> None:
        if not (directory / HEAD_CONFIG).is_file():
            raise ConfigError(f"{source}: no projection head ({HEAD_CONFIG}) for adaptation: head")

    def load_weights(self, model: AdaptedModel, directory: Path) -> None:
        from vis_embed.model.network.projection_head import load_head

        model.head.load_state_dict(load_head(directory).state_dict())

    def attach(self, backbone: torch.nn.Module, directory: Path,
               device: torch.device | str) -> tuple[torch.nn.Module, ProjectionHead | None]:
        from vis_embed.model.network.projection_head import load_head

        return backbone, load_head(directory).to(device).eval()

    def base_model(self, directory: Path) -> str:
        from vis_embed.model.network.projection_head import head_base_model

        return head_base_model(directory)

    def fold(self, backbone: torch.nn.Module, directory: Path) -> tuple[torch.nn.Module, ProjectionHead | None]:
        from vis_embed.model.network.projection_head import load_head

        return backbone, load_head(directory)  # the base unchanged; the head beside it


class FullAdaptation(Adaptation):
    """Full fine-tuning: the whole backbone trains; saved as a checkpoint (weights + processor)."""

    kind = "full"
    config_file = "config.json"
    is_adapter = False
    card_title = "Model"
    card_library = "transformers"

    @classmethod
    def from_options(cls, options: AdaptationOptions) -> Adaptation:
        return cls()

    @classmethod
    def from_saved(cls, directory: Path) -> Adaptation:
        return cls()

    @property
    def trains_vision(self) -> bool:
        return True

    def apply(self, model: AdaptedModel) -> None:
        for parameter in model.parameters():
            parameter.requires_grad_(True)

    def save(self, model: AdaptedModel, directory: Path, state: dict[str, Tensor] | None = None) -> None:
        """A checkpoint ``from_pretrained`` loads (transformers writes its own on-disk key names);
        ``state`` (a backend's gathered weights, e.g. under ZeRO-3 where the module's own are
        partitioned) replaces the module's parameters, in the module's dtype."""
        model.backbone.save_pretrained(str(directory), state_dict=full_state(model.backbone, state),
                                       safe_serialization=True)
        if getattr(model, "processor", None) is not None:
            model.processor.save_pretrained(str(directory))

    def check_saved(self, directory: Path, model: AdaptedModel, source: str) -> None:
        if not any(directory.glob("model*.safetensors")):
            raise ConfigError(f"{source}: no model*.safetensors (full fine-tuning needs full weights)")

    def load_weights(self, model: AdaptedModel, directory: Path) -> None:
        """Read the checkpoint the way ``from_pretrained`` does (its key mapping: transformers
        saves Qwen-VL's ``model.language_model.*`` as ``model.*``), then copy every weight into
        the built model, strictly: a weight missing from the checkpoint is an error, not the
        base's value kept."""
        backbone = model.backbone
        dtype = next(backbone.parameters()).dtype
        try:
            saved, info = type(backbone).from_pretrained(str(directory), dtype=dtype, output_loading_info=True)
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigError(f"{directory}: not a checkpoint of this model: {exc}") from None
        missing = sorted(info.get("missing_keys") or [])
        if missing:
            raise ConfigError(f"{directory}: lacks {len(missing)} of the model's weights (e.g. {missing[0]})")
        backbone.load_state_dict(saved.state_dict(), strict=True)  # RuntimeError: another shape


if set(ADAPTATIONS) != set(ADAPTATION_KINDS):  # one class per declared kind
    raise TypeError(f"adaptation classes {sorted(ADAPTATIONS)} != the declared kinds {ADAPTATION_KINDS}")


def build_adaptation(kind: AdaptationKind, lora: LoraOptions | None = None,
                     head: HeadOptions | None = None) -> Adaptation:
    """The adaptation of ``kind`` configured by its section (the recipe's ``lora:`` / ``head:``)."""
    options = AdaptationOptions(kind=kind, lora=lora or LoraOptions(), head=head or HeadOptions())
    return options.build()


def has_lora(backbone: torch.nn.Module) -> bool:
    """Whether ``backbone`` is peft-wrapped (the one probe: everything else asks :func:`adaptation_of`)."""
    return hasattr(backbone, "peft_config")


def adaptation_of(model: AdaptedModel) -> Adaptation:
    """The adaptation a (training or loaded) EmbeddingModel holds: its head, its peft LoRA, or
    none (the whole backbone: full weights)."""
    if getattr(model, "head", None) is not None:
        return HeadAdaptation(model.head.out_dim)
    if has_lora(model.backbone):
        return LoraAdaptation(model.backbone.peft_config["default"])
    return FullAdaptation()


def adapter_kind(model: AdaptedModel) -> AdaptationKind | None:
    """"lora" / "head" for a model carrying an adapter, None for a plain backbone (whose
    record, "full" or none, only its embedding_config.json knows)."""
    adaptation = adaptation_of(model)
    return adaptation.kind if adaptation.is_adapter else None


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
