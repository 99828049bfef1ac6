"""The model a recipe trains, and the settings it trains and records with.

``training_embedding_config``: the recipe's explicit ``model_options`` > the ``init_adapter``'s
recorded embedding_config.json > the base's > EmbeddingConfig's defaults, a warm start refusing
an explicit value that contradicts its adapter; ``build_training_model``: the EmbeddingModel
loaded with them plus the adaptation (LoRA, head or full); ``trained_embedding_config``: what
every checkpoint and final/ record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from vis_embed.errors import ConfigError
from vis_embed.model.network.adaptation import Adaptation
from vis_embed.model.network.compile_blocks import compile_blocks, resolve_compile
from vis_embed.model.embedding_config import EmbeddingConfig, check_adapter_agrees, resolve_embedding_config
from vis_embed.model.network.embedding_model import EmbeddingModel
from vis_embed.training.deepspeed_config import zero_stage
from vis_embed.training.recipe import Recipe

if TYPE_CHECKING:
    from vis_embed.data.train import TrainDataConfig


def training_embedding_config(recipe: Recipe) -> EmbeddingConfig:
    """The settings the model trains with: the recipe's explicit ``model_options`` > the
    ``init_adapter``'s recorded embedding_config.json > the base's > the defaults.  A warm start
    refuses an explicit value that contradicts the adapter's record (naming both)."""
    explicit = recipe.model_options.explicit()
    if recipe.init_adapter:
        check_adapter_agrees(recipe.init_adapter, explicit, "the recipe", field_prefix="model_options.")
    return resolve_embedding_config(recipe.model, recipe.init_adapter, **explicit)


def build_training_model(recipe: Recipe, device: torch.device, adaptation: Adaptation | None = None) -> nn.Module:
    """EmbeddingModel from the recipe: its settings (training_embedding_config), the adaptation
    (``adaptation``, default the recipe's: LoRA, head or full), gradient checkpointing."""
    model = EmbeddingModel.from_pretrained(recipe.model, device=device, config=training_embedding_config(recipe))
    (adaptation or recipe.adaptation.build()).apply(model)
    if recipe.model_options.gradient_checkpointing is True:  # "auto": decided by training/memory_plan.py
        model.enable_gradient_checkpointing()
    if training_compiles(recipe, device):
        compile_blocks(model.base_model(), device)  # lazy: the first forward (the memory probe's) compiles
    model.train()
    return model


def training_compiles(recipe: Recipe, device: torch.device) -> bool:
    """Whether the blocks train compiled: ``model_options.compile`` as given, null by inference's
    rule (:func:`resolve_compile`: on for CUDA, off elsewhere) -- except under ZeRO-3, which gathers
    each module's partitioned weights in hooks around its call that a compiled block would trace
    over (DeepSpeed needs its own ``engine.compile()`` for that): off there by default, refused
    when asked for."""
    requested = recipe.model_options.compile
    zero3 = recipe.deepspeed is not None and zero_stage(recipe.deepspeed) >= 3
    if zero3 and requested:
        raise ConfigError(f"model_options.compile: true does not combine with ZeRO stage 3 ({recipe.deepspeed}); "
                          f"use ds_configs/zero2.json or compile: false")
    return not zero3 and resolve_compile(requested, device)


def trained_embedding_config(recipe: Recipe, data: TrainDataConfig, model: EmbeddingModel) -> EmbeddingConfig:
    """What ``embedding_config.json`` records in every checkpoint and final/: the settings the
    model trained with (recipe model_options over the base's record), the adaptation, and the
    instructions when every dataset shares them; not attn_implementation (the training
    machine's kernel choice, not how the model embeds)."""
    def shared(values: list[str | None]) -> str | None:
        """The one instruction every dataset trains with ("": none, as the prompt builder treats
        None); None (null) only when they differ, so the export can tell the two apart."""
        texts = {value or "" for value in values}
        return texts.pop() if len(texts) == 1 else None

    return model.embedding_config.model_copy(update={
        "attn_implementation": None, "adaptation": recipe.adaptation.kind,
        "query_instruction": shared([d.query_instruction for d in data.datasets]),
        "document_instruction": shared([d.candidate_instruction for d in data.datasets]),
        "matryoshka_dims": recipe.loss.matryoshka_dims})
