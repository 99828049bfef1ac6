"""The adaptation a model trains and ships -- a LoRA adapter, a projection head, or full weights --
as one object per kind (peft's layout: a config, the kinds, and what a saved directory holds):

- :mod:`.options`: what they are built from (the recipe's ``adaptation.lora:`` / ``.head:``
  sections) and act on (:class:`AdaptedModel`), the state-dict helpers of their ``save``;
- :mod:`.kinds`: :class:`LoraAdaptation`, :class:`HeadAdaptation`, :class:`FullAdaptation` and
  their registry :data:`ADAPTATIONS` (kind -> class), :class:`AdaptationOptions` (the recipe's
  ``adaptation:`` section), :func:`adaptation_of` (what a loaded model holds), :func:`warm_start`;
- :mod:`.saved`: what a saved directory holds (:func:`saved_adaptation`: its recorded kind), and
  :func:`attach_adapter` (a saved one loaded for inference).

The names below are the package's API (callers import them from here); no torch at import.
"""

from vis_embed.model.network.adaptation.kinds import (ADAPTATION_KINDS, ADAPTATIONS, Adaptation, AdaptationOptions,
                                                      FullAdaptation, HeadAdaptation, LoraAdaptation, adaptation_of,
                                                      adapter_kind, build_adaptation, has_lora, warm_start)
from vis_embed.model.network.adaptation.options import AdaptedModel, HeadOptions, LoraOptions
from vis_embed.model.network.adaptation.saved import attach_adapter, saved_adaptation, saved_adapter

__all__ = ["ADAPTATIONS", "ADAPTATION_KINDS", "Adaptation", "AdaptationOptions", "AdaptedModel", "FullAdaptation",
           "HeadAdaptation", "HeadOptions", "LoraAdaptation", "LoraOptions", "adaptation_of", "adapter_kind",
           "attach_adapter", "build_adaptation", "has_lora", "saved_adaptation", "saved_adapter", "warm_start"]
