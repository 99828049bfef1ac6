"""The adaptation a model trains and ships -- a LoRA adapter, a projection head, or full weights --
as one object per kind, one module per kind (peft's layout: ``tuners/lora/{config,model}.py``):

- :mod:`.base`: the :class:`Adaptation` base class and its registry :data:`ADAPTATIONS` (kind ->
  class; each kind registers itself), :class:`AdaptedModel` (what they act on), :func:`has_lora`
  (the peft probe), :func:`warm_start`;
- :mod:`.lora`: :class:`LoraOptions` (the recipe's ``adaptation.lora:``) and :class:`LoraAdaptation`;
  :mod:`.head`: :class:`HeadOptions` (``adaptation.head:``) and :class:`HeadAdaptation`;
  :mod:`.full`: :class:`FullAdaptation`;
- :mod:`.options`: :class:`AdaptationOptions` (the recipe's ``adaptation:`` section; ``build()``
  selects the kind's class), :func:`build_adaptation`, :func:`adaptation_of` (what a loaded model
  holds); it imports every kind, and checks at import that the registry has one class per
  declared kind;
- :mod:`.saved`: what a saved directory holds (:func:`saved_adaptation`: its recorded kind), and
  :func:`attach_adapter` (a saved one loaded for inference).

The names below are the package's API: every module outside the package imports them from here,
never from a submodule (tests/test_one_rule.py).  No torch at import.
"""

from vis_embed.model.network.adaptation.base import (ADAPTATION_KINDS, ADAPTATIONS, Adaptation, AdaptedModel,
                                                     has_lora, warm_start)
from vis_embed.model.network.adaptation.full import FullAdaptation
from vis_embed.model.network.adaptation.head import HeadAdaptation, HeadOptions
from vis_embed.model.network.adaptation.lora import LoraAdaptation, LoraOptions
from vis_embed.model.network.adaptation.options import (AdaptationOptions, adaptation_of, adapter_kind,
                                                        build_adaptation)
from vis_embed.model.network.adaptation.saved import (attach_adapter, refuse_adapter_as_model, saved_adaptation,
                                                      saved_adapter)

__all__ = ["ADAPTATIONS", "ADAPTATION_KINDS", "Adaptation", "AdaptationOptions", "AdaptedModel", "FullAdaptation",
           "HeadAdaptation", "HeadOptions", "LoraAdaptation", "LoraOptions", "adaptation_of", "adapter_kind",
           "attach_adapter", "build_adaptation", "has_lora", "refuse_adapter_as_model", "saved_adaptation",
           "saved_adapter", "warm_start"]
