"""Two ranks (torchrun, gloo, DeepSpeed on CPU) train exactly like one process on the global batch.

One torchrun launch (2 ranks) trains the same three global batches under DDP + GradCache,
DeepSpeed ZeRO-2 + GradCache, ZeRO-3 + GradCache and ZeRO-2 without GradCache (a stand-in
encoder, exact and fast), then runs the real trainer on the tiny Qwen-VL with the shipped
ds_configs/zero2.json and zero3.json; every rank holds half of each batch.  The loss of each
step -- computed over the gathered global batch -- must equal the single-process loss of the
same global batch, and the trained weights and tau must match, which also proves gradients are
scaled right (not averaged away by the reducers) and that the optimiser steps exactly once per
global batch.  A second launch trains ``adaptation: full`` under ZeRO-2 and ZeRO-3 and checks
what the save gathers and writes (test_full_fine_tuning_saves_the_gathered_weights_and_resumes).
Further launches train the tiny Qwen-VL with a vision LoRA where one rank's chunks lack images
(test_a_rank_whose_chunks_have_no_image_trains_like_one_process).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]



def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def tiny_setup(tiny_checkpoint, tmp_path_factory: pytest.TempPathFactory) -> dict:
    from _training_fixtures import write_identity_dataset, write_schedule

    root = tmp_path_factory.mktemp("dist-data")
    data = write_identity_dataset(root, identities=12)
    schedule = write_schedule(data, root / "schedule.parquet", steps=3, batch=4)
    return {"model": str(tiny_checkpoint("qwen2-vl")), "data": str(data), "schedule": str(schedule),
            "out": str(root / "runs")}


def _two_ranks(out: Path, *args: str, timeout: int = 400) -> dict:
    """The worker under ``torchrun --nproc_per_node 2`` (gloo, DeepSpeed on CPU); rank 0's results.
    Past ``timeout`` seconds (ranks waiting in mismatched collectives) the launcher and its
    workers (one process group) are killed."""
    torchrun = Path(sys.executable).with_name("torchrun")
    command = [str(torchrun) if torchrun.exists() else shutil.which("torchrun") or "torchrun",
               "--nproc_per_node", "2", "--master_port", str(_free_port()),
               str(HERE / "_dist_training_worker.py"), str(out), *args]
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=HERE.parent, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            pytest.fail(f"two ranks still running after {timeout} s (a collective mismatch hangs):\n{stderr[-3000:]}")
    assert proc.returncode == 0, stdout[-3000:] + stderr[-5000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def two_rank_results(tiny_setup: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _two_ranks(tmp_path_factory.mktemp("dist") / "results.json",
                      tiny_setup["model"], tiny_setup["data"], tiny_setup["schedule"], tiny_setup["out"])


@pytest.fixture(scope="module")
def two_rank_full(tiny_setup: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _two_ranks(tmp_path_factory.mktemp("dist-full") / "results.json", "--full",
                      tiny_setup["model"], tiny_setup["data"], tiny_setup["schedule"], tiny_setup["out"])


@pytest.mark.parametrize("stage", [2, 3])
def test_full_fine_tuning_saves_the_gathered_weights_and_resumes(two_rank_full: dict, stage: int) -> None:
    """``adaptation: full`` on two ranks: final/ loaded into a fresh model holds exactly the
    trained weights (gathered to rank 0 one module at a time, in the model's dtype), not the
    base's nor a rank's empty ZeRO-3 partitions; resume loads the DeepSpeed module state
    strictly and re-runs the last step to the same weights."""
    result = two_rank_full[f"full_zero{stage}"]
    if stage == 3:  # the weights really were partitioned (threshold 0), or the check proves little
        assert result["partitioned"] == result["parameters"]
        # gathered one module at a time: no rank ever held the whole model at once
        assert 0 < result["largest_gather"] < result["total_elements"] / 4
    # only rank 0 keeps the gathered weights (the whole model), in the model's dtype
    assert result["entries_per_rank"][1] == 0 and result["entries_per_rank"][0] == result["parameters"]
    assert result["state_dtypes"] == ["torch.float32"]
    assert result["names_equal"]
    assert result["max_abs_diff"] == 0.0
    assert result["changed"] > 0.9 * result["parameters"]  # trained, not the base saved back
    assert result["dtypes"] == ["torch.float32"]  # the model's dtype (fp32 here), not another
    assert result["resumed_at"] == 1
    assert result["resume_max_abs_diff"] == 0.0


@pytest.fixture(scope="module")
def two_rank_uneven(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _two_ranks(tmp_path_factory.mktemp("dist-uneven") / "results.json", "--uneven")


@pytest.fixture(scope="module")
def single_process() -> dict:
    import _dist_training_worker as worker

    return worker.train("torch", chunk_size=0)


@pytest.mark.parametrize("mode", ["ddp_gradcache", "zero2_gradcache", "zero3_gradcache", "zero2_plain"])
def test_two_ranks_equal_one_process(two_rank_results: dict, single_process: dict, mode: str) -> None:
    result = two_rank_results[mode]
    assert result["losses"] == pytest.approx(single_process["losses"], rel=1e-5)
    assert result["tau"] == pytest.approx(single_process["tau"], rel=1e-6)
    assert result["tau"] != pytest.approx(0.05, rel=1e-4)  # tau was learned, not left alone
    for name, reference in single_process["weights"].items():
        got, want = torch.tensor(result["weights"][name]), torch.tensor(reference)
        assert float((got - want).norm() / want.norm()) < 1e-4, name


@pytest.mark.parametrize("stage", [2, 3])
def test_ranks_whose_chunks_differ_in_number_train_like_one_process(two_rank_uneven: dict, stage: int) -> None:
    """GradCache closes chunks early by each rank's own lengths (``max_padding``); under DeepSpeed
    every forward and backward is a collective, so the ranks must agree on the number of chunks
    (they once ran 4 and 10: gloo aborted, NCCL would hang).  ZeRO-3 with every weight
    partitioned, so each forward really gathers."""
    import _dist_training_worker as worker

    results = two_rank_uneven[f"zero{stage}"]
    reference = worker.train("torch", chunk_size=0, uneven=True)
    assert results["losses"] == pytest.approx(reference["losses"], rel=1e-5)
    for name, want in reference["weights"].items():
        got, want = torch.tensor(results["weights"][name]), torch.tensor(want)
        assert float((got - want).norm() / want.norm()) < 1e-4, name


@pytest.fixture(scope="module")
def vision_reference(tiny_setup: dict) -> dict:
    import _dist_training_worker as worker

    return {adaptation: worker.train_vision_lora("torch", tiny_setup["model"], chunk_size=0, adaptation=adaptation)
            for adaptation in ("lora", "text-lora")}


@pytest.mark.parametrize(("stage", "adaptation"), [(2, "lora"), (3, "lora"), (3, "text-lora")])
def test_a_rank_whose_chunks_have_no_image_trains_like_one_process(
        tiny_setup: dict, vision_reference: dict, tmp_path: Path, stage: int, adaptation: str) -> None:
    """Rank 1's chunks: one with images, then only text; rank 0's: images in every one
    (_dist_training_worker.vision_members).  With the vision tower's blocks adapted
    (``adaptation.lora.vision: true``) a chunk without images once gave them no gradient, so the
    ranks' gradient reductions no longer matched (ZeRO-2/3: gloo aborted, NCCL would hang); under
    ZeRO-3 even a frozen tower ("text-lora") broke it, its weights gathered in each forward on
    the ranks with images only.  Such a chunk now runs the tower on a dummy, for nothing
    (tests/test_vision_dummy.py): the losses and weights are those of one process.  Weights to
    1e-3: Adam's first steps move each weight by about lr whatever its gradient's size, so a
    gradient element near 0 whose rounding differs (the ranks sum in another order) moves it by
    up to 2 lr."""
    result = _two_ranks(tmp_path / "results.json", "--text-only-rank", tiny_setup["model"], adaptation,
                        f"zero{stage}", timeout=120)
    reference = vision_reference[adaptation]
    assert result["losses"] == pytest.approx(reference["losses"], rel=1e-5)
    assert set(result["weights"]) == set(reference["weights"])
    if adaptation == "lora":  # the tower's adapter trained (its B matrices start at 0)
        assert any(".visual." in name and "lora_B" in name and any(reference["weights"][name])
                   for name in reference["weights"])
    for name, want in reference["weights"].items():
        got, want = torch.tensor(result["weights"][name]), torch.tensor(want)
        assert float((got - want).norm() / want.norm()) < 1e-3, name


@pytest.fixture(scope="module")
def single_trainer_run(tiny_setup: dict, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[float], dict]:
    from _training_fixtures import tiny_recipe
    from safetensors.torch import load_file

    from vis_embed.training.recipe import load_recipe
    from vis_embed.training.trainer import Trainer

    out = tmp_path_factory.mktemp("single")
    raw = tiny_recipe(tiny_setup["model"], tiny_setup["data"], tiny_setup["schedule"], out, max_steps=3,
                      gradcache__chunk_size=1)
    final = Trainer(load_recipe(raw=raw)).train()
    losses = [json.loads(line)["loss"] for line in (out / "train_log.jsonl").read_text().splitlines()]
    return losses, load_file(str(final / "adapter_model.safetensors"))


@pytest.mark.parametrize("stage", [0, 2, 3])  # 0: DDP
def test_trainer_on_two_ranks_equals_one_process(two_rank_results: dict, tiny_setup: dict,
                                                 single_trainer_run: tuple[list[float], dict], stage: int) -> None:
    """The real trainer + tiny Qwen-VL + shipped ds_configs: same losses and adapter as one process."""
    from safetensors.torch import load_file

    single_losses, reference = single_trainer_run
    result = two_rank_results[f"trainer_zero{stage}"]
    assert result["losses"] == pytest.approx(single_losses, rel=1e-5)
    distributed = load_file(str(Path(tiny_setup["out"]) / f"zero{stage}" / "final" / "adapter_model.safetensors"))
    assert set(distributed) == set(reference)
    for name, tensor in reference.items():
        assert torch.allclose(distributed[name], tensor, rtol=1e-4, atol=1e-6), name
    # resumed from checkpoint-2 (optimiser state / ZeRO partitions, RNG, tau), the re-run last
    # step gives the same adapter
    assert result["resumed_at"] == 2
    assert result["resume_max_abs_diff"] == 0.0


def test_compiled_blocks_train_under_zero2_like_one_eager_process(two_rank_results: dict, tiny_setup: dict,
                                                                  single_trainer_run: tuple[list[float], dict]) -> None:
    """``model_options.compile`` (null: on for CUDA) with the shipped ZeRO-2 config, the 2B recipe's:
    the compiled blocks' forward and backward under DeepSpeed's gradient hooks give one eager
    process's losses and adapter (Inductor's kernels round differently: float32 tolerances), and
    the resumed run re-runs the last step exactly."""
    from safetensors.torch import load_file

    single_losses, reference = single_trainer_run
    result = two_rank_results["trainer_zero2_compiled"]
    assert result["compiled_graphs"] > two_rank_results["trainer_zero3"]["compiled_graphs"]  # it did compile
    assert result["losses"] == pytest.approx(single_losses, rel=1e-4)
    compiled = load_file(str(Path(tiny_setup["out"]) / "zero2_compiled" / "final" / "adapter_model.safetensors"))
    assert set(compiled) == set(reference)
    for name, tensor in reference.items():
        assert torch.allclose(compiled[name], tensor, rtol=1e-3, atol=1e-5), name
    assert result["resumed_at"] == 2
    assert result["resume_max_abs_diff"] == 0.0


def test_a_rank_that_skipped_the_gather_would_be_detected(two_rank_results: dict, single_process: dict) -> None:
    # Negative control: the loss of half the batch (what a rank sees without gathering)
    # differs from the global loss, so the equality above is a real check.
    import _dist_training_worker as worker
    from vis_embed.training.losses import info_nce_loss

    torch.manual_seed(0)
    model = worker.StandInEncoder(dropout=0.0)
    queries, candidates = worker.global_batches()[0]
    with torch.no_grad():
        q = model(**model.collate(queries[:4]))
        c = model(**model.collate(candidates[:4]))
    assert info_nce_loss(q, c, 0.05).item() != pytest.approx(two_rank_results["zero2_gradcache"]["losses"][0], rel=1e-3)
