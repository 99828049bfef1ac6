"""InfoNCE over the global batch: formula, identity masking, hard negatives, temperature."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from vis_embed.training.losses import Temperature, info_nce_loss

UNKNOWN_LABEL = -1  # a label code below 0: never masked (false_negative_mask)


def _unit(n: int, d: int, seed: int) -> torch.Tensor:
    return F.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(seed)), dim=-1)


def test_loss_matches_the_formula_term_by_term() -> None:
    q, c, tau = _unit(6, 8, 0), _unit(6, 8, 1), 0.05
    expected = 0.0
    for i in range(6):
        scores = [float(q[i] @ c[j]) / tau for j in range(6)]
        expected -= scores[i] - math.log(sum(math.exp(s) for s in scores))
    assert info_nce_loss(q, c, tau).item() == pytest.approx(expected / 6, rel=1e-5)


def test_same_identity_non_positive_candidates_are_masked() -> None:
    q, c = _unit(4, 8, 2), _unit(4, 8, 3)
    # members 0 and 2 share an identity: candidate 2 must leave query 0's denominator (and vice versa)
    ids = torch.tensor([7, 1, 7, UNKNOWN_LABEL])
    masked = info_nce_loss(q, c, 0.1, ids)
    scores = q @ c.T / 0.1
    per_query = []
    for i in range(4):
        keep = [j for j in range(4) if not (j != i and ids[i] >= 0 and ids[j] == ids[i])]
        per_query.append(-(scores[i, i] - torch.logsumexp(scores[i, keep], dim=0)))
    assert masked.item() == pytest.approx(torch.stack(per_query).mean().item(), rel=1e-6)
    assert masked.item() < info_nce_loss(q, c, 0.1).item()  # masking removed a negative


def test_unknown_identities_are_never_masked_together() -> None:
    q, c = _unit(3, 8, 4), _unit(3, 8, 5)
    ids = torch.full((3,), UNKNOWN_LABEL)
    assert info_nce_loss(q, c, 0.1, ids).item() == pytest.approx(info_nce_loss(q, c, 0.1).item())


def test_hard_negatives_in_the_batch_count_as_negatives() -> None:
    q, c = _unit(4, 8, 6), _unit(4, 8, 7)
    ids = torch.tensor([0, 1, 2, 3])
    base = info_nce_loss(q, c, 0.1, ids)
    c_hard = c.clone()
    c_hard[1] = q[0]  # candidate 1 (another identity) now looks exactly like query 0
    assert info_nce_loss(q, c_hard, 0.1, ids).item() > base.item() + 0.1


def test_learnable_temperature_gets_a_gradient_and_starts_at_init() -> None:
    tau = Temperature(0.02)
    assert tau.value == pytest.approx(0.02)
    info_nce_loss(_unit(5, 8, 8), _unit(5, 8, 9), tau()).backward()
    assert tau.log_tau.grad is not None and tau.log_tau.grad.abs() > 0


def test_fixed_and_frozen_temperature_get_no_gradient() -> None:
    fixed = Temperature(0.07, learnable=False)
    frozen = Temperature(0.07, learnable=True, freeze_steps=3)
    for tau in (fixed, frozen):
        loss = info_nce_loss(_unit(5, 8, 10), _unit(5, 8, 11), tau())
        assert not loss.requires_grad or tau.log_tau.grad is None
    frozen.set_step(3)
    info_nce_loss(_unit(5, 8, 10), _unit(5, 8, 11), frozen()).backward()
    assert frozen.log_tau.grad is not None


def test_temperature_is_clamped_from_below() -> None:
    tau = Temperature(0.02, min_value=0.01)
    with torch.no_grad():
        tau.log_tau.fill_(math.log(1e-4))
    assert tau().item() == pytest.approx(0.01)


def test_a_learnable_temperature_at_its_floor_can_rise_again() -> None:
    # Once tau reached min_value the clamp's gradient was 0 (at equality too): it stayed there for
    # the rest of the run, whatever the loss wanted.  Now: pushed down to the floor, kept there by
    # keep_in_range, then a loss that wants a larger tau raises it.
    tau = Temperature(0.006, min_value=0.005)
    optimizer = torch.optim.AdamW([tau.log_tau], lr=0.05, weight_decay=0.0)

    def steps(direction: float, count: int) -> None:
        for _ in range(count):
            (direction * tau()).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            tau.keep_in_range()

    steps(+1.0, 20)  # minimising tau: down to the floor, the parameter not below it
    assert tau.value == pytest.approx(0.005) and float(tau.log_tau) == pytest.approx(math.log(0.005))
    steps(-1.0, 20)  # maximising tau
    assert tau.value > 0.0055


def test_the_temperature_is_built_from_the_recipe_section_and_the_loss_owns_two_tiers_fixed_tau() -> None:
    from vis_embed.training.recipe import LossConfig, TemperatureConfig

    section = TemperatureConfig(init=0.03, learnable=True, freeze_steps=2, min=0.01, lr=1e-3)
    recipe_tau = Temperature.from_config(section, LossConfig(kind="infonce"))
    assert (recipe_tau.value, recipe_tau.learnable, recipe_tau.freeze_steps, recipe_tau.min_value) == \
        pytest.approx((0.03, True, 2, 0.01))
    fixed = Temperature.from_config(section, LossConfig(kind="two_tier"))  # NearID: tau 0.07, fixed
    assert (fixed.value, fixed.learnable, fixed.freeze_steps, fixed.min_value) == pytest.approx((0.07, False, 0, 0.07))
    unset = LossConfig(kind="two_tier", two_tier={"temperature": None})  # null: the recipe's temperature
    assert unset.training_temperature(section) is section
    assert LossConfig(kind="two_tier").training_temperature(section).lr == 1e-3  # tau's lr stays the recipe's


# --------------------------------------------------------------------------------------------
# loss.identity_mask (the paper's naive baseline trains without the mask)


def test_identity_mask_off_keeps_a_repeated_identity_as_a_negative() -> None:
    """`loss.identity_mask` (build_objective's identity_mask) only matters when an identity repeats."""
    from vis_embed.training.losses import BatchLabels, build_objective

    q, c = _unit(4, 8, 8), _unit(4, 8, 9)
    tau = Temperature(0.1, learnable=False)
    from vis_embed.training.recipe import LossConfig

    masked, unmasked = (build_objective(LossConfig(identity_mask=mask), tau) for mask in (True, False))
    repeated = BatchLabels(torch.tensor([3, 1, 3, 2]))  # members 0 and 2: two instances of one identity
    assert float(unmasked(q, c, repeated)) == pytest.approx(info_nce_loss(q, c, 0.1).item())  # all count
    assert float(masked(q, c, repeated)) == pytest.approx(info_nce_loss(q, c, 0.1, repeated.labels).item())
    assert float(masked(q, c, repeated)) < float(unmasked(q, c, repeated))
    distinct = BatchLabels(torch.tensor([3, 1, 0, 2]))  # no identity twice: nothing to mask, the same loss
    assert float(masked(q, c, distinct)) == pytest.approx(float(unmasked(q, c, distinct)))


@pytest.mark.usefixtures("one_torch_thread")
def test_recipe_identity_mask_false_trains_and_is_recorded(tiny_checkpoint, tmp_path) -> None:
    """`--set loss.identity_mask=false` trains; on batches that repeat an identity its loss differs
    from the masked run's from the first step (same seed, same batches); the run records it."""
    import json
    import sys
    from pathlib import Path

    import yaml

    from vis_embed.data import load_train_config
    from vis_embed.training.recipe import load_recipe
    from vis_embed.training.schedule_source import write_recipe_schedule
    from vis_embed.training.trainer import Trainer

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _training_fixtures import tiny_recipe, write_identity_dataset

    data = write_identity_dataset(tmp_path / "data", identities=3, images_per_identity=4)
    # 3 identities in batches of 4: every naive batch holds some identity twice
    schedule = write_recipe_schedule(load_train_config(data), tmp_path / "naive.parquet", steps=2, global_batch_size=4,
                                     seed=0, sampling={"interleave_batch_size": 4, "hard_negatives": 0,
                                                       "strategy": "naive"}, show_progress=False)
    first_losses = {}
    for mask in ("true", "false"):
        out = tmp_path / f"mask-{mask}"
        raw = tiny_recipe(tiny_checkpoint("qwen2-vl"), data, schedule, out, max_steps=2, checkpoint__every=2,
                          sampling__strategy="naive")
        recipe = load_recipe(raw=raw, overrides=[f"loss.identity_mask={mask}"])
        assert recipe.loss.identity_mask is (mask == "true")
        Trainer(recipe).train()
        log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
        first_losses[mask] = log[0]["loss"]
        assert yaml.safe_load((out / "recipe.yaml").read_text())["loss"]["identity_mask"] is (mask == "true")
        state = json.loads((out / "final" / "trainer_state.json").read_text())
        assert state["recipe"]["loss"]["identity_mask"] is (mask == "true")
        card = (out / "final" / "README.md").read_text()
        assert f"| loss.identity_mask | {mask == 'true'} |" in card
    # without the mask the other instance of the query's identity is a (close) negative: higher loss
    assert first_losses["false"] > first_losses["true"]
