"""Which adaptation kind, from a recipe or from a model: :class:`AdaptationOptions` (the recipe's
``adaptation:`` section: the kind and each kind's own section; :meth:`~AdaptationOptions.build`
selects the class from the registry) and :func:`adaptation_of` (what a loaded model holds).  What
a saved directory holds is :mod:`.saved`'s answer.

The module imports every kind, so the registry is complete here, and that is checked at import:
one class per declared kind (``embedding_config.AdaptationKind``).  No torch at module level.
"""

from __future__ import annotations

from pydantic import Field

from vis_embed.config import Settings
from vis_embed.model.embedding_config import AdaptationKind
from vis_embed.model.network.adaptation.base import ADAPTATION_KINDS, ADAPTATIONS, Adaptation, AdaptedModel, has_lora
from vis_embed.model.network.adaptation.full import FullAdaptation
from vis_embed.model.network.adaptation.head import HeadAdaptation, HeadOptions
from vis_embed.model.network.adaptation.lora import LoraAdaptation, LoraOptions

if set(ADAPTATIONS) != set(ADAPTATION_KINDS):  # one class per declared kind
    raise TypeError(f"adaptation classes {sorted(ADAPTATIONS)} != the declared kinds {ADAPTATION_KINDS}")


class AdaptationOptions(Settings):
    """The recipe's ``adaptation:`` section: which adaptation trains (``kind``) and each kind's
    config; :meth:`build` makes the :class:`Adaptation` object.  The older spellings (a bare
    ``adaptation: KIND``, top-level ``lora:`` / ``head:`` sections, ``lora.enabled: false`` for
    ``full``) are read with the same meaning (``training.recipe_spellings``)."""

    kind: AdaptationKind = "lora"  # lora; head: frozen backbone + projection head; full: every weight
    lora: LoraOptions = Field(default_factory=LoraOptions)
    head: HeadOptions = Field(default_factory=HeadOptions)

    def build(self) -> Adaptation:
        """The kind's class (from :data:`ADAPTATIONS`) built from the kind's own section: the
        field named after the kind (``lora``, ``head``; none for ``full``)."""
        return ADAPTATIONS[self.kind].from_options(getattr(self, self.kind, None))


def build_adaptation(kind: AdaptationKind, lora: LoraOptions | None = None,
                     head: HeadOptions | None = None) -> Adaptation:
    """The adaptation of ``kind`` configured by its section (the recipe's ``lora:`` / ``head:``)."""
    options = AdaptationOptions(kind=kind, lora=lora or LoraOptions(), head=head or HeadOptions())
    return options.build()


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
