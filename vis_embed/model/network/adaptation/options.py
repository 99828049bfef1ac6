"""What the adaptation objects (:mod:`vis_embed.model.network.adaptation`) are built from and act
on, without torch (the recipe and ``--help`` read it): the recipe's ``adaptation.lora:`` and
``adaptation.head:`` sections, :class:`AdaptedModel` (what an adaptation reads and sets of a
model) and the state-dict helpers of their ``save``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

from pydantic import Field

from vis_embed.config import Settings
from vis_embed.model.defaults import TEXT_LORA_MODULES

if TYPE_CHECKING:
    from collections.abc import Iterator

    import torch
    from peft import LoraConfig
    from torch import Tensor
    from transformers import PreTrainedModel

    from vis_embed.model.network.projection_head import ProjectionHead

# Linear layers of the Qwen-VL vision blocks (names across Qwen2/2.5/3-VL); the decoder's
# (TEXT_LORA_MODULES) live in model/defaults.py, read without torch.
VISION_LORA_MODULES = ("qkv", "proj", "fc1", "fc2", "gate_proj", "up_proj", "down_proj",
                       "linear_fc1", "linear_fc2")
VISION_PATTERN = r"visual\.blocks"


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


def prefixed(state: dict[str, Tensor] | None, prefix: str) -> dict[str, Tensor] | None:
    """The entries of ``state`` under ``prefix``, the prefix cut (None: take the module's own)."""
    if state is None:
        return None
    return {name[len(prefix):]: tensor for name, tensor in state.items() if name.startswith(prefix)}


def full_state(backbone: torch.nn.Module, state: dict[str, Tensor] | None) -> dict[str, Tensor] | None:
    """The backbone's state dict with ``state``'s ``backbone.*`` entries in place of its parameters
    (tied parameters share one tensor, as in the module), cast to each parameter's dtype; None
    without ``state`` (transformers then takes the module's own)."""
    gathered = prefixed(state, "backbone.")
    if gathered is None:
        return None
    by_parameter = {id(parameter): (gathered[name].to(parameter.dtype) if name in gathered else parameter.detach())
                    for name, parameter in backbone.named_parameters()}
    full = {name: by_parameter[id(parameter)] for name, parameter in backbone.named_parameters(remove_duplicate=False)}
    full.update((name, buffer) for name, buffer in backbone.state_dict().items() if name not in full)
    return full
