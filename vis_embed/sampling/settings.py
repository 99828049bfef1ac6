"""The schedule settings, declared once.

:class:`SamplingOptions` is how batches are drawn (the recipe's ``sampling:`` section, the
``vis-embed schedule`` flags, the keyword arguments of ``build_schedule``);
:class:`ScheduleSettings` adds what one schedule file needs on top (steps, B, seed) and
checks the combinations that cannot work.  Built directly, errors name the *setting*
(``interleave_batch_size``); ``vis-embed schedule`` generates its flags from the fields
(``--interleave-batch-size``) and its errors name the flag (:class:`vis_embed.config.Settings`);
a recipe's errors name its dotted key (``sampling.hard_negatives``) and line.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from vis_embed.config import Settings, flag, invalid, validated


class SamplingOptions(Settings):
    """How batches are drawn; every field has its meaning in ``description`` (also the CLI help)."""

    model_config = ConfigDict(frozen=True)

    interleave_batch_size: int | None = Field(
        None, gt=0, description="M: members per slot; every slot comes from one sub-dataset (B = slots x M)")
    hard_negatives: int = Field(
        5, ge=0, description="k designated hard negatives placed in the anchor's slot (0: none)",
        json_schema_extra=flag("--hard-negatives"))
    size_exponent: float = Field(
        1.0, ge=0, description="dataset share ∝ weight x rows^EXP (1: weight x size; 0: weight only)",
        json_schema_extra=flag("--size-exponent"))
    small_datasets: Literal["error", "skip"] = Field(
        "error", description="a dataset with fewer than M usable identities: fail or skip it "
                             "(listed in the report)", json_schema_extra=flag("--small-datasets"))
    strategy: Literal["identity_aware", "naive"] = Field(
        "identity_aware", description="identity_aware (VisME) or naive: one sub-dataset per slot, "
                                      "rows drawn uniformly, no identity constraint (the ablation's baseline)",
        json_schema_extra=flag("--strategy"))

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> SamplingOptions:
        """Validated options from a mapping; ``ConfigError`` naming the setting otherwise."""
        return validated(cls, values)

    def schedule_settings(self, *, steps: int, global_batch_size: int, seed: int) -> ScheduleSettings:
        """The settings of one schedule; an unset ``interleave_batch_size`` means one slot per batch (M = B)."""
        values = self.model_dump()
        if values["interleave_batch_size"] is None:
            values["interleave_batch_size"] = global_batch_size
        return ScheduleSettings(steps=steps, global_batch_size=global_batch_size, seed=seed, **values)


class ScheduleSettings(SamplingOptions):
    """The arguments of one schedule (their fingerprint goes into the file's metadata).

    Invalid values raise :class:`~vis_embed.errors.SettingsError` naming the setting.
    """

    steps: int = Field(ge=1, description="number of optimizer steps (batches)", json_schema_extra=flag("--steps"))
    global_batch_size: int = Field(ge=1, description="B: members per batch, all ranks",
                                   json_schema_extra=flag("--global-batch-size"))
    interleave_batch_size: int = Field(  # type: ignore[assignment]  # required here
        ge=1, description="M: members per slot; every slot comes from one sub-dataset (B = slots x M)",
        json_schema_extra=flag("--interleave-batch-size"))
    seed: int = Field(0, ge=0, description="same seed + same data + same settings -> identical schedule",
                      json_schema_extra=flag("--seed"))

    # The combinations no schedule can have, checked here once: `vis-embed schedule`, build_schedule
    # and a recipe (training.recipe.Recipe validates the settings it would build) all meet them.
    @model_validator(mode="after")
    def _check_combinations(self) -> ScheduleSettings:
        b, m, k = self.global_batch_size, self.interleave_batch_size, self.hard_negatives
        if b % m:
            raise invalid(f"global_batch_size {b} is not a multiple of interleave_batch_size {m} "
                          f"(B = slots x M)", "global_batch_size")
        if k and k + 1 > m:
            raise invalid(f"hard_negatives {k} cannot fit: an anchor and its {k} hard negatives need a "
                          f"slot of at least {k + 1} members, but interleave_batch_size is {m}", "hard_negatives")
        if k and self.strategy == "naive":
            raise invalid(f"the naive strategy places no hard negatives: set hard_negatives to 0 (got {k})",
                          "hard_negatives")
        return self

    @property
    def num_slots(self) -> int:
        return self.global_batch_size // self.interleave_batch_size

    def to_json(self) -> dict[str, Any]:
        # explicit order: this dict is written into the schedule file's metadata
        return {"steps": self.steps, "global_batch_size": self.global_batch_size,
                "interleave_batch_size": self.interleave_batch_size,
                "hard_negatives": self.hard_negatives, "seed": self.seed,
                "size_exponent": self.size_exponent, "small_datasets": self.small_datasets,
                "strategy": self.strategy}
