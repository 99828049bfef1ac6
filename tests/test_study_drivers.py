"""The study drivers (eval/ablation_sampling.sh, ablation_warm.sh, ablation_plateau.sh,
objectives_comparison.sh and their shared eval/_study.sh), run end to end with no training:
VIS and PY point at a fake that logs its arguments and writes the files the drivers look for.

What is specified: the arm -> --set rule of each driver, the skip of finished runs, --resume on
every training, exit 2 for a bad MODE / name, exit 1 when a run fails (and the rerun
trains only that one), the benchmark re-rendered only when not current, the COMMAND recorded in
the result files (the committed files' provenance quotes it), and `bash -n` on every eval/*.sh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The fake vis-embed and python: one line of JSON per call into $FAKE_LOG, then what the driver
# reads back.  FAKE_FAIL_TRAIN=TEXT fails the trainings whose arguments contain TEXT;
# FAKE_OVER_BUDGET=1 makes the warm study's plan report a plan over budget.
FAKE = r'''
import json, os, sys
from pathlib import Path

args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
opt = lambda name: args[args.index(name) + 1] if name in args else None


def write(path, text="{}"):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)


tool, sub = args[0], (args[1:] or [""])[0]
if tool == "-c":  # is_current(OUT/synth)
    sys.exit(0 if Path(args[-1], "fake-current").exists() else 1)
elif tool == "synth":
    write(Path(args[1], "fake-current"))
elif tool == "tiny-model":
    write(Path(args[1], "config.json"))
elif tool == "train":
    if os.environ.get("FAKE_FAIL_TRAIN", "\0") in " ".join(args):
        sys.exit("fake: training failed")
    sets = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--set")
    run, steps, every = Path(sets["output_dir"]), int(sets.get("max_steps", 10)), int(sets.get("checkpoint.every", 0))
    for step in range(every, steps, every) if every else ():
        write(run / f"checkpoint-{step}" / "adapter_config.json")
    write(sets["schedule"])
    for name in ("adapter_config.json", "trainer_state.json"):
        write(run / "final" / name)
elif tool == "eval":  # like the real one: a missing adapter fails
    if opt("--adapter") and not Path(opt("--adapter")).is_dir():
        sys.exit("fake: no adapter")
    write(Path(opt("--out"), "results.json"))
elif tool == "eval/study_results.py":
    eval_dir = Path(opt("--eval-dir") or Path(opt("--run-dir")).parent / "eval")
    if not (eval_dir / "results.json").is_file():
        sys.exit("fake: no evaluation")
    write(Path(opt("--out"), f"{opt('--arm')}_seed{opt('--seed')}.json"), json.dumps({"command": opt("--command")}))
elif tool == "eval/objectives_peers.py":
    write(Path(args[2], "benchmark.yaml"))
elif tool == "eval/ablation_warm_table.py" and sub == "plan":
    sys.exit(int(os.environ.get("FAKE_OVER_BUDGET", "0")))
elif tool == "eval/ablation_warm_table.py" and sub == "best-base":  # the latest evaluated base step
    print(max(int(p.name.split("step")[1].split("_")[0]) for p in Path(opt("--results"), "base").iterdir()))
elif tool == "eval/ablation_plateau_table.py" and sub == "plateau-step":
    print(7)
elif tool.endswith("_table.py"):
    write(opt("--out"), "table")
else:
    sys.exit(f"fake: unexpected call {args}")
'''

# Each driver on a tiny configuration: its settings, and the --set values it must give the
# training of each run (keyed by the run's directory under OUT) and the COMMAND it records.
DRIVERS = {
    "ablation_plateau.sh": (
        {"MODE": "full", "STEPS": "2", "SEEDS": "0"},
        {"naive_unmasked-0": {"sampling.strategy": "naive", "loss.identity_mask": "false", "max_steps": "2"},
         "identity-0": {"sampling.strategy": "identity_aware", "loss.identity_mask": "true", "max_steps": "2"}},
        'MODE=full SIZE=small-dense OUT={OUT} RESULTS={RESULTS} TABLE={TABLE} RECIPE=recipes/ablation_dense.yaml '
        'STEPS=2 SEEDS="0" JOBS=2 bash eval/ablation_plateau.sh'),
    "ablation_sampling.sh": (
        {"SEEDS": "0", "SEEDS_OTHER": "0", "HN": "3"},
        {"naive_unmasked-0": {"sampling.strategy": "naive", "loss.identity_mask": "false",
                              "sampling.hard_negatives": "0"},
         "naive_masked-0": {"sampling.strategy": "naive", "loss.identity_mask": "true", "sampling.hard_negatives": "0"},
         "identity-0": {"sampling.strategy": "identity_aware", "loss.identity_mask": "true",
                        "sampling.hard_negatives": "0"},
         "identity_hn-0": {"sampling.strategy": "identity_aware", "loss.identity_mask": "true",
                           "sampling.hard_negatives": "3"}},
        'SIZE=small OUT={OUT} RESULTS={RESULTS} TABLE={TABLE} RECIPE=recipes/ablation_sampling.yaml SEEDS="0" '
        'SEEDS_OTHER="0" VARIANTS="naive_unmasked naive_masked identity identity_hn" HN=3 JOBS=1 '
        'bash eval/ablation_sampling.sh'),
    "ablation_warm.sh": (
        {"MODE": "full", "BATCH": "8", "INTERLEAVE": "4", "BASE_STEPS": "4", "BASE_EVERY": "2", "STEPS": "2",
         "SEEDS_PAIR": "0", "SEEDS_OTHER": "0", "TAUS": "0.07"},
        {"base": {"sampling.strategy": "identity_aware", "max_steps": "4", "global_batch_size": "8",
                  "sampling.interleave_batch_size": "4"},
         "naive_unmasked-tau0.07-0": {"sampling.strategy": "naive", "loss.identity_mask": "false",
                                      "temperature.init": "0.07", "init_adapter": "{OUT}/base/run/final"},
         "naive_masked-tau0.07-0": {"sampling.strategy": "naive", "loss.identity_mask": "true"},
         "identity-tau0.07-0": {"sampling.strategy": "identity_aware", "loss.identity_mask": "true"}},
        'MODE=full SIZE=small-dense OUT={OUT} RESULTS={RESULTS} TABLE={TABLE} BASE_STEPS=4 BASE_EVERY=2 STEPS=2 '
        'PILOT_STEPS=100 SEEDS_PAIR="0" SEEDS_OTHER="0" TAUS="0.07" LEARN_002=true JOBS=1 BATCH=8 INTERLEAVE=4 '
        'bash eval/ablation_warm.sh'),
    "objectives_comparison.sh": (
        {"SEEDS": "0"},
        {"infonce_lora-0": {"loss.kind": "infonce", "adaptation.kind": "lora", "sampling.hard_negatives": "5"},
         "two_tier_lora-0": {"loss.kind": "two_tier", "adaptation.kind": "lora"},
         "hinge_lora-0": {"loss.kind": "triplet_hinge", "adaptation.kind": "lora"},
         "infonce_head-0": {"loss.kind": "infonce", "adaptation.kind": "head"}},
        'SIZE=small OUT={OUT} RESULTS={RESULTS} TABLE={TABLE} SEEDS="0" '
        'COMBOS="infonce_lora two_tier_lora hinge_lora infonce_head" HN=5 JOBS=2 bash eval/objectives_comparison.sh'),
}
# One training run per driver (its directory under OUT), for the resume and failure specifications.
A_RUN = {"ablation_plateau.sh": "identity-0", "ablation_sampling.sh": "identity-0",
         "ablation_warm.sh": "arms/identity-tau0.07-0", "objectives_comparison.sh": "infonce_lora-0"}


class Study:
    """One driver's folders under tmp_path, the fake, and the calls each run of it made."""

    def __init__(self, tmp_path: Path, driver: str) -> None:
        self.driver, self.tmp = driver, tmp_path
        self.out, self.results, self.table = tmp_path / "out", tmp_path / "results", tmp_path / "t.md"
        self.log = tmp_path / "calls.jsonl"
        self.fake = tmp_path / "fake"
        self.fake.write_text(f"#!{sys.executable} -S\n{FAKE}", encoding="utf-8")
        self.fake.chmod(0o755)

    def run(self, **settings: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
        """The driver's exit and output, and the fake calls of this run only (from any cwd)."""
        self.log.write_text("", encoding="utf-8")
        env = {"PATH": os.environ["PATH"], "HOME": str(self.tmp), "VIS": str(self.fake), "PY": str(self.fake),
               "FAKE_LOG": str(self.log), "OUT": str(self.out), "RESULTS": str(self.results),
               "TABLE": str(self.table), **DRIVERS[self.driver][0], **settings}
        done = subprocess.run(["bash", str(ROOT / "eval" / self.driver)], cwd=self.tmp, env=env,
                              capture_output=True, text=True, timeout=60)
        return done, [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines()]

    def trainings(self, calls: list[list[str]]) -> dict[str, list[str]]:
        """The train calls by run directory under OUT (``identity-0``, ``arms/identity-tau0.07-0``)."""
        return {str(Path(_sets(call)["output_dir"]).parent.relative_to(self.out)): call
                for call in calls if call[0] == "train"}


def _sets(call: list[str]) -> dict[str, str]:
    return dict(call[i + 1].split("=", 1) for i, arg in enumerate(call) if arg == "--set")


def _tools(calls: list[list[str]]) -> list[str]:
    return [call[0] for call in calls]


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_driver_trains_each_arm_as_its_rule_says_then_skips_it_when_finished(tmp_path: Path, driver: str) -> None:
    study = Study(tmp_path, driver)
    done, calls = study.run()
    assert done.returncode == 0, done.stderr
    folders = {"OUT": str(study.out), "RESULTS": str(study.results), "TABLE": str(study.table)}
    trained = {Path(run).name: _sets(call) for run, call in study.trainings(calls).items()}
    for run, expected in DRIVERS[driver][1].items():
        assert {key: trained[run].get(key) for key in expected} == \
            {key: value.format(**folders) for key, value in expected.items()}, run
    command = DRIVERS[driver][2].format(**folders)
    recorded = {json.loads(path.read_text())["command"] for path in study.results.rglob("*.json")}
    assert recorded == {command}  # the committed result files' provenance quotes it: its text is fixed
    assert study.table.read_text() == "table" and {"synth", "tiny-model"} <= set(_tools(calls))

    again, calls = study.run()
    assert again.returncode == 0, again.stderr
    assert not {"train", "eval", "synth", "tiny-model"} & set(_tools(calls)), calls


@pytest.mark.parametrize("driver", DRIVERS)
def test_every_training_continues_what_its_directory_holds(tmp_path: Path, driver: str) -> None:
    """Every train call carries --resume: it continues a checkpoint, restarts a run killed before
    its first checkpoint (without it, train refuses a directory holding recipe.yaml) and starts a
    new one; the warm study's timing probe alone starts over (--overwrite)."""
    study = Study(tmp_path, driver)
    (study.out / A_RUN[driver] / "run" / "checkpoint-1").mkdir(parents=True)
    done, calls = study.run()
    assert done.returncode == 0, done.stderr
    trainings = study.trainings(calls)
    assert A_RUN[driver] in trainings
    assert {run for run, call in trainings.items() if "--resume" not in call} <= {"probe"}


@pytest.mark.parametrize("driver, setting, message", [
    ("ablation_plateau.sh", {"MODE": "bogus"}, "MODE must be pilot or full, got 'bogus'"),
    ("ablation_warm.sh", {"MODE": "bogus"}, "MODE must be pilot or full, got 'bogus'"),
    ("ablation_sampling.sh", {"VARIANTS": "identity bogus"}, "unknown variant 'bogus'"),
    ("objectives_comparison.sh", {"COMBOS": "infonce_lora bogus"}, "unknown combination 'bogus'"),
])
def test_a_bad_mode_or_name_stops_before_any_work(tmp_path: Path, driver: str, setting: dict, message: str) -> None:
    done, calls = Study(tmp_path, driver).run(**setting)
    assert done.returncode == 2 and message in done.stderr
    assert calls == []


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_failed_run_fails_the_driver_and_the_rerun_trains_only_it(tmp_path: Path, driver: str) -> None:
    study = Study(tmp_path, driver)
    done, failing = study.run(FAKE_FAIL_TRAIN=f"{A_RUN[driver]}/run")
    assert done.returncode == 1 and "some runs failed; rerun the script to resume them" in done.stderr
    assert not study.table.exists()
    # the failed training's later steps did not run (`set -e` does not hold left of `||`)
    evaluated = [call for call in failing if call[0] == "eval"]
    assert not any(f"{A_RUN[driver]}/run" in " ".join(call) for call in evaluated), evaluated
    done, calls = study.run()
    assert done.returncode == 0, done.stderr
    assert list(study.trainings(calls)) == [A_RUN[driver]]


def test_the_benchmark_is_rendered_again_only_when_not_current(tmp_path: Path) -> None:
    study = Study(tmp_path, "ablation_plateau.sh")
    assert _tools(study.run()[1]).count("synth") == 1
    assert "synth" not in _tools(study.run()[1])
    (study.out / "synth" / "fake-current").unlink()  # e.g. an older benchmark version
    done, calls = study.run()
    assert done.returncode == 0 and _tools(calls).count("synth") == 1 and "tiny-model" not in _tools(calls)


def test_the_plateau_pilot_evaluates_every_checkpoint_and_sets_the_full_runs_steps(tmp_path: Path) -> None:
    study = Study(tmp_path, "ablation_plateau.sh")
    done, _ = study.run(MODE="pilot", PILOT_STEPS="3", PILOT_EVERY="1", STEPS="")
    assert done.returncode == 0, done.stderr
    assert sorted(path.name for path in (study.results / "pilot").iterdir()) == [
        f"pilot-{arm}-step{step}_seed100.json" for arm in ("identity", "naive_unmasked") for step in (1, 2, 3)]
    done, calls = study.run(STEPS="")
    assert done.returncode == 0 and "== the arms train 7 steps" in done.stdout
    assert {_sets(call)["max_steps"] for call in study.trainings(calls).values()} == {"7"}


def test_the_warm_study_stops_over_budget_unless_forced(tmp_path: Path) -> None:
    study = Study(tmp_path, "ablation_warm.sh")
    done, calls = study.run(FAKE_OVER_BUDGET="1")
    assert done.returncode == 3 and "over budget" in done.stderr
    assert list(study.trainings(calls)) == ["probe"]
    done, _ = study.run(FAKE_OVER_BUDGET="1", FORCE="1")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("script", sorted(path.name for path in (ROOT / "eval").glob("*.sh")))
def test_every_driver_parses(script: str) -> None:
    done = subprocess.run(["bash", "-n", str(ROOT / "eval" / script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
