"""The full fine-tuning kind: :class:`FullAdaptation` (the whole backbone trains and is saved as a
checkpoint: weights + processor).  It has no section of its own in the recipe.  No torch at
module level."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vis_embed.errors import ConfigError
from vis_embed.model.network.adaptation.base import Adaptation, AdaptedModel, prefixed
from vis_embed.model.references import unreadable_weights

if TYPE_CHECKING:
    import torch
    from torch import Tensor


class FullAdaptation(Adaptation):
    """Full fine-tuning: the whole backbone trains; saved as a checkpoint (weights + processor)."""

    kind = "full"
    config_file = "config.json"
    is_adapter = False
    card_title = "Model"
    card_library = "transformers"

    @classmethod
    def from_options(cls, options: None = None) -> Adaptation:
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
        """Copy every weight of the checkpoint into the built model, strictly: a weight missing
        from the checkpoint is an error, not the base's value kept.  The file's key names are
        the ones ``save_pretrained`` wrote (transformers saves Qwen-VL's ``model.language_model.*``
        as ``model.*``; :func:`saved_names`), and the tensors are read one at a time into the
        parameters: no second model and no second state dict (resume of a 7B once held two)."""
        from safetensors import SafetensorError, safe_open

        own = model.backbone.state_dict()  # detached views of the parameters and buffers
        modules_of: dict[str, list[str]] = {}
        for name, saved in saved_names(model.backbone, own).items():
            modules_of.setdefault(saved, []).append(name)
        files = sorted(directory.glob("model*.safetensors"))
        if not files:
            raise ConfigError(f"{directory}: no model*.safetensors (full fine-tuning needs full weights)")
        written: set[int] = set()  # storages written (a tied weight is saved once)
        for path in files:
            try:
                with safe_open(str(path), framework="pt") as weights:
                    for key in weights.keys():
                        names = modules_of.get(key, [])
                        tensor = weights.get_tensor(key) if names else None
                        for name in names:
                            if tensor.shape != own[name].shape:  # RuntimeError, as load_state_dict's
                                raise RuntimeError(f"size mismatch for {name}: {tuple(tensor.shape)} in "
                                                   f"{path.name}, {tuple(own[name].shape)} in the model")
                            own[name].copy_(tensor)
                            written.add(own[name].untyped_storage().data_ptr())
            except SafetensorError as exc:  # a truncated weights file: named, not a traceback
                raise unreadable_weights(f"{directory} (its *.safetensors)", exc) from None
        missing = sorted(name for name, value in own.items()
                         if value.numel() and value.untyped_storage().data_ptr() not in written)
        if missing:
            raise ConfigError(f"{directory}: lacks {len(missing)} of the model's weights (e.g. {missing[0]})")


def saved_names(backbone: torch.nn.Module, state: dict[str, Tensor]) -> dict[str, str]:
    """``state``'s key -> the key ``save_pretrained`` writes it under: transformers' own reverse
    of its loading conversions (the one its save applies), matched by tensor identity (renaming
    keeps the tensors)."""
    from transformers.core_model_loading import revert_weight_conversion

    by_tensor = {id(value): name for name, value in state.items()}
    return {by_tensor[id(value)]: saved for saved, value in revert_weight_conversion(backbone, dict(state)).items()
            if id(value) in by_tensor}


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
