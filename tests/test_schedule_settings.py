"""The schedule settings are declared once, errors name settings, identities are encoded once.

- the ``vis-embed schedule`` flags, the recipe's ``sampling:`` section and ``ScheduleSettings``
  share defaults (one declaration), and an invalid value names the setting, not a flag;
- the data-config path hands the scheduler int identity codes (never decoded to strings);
  the schedule must be exactly the one the same identities given as labels produce.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from vis_embed.cli import main
from vis_embed.errors import ConfigError
from vis_embed.sampling import SamplingOptions, ScheduleSettings, SubDataset, plan_schedule, subdatasets_from_config
from vis_embed.sampling.cli import add_arguments
from vis_embed.sampling.naive import plan_naive_schedule
from vis_embed.sampling.schedule_io import schedule_table
from vis_embed.training.recipe import load_recipe

_REQUIRED = {"model": "m", "data": "d.yaml", "schedule": "s.parquet", "output_dir": "out",
             "max_steps": 3, "global_batch_size": 8}


def test_cli_defaults_are_the_settings_defaults() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--data", "d.yaml", "--out", "o.parquet", "--steps", "3",
                              "--global-batch-size", "16", "--interleave-batch-size", "8"])
    from_flags = ScheduleSettings(**{name: getattr(args, name) for name in ScheduleSettings.model_fields})
    assert from_flags == ScheduleSettings(steps=3, global_batch_size=16, interleave_batch_size=8)


def test_recipe_sampling_section_is_the_settings_declaration() -> None:
    recipe = load_recipe(raw={**_REQUIRED, "sampling": {"hard_negatives": 2, "size_exponent": 0.5}})
    assert isinstance(recipe.sampling, SamplingOptions)
    settings = recipe.sampling.schedule_settings(steps=recipe.max_steps, global_batch_size=8, seed=1)
    # unset interleave_batch_size: one slot per batch; the rest as written or the shared default
    assert settings == ScheduleSettings(steps=3, global_batch_size=8, interleave_batch_size=8, seed=1,
                                        hard_negatives=2, size_exponent=0.5)
    assert load_recipe(raw=_REQUIRED).sampling == SamplingOptions()


@pytest.mark.parametrize("values, setting", [
    ({"steps": 0}, "steps"),
    ({"hard_negatives": -1}, "hard_negatives"),
    ({"hard_negatives": 4}, "hard_negatives"),  # k + 1 > M
    ({"interleave_batch_size": 3}, "interleave_batch_size"),  # 8 is not a multiple of 3
    ({"small_datasets": "ignore"}, "small_datasets"),
])
def test_invalid_settings_name_the_setting_not_a_flag(values: dict, setting: str) -> None:
    with pytest.raises(ConfigError) as error:
        ScheduleSettings(**{"steps": 2, "global_batch_size": 8, "interleave_batch_size": 4, "hard_negatives": 0,
                            **values})
    assert setting in str(error.value) and "--" not in str(error.value)


def test_recipe_error_names_the_dotted_key() -> None:
    with pytest.raises(ConfigError, match=r"field 'sampling\.hard_negatives'") as error:
        load_recipe(raw={**_REQUIRED, "sampling": {"hard_negatives": -1}})
    assert "--" not in str(error.value)


@pytest.mark.parametrize("flags, named", [
    (["--interleave-batch-size", "3"], "--global-batch-size"),  # the combination check names B
    (["--interleave-batch-size", "0"], "--interleave-batch-size"),
    (["--interleave-batch-size", "4", "--size-exponent", "-1"], "--size-exponent"),
])
def test_cli_error_gives_the_flag_of_the_setting(flags, named, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["schedule", "--data", str(tmp_path / "none.yaml"), "--steps", "2", "--global-batch-size", "8",
                 *flags, "--out", str(tmp_path / "s.parquet"), "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"field '{named}'" in err and err.count("error:") == 1


def _config(root: Path) -> Path:
    """Shared namespace across kinds, identities first seen in non-sorted order, unlabelled pairs."""
    rng = np.random.default_rng(0)
    names = [f"z{int(x)}" if x % 2 else f"a{int(x)}" for x in rng.permutation(40)]
    rec_identity = [names[int(x)] for x in rng.permutation(np.arange(120) % 30)]  # 4 instances each
    rec = [{"id": f"r{i}", "image": "img.png", "identity": rec_identity[i],
            "hard_negatives": sorted({f"r{int(j)}" for j in rng.integers(0, 120, 3)
                                      if rec_identity[int(j)] != rec_identity[i]})} for i in range(120)]
    grd = [{"id": f"g{i}", "image": "img.png", "identity": names[(7 * i) % 40]} for i in range(80)]
    pairs = [{"id": f"q{i}", "query": {"text": f"q{i}"}, "positive": {"text": f"p{i}"},
              **({"identity": names[i % 40]} if i % 3 else {})} for i in range(60)]
    (root / "img.png").write_bytes(b"")
    for name, rows in (("rec", rec), ("grd", grd), ("pairs", pairs)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "train.yaml").write_text(
        "datasets:\n"
        "  - {name: rec, kind: identity, path: rec.jsonl, identity_namespace: objects}\n"
        "  - {name: grd, kind: identity, path: grd.jsonl, identity_namespace: objects}\n"
        "  - {name: pairs, kind: pairs, path: pairs.jsonl, identity_namespace: objects}\n")
    return root / "train.yaml"


@pytest.mark.parametrize("hard_negatives", [0, 3])
def test_identity_codes_schedule_like_the_same_labels(tmp_path: Path, hard_negatives: int) -> None:
    from vis_embed.data import load_train_config

    coded = subdatasets_from_config(load_train_config(_config(tmp_path)))
    assert all(ds.identities is None or ds.identities.dtype.kind == "i" for ds in coded)
    labelled = [SubDataset(ds.name, ds.kind, ds.ids, identities=None if ds.identities is None else
                           [str(ds.identity_names[c]) if c >= 0 else None for c in ds.identities],
                           hard_negatives=ds.hard_negatives, weight=ds.weight, namespace=ds.namespace)
                for ds in coded]
    settings = ScheduleSettings(steps=40, global_batch_size=12, interleave_batch_size=4,
                                hard_negatives=hard_negatives, seed=5)
    from_codes, from_labels = plan_schedule(coded, settings), plan_schedule(labelled, settings)
    for name in ("slot", "dataset", "query_row", "positive_row", "role"):
        assert np.array_equal(getattr(from_codes, name), getattr(from_labels, name)), name
    assert from_codes.report == from_labels.report


def test_identity_codes_and_labels_cannot_share_a_namespace() -> None:
    coded = SubDataset("a", "identity", ["a0", "a1"], identities=np.array([0, 0]), identity_names=["x"],
                       namespace="n")
    labelled = SubDataset("b", "identity", ["b0", "b1"], identities=["x", "x"], namespace="n")
    with pytest.raises(ConfigError, match="mix identity codes"):
        plan_schedule([coded, labelled], ScheduleSettings(steps=1, global_batch_size=1, interleave_batch_size=1,
                                                          hard_negatives=0))


@pytest.mark.parametrize("strategy", ["identity_aware", "naive"])
def test_more_datasets_than_an_int16_holds_keep_their_rows(strategy: str) -> None:
    """Dataset codes of 32,768 datasets and more (they were int16: d32768 became -32768 and read
    another dataset's rows, or was refused as having no usable identity)."""
    count = 32_770
    datasets = [SubDataset(f"d{i}", "identity", [f"d{i}_0", f"d{i}_1"], identities=[i, i],
                           weight=1e6 if i == count - 1 else 1.0) for i in range(count)]
    settings = ScheduleSettings(steps=2, global_batch_size=4, interleave_batch_size=1, hard_negatives=0,
                                strategy=strategy)
    planner = plan_naive_schedule if strategy == "naive" else plan_schedule
    schedule = planner(datasets, settings, show_progress=False)
    table = schedule_table(schedule)
    names, queries = table.column("dataset").to_pylist(), table.column("query_id").to_pylist()
    assert f"d{count - 1}" in names  # its weight gives it a slot of every batch
    assert all(query.split("_")[0] == name for name, query in zip(names, queries))


def test_a_negative_seed_is_refused_naming_the_setting() -> None:
    """numpy's generators take seeds >= 0: -1 was a ValueError traceback from the scheduler's rng."""
    with pytest.raises(ConfigError, match="seed"):
        ScheduleSettings(steps=1, global_batch_size=2, interleave_batch_size=2, hard_negatives=0, seed=-1)


@pytest.mark.parametrize("strategy", ["identity_aware", "naive"])
@pytest.mark.parametrize("weights, exponent", [((1e308, 1e308), 1.0), ((1.0, 1.0), 400.0)])
def test_shares_beyond_the_float_range_keep_their_proportions(strategy: str, weights: tuple[float, float],
                                                              exponent: float) -> None:
    """weight x rows^EXP past the largest float was inf/nan: a ValueError (nan slot expectations) or an
    OverflowError traceback; the shares are the same proportions computed in log space."""
    datasets = [SubDataset(f"d{d}", "identity", [f"d{d}_{i}" for i in range(rows)],
                           identities=[d * 1000 + i // 2 for i in range(rows)], weight=weights[d])
                for d, rows in enumerate((40, 20))]
    settings = ScheduleSettings(steps=400, global_batch_size=4, interleave_batch_size=2, hard_negatives=0,
                                size_exponent=exponent, strategy=strategy)
    schedule = (plan_naive_schedule if strategy == "naive" else plan_schedule)(datasets, settings, show_progress=False)
    share = np.bincount(schedule.dataset, minlength=2) / len(schedule.dataset)
    # exponent 1: 40 : 20 rows; exponent 400: (40/20)^400, all of it on d0
    assert share[0] == pytest.approx(2 / 3 if exponent == 1.0 else 1.0, abs=0.04)  # 400 steps: sd 0.012
