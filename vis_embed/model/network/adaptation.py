"""The adaptation a model trains and ships: a LoRA adapter, a projection head, or full weights.

One object per kind answers every question about it, so no other module decides "which
adaptation is this" on its own:

* :class:`LoraAdaptation` holds a peft ``LoraConfig`` (built whole from the recipe's ``lora:``
  section, :class:`LoraOptions`, or read back from a saved ``adapter_config.json``);
* :class:`HeadAdaptation` a projection head (:mod:`vis_embed.model.network.projection_head`; its
  ``head_config.json`` is the pydantic :class:`~vis_embed.model.network.projection_head.HeadFile`);
* :class:`FullAdaptation` full fine-tuning (the whole backbone trains and is saved).

Each owns its config file (:attr:`Adaptation.config_file`), ``apply`` (make a freshly loaded
EmbeddingModel train that way: which parameters train is decided there and nowhere else),
``save`` (the ONE save path: ``EmbeddingModel.save_pretrained`` and the trainer's checkpoints
both call it), ``load_weights`` (resume and warm start into a built model), ``attach`` (load a
saved one for inference) and ``kind`` (what embedding_config.json and the model card record).
:func:`adaptation_of` (what a loaded model holds: the one place that probes a backbone for
peft) and :func:`saved_kind` (what a directory holds) find the object.

No torch at module level: the recipe (read by ``--help``) and the export command import this.
"""

from __future__ import annotations

import json
import re
import typing
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

from pydantic import Field

from vis_embed.config import Settings
from vis_embed.errors import ConfigError
from vis_embed.io import atomic_write_json
from vis_embed.model.defaults import TEXT_LORA_MODULES
from vis_embed.model.references import (ADAPTER_CONFIG, HEAD_CONFIG, absolute_model_reference, is_peft_adapter,
                                        peft_adapter_config)

if TYPE_CHECKING:
    from collections.abc import Iterator

    import torch
    from peft import LoraConfig
    from torch import Tensor
    from transformers import PreTrainedModel

    from vis_embed.model.network.projection_head import ProjectionHead

AdaptationKind = Literal["lora", "head", "full"]
ADAPTATION_KINDS: tuple[str, ...] = typing.get_args(AdaptationKind)
LORA_WEIGHTS = "adapter_model.safetensors"
# Linear layers of the Qwen-VL vision blocks (names across Qwen2/2.5/3-VL); the decoder's
# (TEXT_LORA_MODULES) live in model/defaults.py, read without torch.
VISION_LORA_MODULES = ("qkv", "proj", "fc1", "fc2", "gate_proj", "up_proj", "down_proj",
                       "linear_fc1", "linear_fc2")
VISION_PATTERN = r"visual\.blocks"


class AdaptedModel(Protocol):
    """What an adaptation reads and sets of the model it adapts: an EmbeddingModel.  That class
    is not imported here, not even for annotations: model/network/embedding_model.py imports this
    module, and the import graph stays acyclic (tests/test_architecture.py)."""

    backbone: torch.nn.Module  # the transformers model, peft-wrapped under LoRA
    head: ProjectionHead | None
    name_or_path: str | None

    @property
    def device(self) -> torch.device: ...

    def base_model(self) -> PreTrainedModel: ...

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]: ...


class LoraOptions(Settings):
    """The recipe's ``adaptation.lora:`` section: the LoRA adaptation's config (:meth:`peft_config`)."""

    r: int = Field(16, gt=0)
    alpha: float = Field(32, gt=0)
    dropout: float = Field(0.05, ge=0, lt=1)
    # leaf names restricted to the language model; a string is used verbatim as peft's regex
    target_modules: list[str] | str = Field(default_factory=lambda: list(TEXT_LORA_MODULES))
    vision: bool = False  # also adapt the vision tower's blocks

    def target_pattern(self) -> str:
        """peft's ``target_modules`` regex of these options."""
        if isinstance(self.target_modules, str):
            return self.target_modules
        names = tuple(self.target_modules or TEXT_LORA_MODULES)
        pattern = rf".*language_model\..*\.({'|'.join(map(re.escape, names))})"
        if self.vision:
            pattern += rf"|.*{VISION_PATTERN}\..*\.({'|'.join(VISION_LORA_MODULES)})"
        return pattern

    def peft_config(self) -> LoraConfig:
        """These options as the peft ``LoraConfig`` they mean (the one translation)."""
        from peft import LoraConfig

        return LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                          target_modules=self.target_pattern(), bias="none")


class HeadOptions(Settings):
    """The recipe's ``adaptation.head:`` section: the projection head's config."""

    dim: int | None = Field(None, gt=0)  # the head's output dimension; None = the backbone's hidden size


class AdaptationOptions(Settings):
    """The recipe's ``adaptation:`` section: which adaptation trains (``kind``) and each kind's
    config; :meth:`build` makes the :class:`Adaptation` object.  The older spellings (a bare
    ``adaptation: KIND``, top-level ``lora:`` / ``head:`` sections, ``lora.enabled: false`` for
    ``full``) are read with the same meaning (``training.recipe.upgrade_recipe_spellings``)."""

    kind: AdaptationKind = "lora"  # lora; head: frozen backbone + projection head; full: every weight
    lora: LoraOptions = Field(default_factory=LoraOptions)
    head: HeadOptions = Field(default_factory=HeadOptions)

    def build(self) -> Adaptation:
        return build_adaptation(self.kind, lora=self.lora, head=self.head)


def _prefixed(state: dict[str, Tensor] | None, prefix: str) -> dict[str, Tensor] | None:
    """The entries of ``state`` under ``prefix``, the prefix cut (None: take the module's own)."""
    if state is None:
        return None
    return {name[len(prefix):]: tensor for name, tensor in state.items() if name.startswith(prefix)}


class Adaptation(ABC):
    """What is trained on top of (or instead of) the base model, and how it is kept on disk."""

    kind: ClassVar[AdaptationKind]
    config_file: ClassVar[str]  # the file a saved directory of this kind is recognised by

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
        raise ConfigError(f"not a peft adapter directory (no {ADAPTER_CONFIG}): {directory}")


class LoraAdaptation(Adaptation):
    """A peft LoRA adapter: ``adapter_config.json`` + ``adapter_model.safetensors``."""

    kind = "lora"
    config_file = ADAPTER_CONFIG

    def __init__(self, peft_config: LoraConfig) -> None:
        self.peft_config = peft_config  # peft.LoraConfig

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
        model.backbone.save_pretrained(str(directory), state_dict=_prefixed(state, "backbone."),
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

    def merge(self, model: AdaptedModel) -> None:
        """Fold the LoRA weights into the base weights (same vectors, no adapter overhead)."""
        model.backbone = model.backbone.merge_and_unload()


class HeadAdaptation(Adaptation):
    """A frozen backbone and a trained :class:`ProjectionHead`: ``head_config.json`` + ``head.safetensors``."""

    kind = "head"
    config_file = HEAD_CONFIG

    def __init__(self, out_dim: int | None = None) -> None:
        self.out_dim = out_dim

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
                  state=_prefixed(state, "head."))

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


class FullAdaptation(Adaptation):
    """Full fine-tuning: the whole backbone trains; saved as a checkpoint (weights + processor)."""

    kind = "full"
    config_file = "config.json"

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
        model.backbone.save_pretrained(str(directory), state_dict=_full_state(model.backbone, state),
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


def _full_state(backbone: torch.nn.Module, state: dict[str, Tensor] | None) -> dict[str, Tensor] | None:
    """The backbone's state dict with ``state``'s ``backbone.*`` entries in place of its parameters
    (tied parameters share one tensor, as in the module), cast to each parameter's dtype; None
    without ``state`` (transformers then takes the module's own)."""
    gathered = _prefixed(state, "backbone.")
    if gathered is None:
        return None
    by_parameter = {id(parameter): (gathered[name].to(parameter.dtype) if name in gathered else parameter.detach())
                    for name, parameter in backbone.named_parameters()}
    full = {name: by_parameter[id(parameter)] for name, parameter in backbone.named_parameters(remove_duplicate=False)}
    full.update((name, buffer) for name, buffer in backbone.state_dict().items() if name not in full)
    return full


def build_adaptation(kind: AdaptationKind, lora: LoraOptions | None = None,
                     head: HeadOptions | None = None) -> Adaptation:
    """The adaptation of ``kind`` configured by its section (the recipe's ``lora:`` / ``head:``)."""
    if kind == "lora":
        return LoraAdaptation((lora or LoraOptions()).peft_config())
    if kind == "head":
        return HeadAdaptation((head or HeadOptions()).dim)
    return FullAdaptation()


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
    kind = adaptation_of(model).kind
    return None if kind == "full" else kind


def saved_kind(directory: str | Path) -> AdaptationKind | None:
    """"head" / "lora" by the directory's config file (no file is read), else None."""
    path = Path(directory).expanduser()
    return "head" if (path / HEAD_CONFIG).is_file() else "lora" if is_peft_adapter(path) else None


def attach_adapter(backbone: torch.nn.Module, directory: str | Path,
                   device: torch.device | str) -> tuple[torch.nn.Module, ProjectionHead | None]:
    """(backbone, head) with the adapter saved in ``directory`` applied for inference."""
    path = Path(directory).expanduser()
    kind = saved_kind(path)
    adaptation: Adaptation = HeadAdaptation() if kind == "head" else LoraAdaptation(
        peft_adapter_config(path))  # a clear error for a directory that is neither
    return adaptation.attach(backbone, path, device)


def record_absolute_base(adapter_dir: Path) -> None:
    """Rewrite ``base_model_name_or_path`` as a hub id or an ABSOLUTE path, so that
    ``AutoPeftModel.from_pretrained(adapter)`` and ``vis-embed merge`` work from any directory
    (peft records the name the model was loaded with, often relative to the training cwd).
    The file is edited as JSON, not through peft.PeftConfig: saving that would rewrite every
    field with this peft version's defaults, and only the base's name must change."""
    config_path = adapter_dir / ADAPTER_CONFIG
    config = json.loads(config_path.read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path")
    if base and absolute_model_reference(base) != base:
        config["base_model_name_or_path"] = absolute_model_reference(base)
        atomic_write_json(config_path, config)


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
