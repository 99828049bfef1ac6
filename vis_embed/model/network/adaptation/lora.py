"""The LoRA kind: :class:`LoraOptions` (the recipe's ``adaptation.lora:`` section, built whole into
a peft ``LoraConfig``) and :class:`LoraAdaptation` (holds that config, built from the section or
read back from a saved ``adapter_config.json``; saved as a peft adapter).  No torch or peft at
module level."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from vis_embed.config import Settings
from vis_embed.errors import ConfigError
from vis_embed.model.defaults import TEXT_LORA_MODULES
from vis_embed.model.network.adaptation.base import Adaptation, AdaptedModel, has_lora, prefixed
from vis_embed.model.references import (ADAPTER_CONFIG, base_model_of, peft_adapter_config, record_absolute_base,
                                       unreadable_weights)

if TYPE_CHECKING:
    import torch
    from peft import LoraConfig
    from torch import Tensor

    from vis_embed.model.network.projection_head import ProjectionHead

# Linear layers of the Qwen-VL vision blocks (names across Qwen2/2.5/3-VL); the decoder's
# (TEXT_LORA_MODULES) live in model/defaults.py, read without torch.
VISION_LORA_MODULES = ("qkv", "proj", "fc1", "fc2", "gate_proj", "up_proj", "down_proj",
                       "linear_fc1", "linear_fc2")
VISION_PATTERN = r"visual\.blocks"
LORA_WEIGHTS = "adapter_model.safetensors"
LEGACY_LORA_WEIGHTS = "adapter_model.bin"  # older peft versions' file, which peft still reads


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


class LoraAdaptation(Adaptation):
    """A peft LoRA adapter: ``adapter_config.json`` + ``adapter_model.safetensors``."""

    kind = "lora"
    config_file = ADAPTER_CONFIG
    card_title = "LoRA adapter"
    export_title = "Merged model"  # the LoRA folded into the weights
    card_library = "peft"
    card_tags = ("lora",)
    merges = True

    def __init__(self, peft_config: LoraConfig) -> None:
        self.peft_config = peft_config  # peft.LoraConfig

    @classmethod
    def from_options(cls, options: LoraOptions) -> Adaptation:
        return cls(options.peft_config())

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
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            weights = load_file(str(directory / LORA_WEIGHTS))
        except SafetensorError as exc:
            raise unreadable_weights(directory / LORA_WEIGHTS, exc) from None
        result = set_peft_model_state_dict(model.backbone, weights)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ConfigError(f"{directory}: adapter does not match the model (unexpected keys {unexpected[:3]})")

    def attach(self, backbone: torch.nn.Module, directory: Path,
               device: torch.device | str) -> tuple[torch.nn.Module, ProjectionHead | None]:
        return _peft_model(backbone, directory, is_trainable=False), None

    def base_model(self, directory: Path) -> str:
        return base_model_of(directory)

    def fold(self, backbone: torch.nn.Module, directory: Path) -> tuple[torch.nn.Module, ProjectionHead | None]:
        return _merged(_peft_model(backbone, directory)), None

    def merge(self, model: AdaptedModel) -> None:
        """Fold the LoRA weights into the base weights (same vectors, no adapter overhead)."""
        model.backbone = _merged(model.backbone)


def _peft_model(backbone: torch.nn.Module, directory: Path, **options: bool) -> torch.nn.Module:
    """``backbone`` with the peft adapter saved in ``directory``, its weights checked first: a
    missing file would send peft to the Hub (a network traceback), a truncated one raise a
    SafetensorError that names no file."""
    from peft import PeftModel
    from safetensors import SafetensorError

    if not any((directory / name).is_file() for name in (LORA_WEIGHTS, LEGACY_LORA_WEIGHTS)):
        raise ConfigError(f"{directory}: no {LORA_WEIGHTS} (a LoRA adapter directory holds its weights there)")
    try:
        return PeftModel.from_pretrained(backbone, str(directory), **options)
    except SafetensorError as exc:
        raise unreadable_weights(directory / LORA_WEIGHTS, exc) from None


def _merged(peft_model: torch.nn.Module) -> torch.nn.Module:
    """The base model with the LoRA weights folded in (the one merge)."""
    return peft_model.merge_and_unload()
