"""The projection-head kind: :class:`HeadOptions` (the recipe's ``adaptation.head:`` section) and
:class:`HeadAdaptation` (a frozen backbone and a trained
:class:`~vis_embed.model.network.projection_head.ProjectionHead`, saved as ``head_config.json`` +
``head.safetensors``).  No torch at module level."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from vis_embed.config import Settings
from vis_embed.errors import ConfigError
from vis_embed.model.network.adaptation.base import Adaptation, AdaptedModel, has_lora, prefixed
from vis_embed.model.references import HEAD_CONFIG, absolute_model_reference

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from vis_embed.model.network.projection_head import ProjectionHead


class HeadOptions(Settings):
    """The recipe's ``adaptation.head:`` section: the projection head's config."""

    dim: int | None = Field(None, gt=0)  # the head's output dimension; None = the backbone's hidden size


class HeadAdaptation(Adaptation):
    """A frozen backbone and a trained :class:`ProjectionHead`: ``head_config.json`` + ``head.safetensors``."""

    kind = "head"
    config_file = HEAD_CONFIG
    card_title = "Projection head"
    export_title = "Model with a projection head"  # the base unchanged, the head a Dense module
    card_library = "vis_embed"

    def __init__(self, out_dim: int | None = None) -> None:
        self.out_dim = out_dim

    @classmethod
    def from_options(cls, options: HeadOptions) -> Adaptation:
        return cls(options.dim)

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
