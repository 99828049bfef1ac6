"""Training recipes: validated YAML with ``--set key.path=value`` overrides.

A recipe is one YAML file holding everything a run needs (model, data, schedule, optimiser,
LoRA, GradCache, temperature, checkpointing).  It is validated with pydantic: an unknown or
ill-typed key is a :class:`~vis_embed.errors.ConfigError` naming the file and the dotted key,
never a silent default.  Relative paths are resolved against the current directory (launch
scripts run from the repository root).

``--set`` values are parsed as YAML scalars/lists, so ``--set adaptation.lora.r=8`` (or the older
``--set lora.r=8``: the older spellings are read by :mod:`vis_embed.training.recipe_spellings`),
``--set temperature.learnable=false`` and ``--set adaptation.lora.target_modules=[q_proj,v_proj]`` work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional, get_args

import yaml
from pydantic import (Field, PositiveFloat, PositiveInt, create_model,
                      field_validator, model_validator)
from pydantic.fields import FieldInfo

from vis_embed.config import Settings, invalid, validated
from vis_embed.data.yaml_lines import LineDict, load_yaml_with_lines
from vis_embed.errors import ConfigError, DataError, SettingsError
from vis_embed.integrations import require
from vis_embed.model.network.adaptation import AdaptationOptions
from vis_embed.model.embedding_config import LOADING, EmbeddingConfig, flag_fields, matryoshka_dims_field
from vis_embed.sampling.settings import SamplingOptions, ScheduleSettings
from vis_embed.training.recipe_spellings import MovedTwoTierKeys, upgrade_override_path, upgrade_recipe_spellings


class OptimizerConfig(Settings):
    lr: float = Field(1e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(1e-8, gt=0)
    warmup_steps: int = Field(0, ge=0)
    decay: Literal["cosine", "linear", "constant"] = "cosine"
    min_lr_ratio: float = Field(0.0, ge=0, le=1)
    max_grad_norm: float = Field(1.0, ge=0)  # 0 = no clipping


class TemperatureConfig(Settings):
    init: float = Field(0.02, gt=0)
    learnable: bool = True
    freeze_steps: int = Field(0, ge=0)  # keep tau fixed for the first steps (random backbones)
    min: float = Field(0.005, gt=0)
    lr: float | None = Field(None, gt=0)  # default: optimizer.lr


class TwoTierOptions(MovedTwoTierKeys):
    """NearID's two-tier loss (training/losses/two_tier.py): L = L_disc + alpha * L_rank."""

    alpha: float = Field(0.5, ge=0)                 # weight of the ranking tier (NearID: 0.5)
    temperature: float | None = Field(0.07, gt=0)   # fixed tau (NearID: 0.07); null: the recipe's temperature


class TwoTierMarginOptions(Settings):
    weight: float = Field(1.0, ge=0)         # weight of the margin tier beside InfoNCE
    margin: float = Field(0.1, ge=0, le=2)   # cosine margin: positive above each designated look-alike


class TripletHingeOptions(Settings):
    margin: float = Field(0.05, ge=0, le=2)  # cosine-distance margin of the hinge


LossKind = Literal["infonce", "two_tier", "two_tier_margin", "triplet_hinge"]
LOSS_KINDS: tuple[str, ...] = get_args(LossKind)


class LossConfig(Settings):
    """The objective (training/losses/): ``infonce`` (VisME), ``two_tier`` (NearID),
    ``two_tier_margin`` (the project's earlier margin variant, once named two_tier), ``triplet_hinge`` (DreamSim); each
    kind's options live in its own sub-section."""

    kind: LossKind = "infonce"
    identity_mask: bool = True  # leave same-identity candidates out of a query's negatives
    two_tier: TwoTierOptions = Field(default_factory=TwoTierOptions)
    two_tier_margin: TwoTierMarginOptions = Field(default_factory=TwoTierMarginOptions)
    triplet_hinge: TripletHingeOptions = Field(default_factory=TripletHingeOptions)
    # Matryoshka (training/losses/matryoshka.py): the loss also on these renormalised prefixes
    matryoshka_dims: list[PositiveInt] | None = None
    matryoshka_weights: list[PositiveFloat] | None = None  # one per dim; default 1 each

    @field_validator("matryoshka_dims")
    @classmethod
    def _matryoshka_dims(cls, dims: list[int] | None) -> list[int] | None:
        return dims if dims is None else matryoshka_dims_field(dims)

    def training_temperature(self, temperature: TemperatureConfig) -> TemperatureConfig:
        """The temperature this objective trains with: NearID's ``two_tier`` fixes its own tau
        (``two_tier.temperature``, not learnable, never below itself), so the trainer's
        temperature -- and the logged tau -- are the ones the loss used; every other kind (and
        ``two_tier.temperature: null``) trains with the recipe's ``temperature:`` section."""
        tau = self.two_tier.temperature if self.kind == "two_tier" else None
        if tau is None:
            return temperature
        return temperature.model_copy(update={"init": tau, "learnable": False, "freeze_steps": 0, "min": tau})

    @model_validator(mode="after")
    def _matryoshka_consistent(self) -> "LossConfig":
        dims, weights = self.matryoshka_dims, self.matryoshka_weights
        if weights is not None and (dims is None or len(weights) != len(dims)):
            raise invalid(f"matryoshka_weights needs one weight per matryoshka_dims entry "
                          f"({len(dims or [])}), got {len(weights)}", "matryoshka_weights")
        return self


class GradCacheConfig(Settings):
    # members per forward chunk; 0 = GradCache off; auto: from a memory probe (training/memory_plan.py)
    chunk_size: Annotated[int, Field(ge=0)] | Literal["auto"] = 0
    # close a chunk early when padding would exceed this fraction (members sorted by length)
    max_padding: float = Field(0.1, ge=0, le=1)


def _inherited(name: str) -> tuple[Any, FieldInfo]:
    """EmbeddingConfig's field ``name`` with default None (= inherit the recorded value)."""
    field = EmbeddingConfig.model_fields[name]
    annotation = Optional[field.annotation]  # noqa: UP045  # a runtime type expression
    return annotation, FieldInfo.merge_field_infos(field, default=None, annotation=annotation)


class _ModelOptionsBase(Settings):
    # training only: recompute activations in the backward pass; auto: only when needed (training/memory_plan.py)
    gradient_checkpointing: bool | Literal["auto"] = False
    # training only: torch.compile each decoder layer and vision block (model/network/compile_blocks.py:
    # the element-wise work fused, forward and backward).  null: on for CUDA (the 2B step 0.65x of
    # eager's on an H200, docs/benchmarks.md), off on a CPU and under ZeRO-3 (training/model_setup.py)
    compile: bool | None = None

    def explicit(self) -> dict[str, Any]:
        """The EmbeddingConfig values this recipe sets (None = not set: inherited)."""
        return {name: value for name in EmbeddingConfig.model_fields
                if (value := getattr(self, name, None)) is not None}


# How the model embeds while it trains: the loading settings of EmbeddingConfig (model/), derived
# from it (same names, vocabularies and bounds), each None by default.  None = inherit: the
# init_adapter's recorded embedding_config.json > the base's > EmbeddingConfig's default; what
# training used is what embedding_config.json records (model_setup.trained_embedding_config).
ModelOptions = create_model(  # type: ignore[call-overload]
    "ModelOptions", __base__=_ModelOptionsBase, __module__=__name__,
    **{name: _inherited(name) for name in flag_fields([LOADING])})


class CheckpointConfig(Settings):
    every: int = Field(500, ge=0)           # 0 = only final/
    keep_last: int | None = Field(None, ge=1)  # None = keep all checkpoint-STEP/


class LoggingConfig(Settings):
    every: int = Field(1, ge=1)
    tensorboard: bool = True
    progress_bar: bool = True
    wandb: bool = False                      # Weights & Biases (extra vis_embed[wandb]); main process only
    wandb_project: str | None = None         # default "vis_embed"
    wandb_run_name: str | None = None        # default: the output directory's name


class Recipe(Settings):
    model: str
    data: str
    schedule: str
    output_dir: str
    max_steps: int = Field(gt=0)
    global_batch_size: int = Field(gt=0)
    # transformers.set_seed seeds numpy's legacy RNG, which takes [0, 2**32); seed + rank must fit.
    seed: int = Field(42, ge=0, lt=2**31)
    # the schedule settings' one declaration (the model the `vis-embed schedule` flags and
    # build_schedule use): builds a missing schedule, and an existing one must have been built
    # with them (schedule_source.check_schedule_settings); an unset interleave_batch_size means
    # one slot per batch (M = global_batch_size)
    sampling: SamplingOptions = Field(default_factory=SamplingOptions)
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    temperature: TemperatureConfig = Field(default_factory=TemperatureConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    # what trains: adaptation.kind (lora, head or full) and each kind's config (adaptation.lora,
    # adaptation.head); the older spellings (adaptation: KIND, top-level lora: / head:,
    # lora.enabled: false) are read with the same meaning (training/recipe_spellings.py)
    adaptation: AdaptationOptions = Field(default_factory=AdaptationOptions)
    # warm start: the recipe's adaptation starts from the weights of that kind saved in this
    # directory (a run's final/ or checkpoint-STEP/: a LoRA adapter, a projection head, or a full
    # checkpoint for kind full; adaptation.warm_start); optimiser, LR schedule and tau start fresh
    # (--resume wins)
    init_adapter: str | None = None
    gradcache: GradCacheConfig = Field(default_factory=GradCacheConfig)
    model_options: ModelOptions = Field(default_factory=ModelOptions)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    deepspeed: str | None = None  # path to a ds_configs/*.json ("auto" values filled in)
    # processes preparing items (model/runtime/prepare_pool.py), the next step's while this one trains; 0: in
    # the main process, no overlap.  Per rank under torchrun.
    num_workers: int = Field(2, ge=0)
    torch_threads: int | None = Field(None, gt=0)  # torch intra-op threads (None: torch's default)

    @field_validator("model", "data", "schedule", "output_dir", "init_adapter")
    @classmethod
    def _not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="before")
    @classmethod
    def _older_spellings(cls, values: Any) -> Any:
        # a copy: a caller's mapping is not changed (load_recipe upgraded its document already)
        return upgrade_recipe_spellings(dict(values)) if isinstance(values, dict) else values

    @model_validator(mode="after")
    def _check_temperature(self) -> "Recipe":
        if self.temperature.init < self.temperature.min:
            raise invalid(f"temperature.init {self.temperature.init} is below temperature.min "
                          f"{self.temperature.min}", "temperature", "init")
        return self

    @model_validator(mode="after")
    def _check_schedule_settings(self) -> "Recipe":
        # ScheduleSettings' own checks (B a multiple of M, k + 1 <= M, ...) on the settings this
        # recipe trains with, so a combination no schedule can have is named here, at its key
        # and line, not after the data has loaded.
        try:
            self.schedule_settings()
        except SettingsError as error:
            raise invalid(error.reason, *recipe_key(error.field)) from None
        return self

    def schedule_settings(self) -> ScheduleSettings:
        """The settings of the schedule this recipe trains on: ``sampling:`` with max_steps,
        global_batch_size and seed (what a missing schedule is built with, and what an existing
        one must record)."""
        return self.sampling.schedule_settings(steps=self.max_steps, global_batch_size=self.global_batch_size,
                                               seed=self.seed)


def recipe_key(setting: str | None) -> tuple[str, ...]:
    """The recipe key of a ScheduleSettings field: ``steps`` is max_steps, the sampling options
    live under ``sampling:``, global_batch_size and seed at the top level."""
    if setting is None:
        return ()
    if setting == "steps":
        return ("max_steps",)
    return ("sampling", setting) if setting in SamplingOptions.model_fields else (setting,)


# The recipe keys a resumed run may change (run_dir.check_resumed_recipe compares all others).
# Not every one leaves the numbers as they were (docs/training.md, "Resume"):
# * max_steps ends the run at another step (never below the newest checkpoint's:
#   run_dir.check_resumed_step), and with optimizer.decay cosine or linear it reshapes the LR still
#   to come: the resumed step keeps the LR the checkpoint saved, the later ones follow the decay
#   over the new max_steps, so the run is neither the old one continued nor a fresh run of the
#   new length (the trainer logs a warning); with decay constant only the length changes;
# * torch_threads can change float rounding on a CPU (a reduction split over other threads);
# * logging, output_dir (a run directory may be moved) and num_workers (prefetch) change nothing;
# * model_options.compile changes float rounding (Inductor's fused kernels), as torch_threads does.
# A dotted key names one leaf; a plain one its whole section.
# Declared here, beside the keys and without torch, so that `vis-embed train --help` lists them
# from this one tuple.
RESUME_MAY_CHANGE = ("max_steps", "logging", "output_dir", "num_workers", "torch_threads", "model_options.compile")


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"adaptation.lora.r=8"`` -> (["adaptation", "lora", "r"], 8).  Values are YAML (numbers, booleans, lists)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY.PATH=VALUE")
    key, raw = text.split("=", 1)
    if not key.strip() or any(not part for part in key.strip().split(".")):
        raise ConfigError(f"--set {text!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for text in overrides:
        path, value = parse_override(text)
        path = upgrade_override_path(path, value)  # the older `--set adaptation=KIND`
        node = raw
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {text!r}: '{part}' is not a section")
            node = child
        node[path[-1]] = value
        if isinstance(node, LineDict):  # the value is not the file's: an error names no line for it
            node.key_lines[path[-1]] = None
    return raw


def _dotted_as_in_set(loc: tuple[Any, ...]) -> str:
    return ".".join(map(str, loc)) or "(root)"


def load_recipe(path: str | Path | None = None, overrides: list[str] | None = None,
                raw: dict[str, Any] | None = None) -> Recipe:
    """Read, override and validate a recipe; raises ConfigError naming file, line and key (like
    every YAML of the package: :func:`vis_embed.config.format_validation_error`)."""
    source = str(path) if path is not None else "recipe"
    if raw is None:
        if path is None:
            raise ConfigError("no recipe given")
        recipe_path = Path(path)
        if not recipe_path.is_file():
            raise ConfigError(f"{recipe_path}: recipe not found")
        try:
            raw = load_yaml_with_lines(recipe_path)  # line-aware: errors name the line
        except DataError as exc:  # invalid YAML, not UTF-8, duplicate key: FILE:LINE
            raise ConfigError(str(exc)) from None
        raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a recipe is a mapping of keys, got {type(raw).__name__}")
    document = raw if isinstance(raw, LineDict) else dict(raw)  # a caller's mapping is not changed
    # older adaptation spellings moved into `adaptation:`, before and after the overrides (either
    # spelling may be --set), keeping their lines for the error messages
    document = upgrade_recipe_spellings(apply_overrides(upgrade_recipe_spellings(document), list(overrides or [])))
    recipe = validated(Recipe, document, source, document, dotted=_dotted_as_in_set)
    check_optional_dependencies(recipe, source)
    return recipe


# Optional extras a recipe can ask for: (importable module, pip package, extra of vis_embed).
DEEPSPEED = ("deepspeed", "deepspeed", "deepspeed")
WANDB = ("wandb", "wandb", "wandb")


def check_optional_dependencies(recipe: Recipe, source: str = "recipe") -> None:
    """Fail before any model is loaded when the recipe needs an extra that is not installed.

    Checked with ``find_spec`` (nothing is imported: DeepSpeed's import alone takes seconds),
    flash-attn by its distribution (``attention.require_flash_package``: flash-attn-4 installs a
    ``flash_attn`` folder too); the trainer imports the package itself only when asked for.
    """
    needed = []
    if recipe.deepspeed is not None:
        needed.append((DEEPSPEED, f"deepspeed: {recipe.deepspeed}"))
    if recipe.model_options.attn_implementation is not None:
        from vis_embed.model.network.attention import require_flash_package

        require_flash_package(recipe.model_options.attn_implementation, f"recipe {source}")
    if recipe.logging.wandb:
        needed.append((WANDB, "logging.wandb: true"))
    for (module, package, extra), field in needed:
        require(module, extra, f"recipe {source}", package, because=field)


def recipe_to_dict(recipe: Recipe) -> dict[str, Any]:
    return recipe.model_dump(mode="json")
