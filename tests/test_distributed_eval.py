"""``torchrun --nproc_per_node 2 -m vis_embed eval|encode`` (gloo, CPU) equals one process.

On the tiny random Qwen2-VL and the tiny synthetic benchmark:

* two ranks give the same results.json metrics as one process, and the same cached vectors
  (cos >= 0.99999), each rank encoding a share; with one cache folder per rank (one disk
  per node) rank 0 receives the shards it cannot see and ends up holding all of them;
* rank 1 killed (SIGKILL) right after its first shard: the run fails, the finished shards
  stay, and the rerun encodes exactly the items of the unfinished shards (counted by every
  rank's summary line) and gives the same metrics;
* two-rank ``encode`` writes the same vectors, ids and rejects files as one process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vis_embed.cli import main

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]
SUMMARY = re.compile(r"rank (\d+) of 2: encoded (\d+) items in (\d+) shards; reused (\d+) finished shards")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun(arguments: list[str], **env: str) -> tuple[int, str, dict[int, tuple[int, int, int]]]:
    """Run two ranks; ``(exit code, stderr, {rank: (items encoded, shards encoded, shards reused)})``."""
    launcher = Path(sys.executable).with_name("torchrun")
    command = [str(launcher) if launcher.exists() else shutil.which("torchrun") or "torchrun",
               "--nproc_per_node", "2", "--master_port", str(_free_port()), *arguments]
    environment = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
                   "PYTHONPATH": str(HERE.parent), **env}
    proc = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=180, cwd=HERE.parent)
    stats = {int(m[1]): (int(m[2]), int(m[3]), int(m[4])) for m in SUMMARY.finditer(proc.stderr)}
    return proc.returncode, proc.stdout + proc.stderr, stats


@pytest.fixture(scope="module")
def setup(tiny_checkpoint, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from vis_embed.prep.synth import generate

    root = tmp_path_factory.mktemp("dist-eval")
    synth = Path(generate(root / "synth", seed=0, size="tiny", workers=1, show_progress=False))
    return {"root": root, "model": tiny_checkpoint("qwen2-vl"), "benchmark": synth / "benchmark.yaml"}


def eval_arguments(setup: dict[str, Path], out: Path) -> list[str]:
    return ["eval", "--model", str(setup["model"]), "--benchmark", str(setup["benchmark"]), "--out", str(out),
            "--device", "cpu", "--batch-size", "4", "--quiet", "--no-pictures"]


@pytest.fixture(scope="module")
def single_process(setup: dict[str, Path]) -> dict:
    out = setup["root"] / "single"
    assert main(eval_arguments(setup, out)) == 0
    return json.loads((out / "results.json").read_text())


def metrics(results: dict) -> dict:
    return {"groups": results["groups"], "datasets": {name: dataset["metrics"]
                                                      for name, dataset in results["datasets"].items()}}


def cached_vectors(cache: Path) -> dict[str, np.ndarray]:
    return {key.name: np.concatenate([np.load(shard) for shard in sorted(key.glob("shard-*.npy"))])
            for key in cache.iterdir()}


def test_two_ranks_give_the_metrics_and_vectors_of_one_process(setup: dict[str, Path], single_process: dict) -> None:
    out = setup["root"] / "two-ranks"
    code, log, stats = torchrun([str(HERE / "_dist_eval_worker.py"), *eval_arguments(setup, out),
                                 "--cache-dir", str(out / "cache-{rank}")])
    assert code == 0, log[-4000:]
    assert metrics(json.loads((out / "results.json").read_text())) == metrics(single_process)
    assert stats[0][0] > 0 and stats[1][0] > 0  # both ranks encoded a share
    reference = cached_vectors(setup["root"] / "single" / "cache")
    on_rank0, on_rank1 = cached_vectors(out / "cache-0"), cached_vectors(out / "cache-1")
    assert set(on_rank0) == set(reference)  # rank 0 received the shards only rank 1's disk had
    assert sum(len(v) for v in on_rank1.values()) == stats[1][0] < sum(len(v) for v in reference.values())
    for key, vectors in reference.items():
        assert vectors.shape == on_rank0[key].shape
        assert np.min(np.sum(vectors * on_rank0[key], axis=1)) >= 0.99999, key


def test_a_killed_rank_loses_only_its_unfinished_shard(setup: dict[str, Path], single_process: dict) -> None:
    out = setup["root"] / "killed"
    code, log, _stats = torchrun([str(HERE / "_dist_eval_worker.py"), *eval_arguments(setup, out)], KILL_RANK="1")
    assert code != 0, log[-2000:]
    assert not (out / "results.json").exists()
    finished = [np.load(shard).shape[0] for shard in (out / "cache").glob("*/shard-*.npy")]
    assert finished  # at least rank 1's first shard survived the crash

    code, log, stats = torchrun(["-m", "vis_embed", *eval_arguments(setup, out)])
    assert code == 0, log[-4000:]
    assert metrics(json.loads((out / "results.json").read_text())) == metrics(single_process)
    every_item = sum(vectors.shape[0] for vectors in cached_vectors(out / "cache").values())
    assert stats[0][2] == stats[1][2] == len(finished)  # every finished shard reused ...
    assert stats[0][0] + stats[1][0] == every_item - sum(finished)  # ... and nothing finished re-encoded


def test_two_rank_encode_writes_what_one_process_writes(setup: dict[str, Path]) -> None:
    images = setup["benchmark"].parent / "eval" / "images"
    rows = [{"id": f"r{n}", "image": str(path.relative_to(setup["root"]))} | ({"text": f"item {n}"} if n % 3 else {})
            for n, path in enumerate(sorted(images.rglob("*.png"))[:14])]
    rows[5] = {"id": "missing", "image": "no/such.png"}  # a reject, found by whichever rank encodes it
    items = setup["root"] / "items.jsonl"
    items.write_text("".join(json.dumps(row) + "\n" for row in rows))
    arguments = ["--model", str(setup["model"]), "--input", str(items), "--on-error", "skip", "--no-progress",
                 "--instruction", "Represent it.", "--batch-size", "3"]
    one, two = setup["root"] / "one", setup["root"] / "two"
    assert main(["encode", *arguments, "--output", str(one / "emb.npy")]) == 0
    code, log, stats = torchrun(["-m", "vis_embed", "encode", *arguments, "--output", str(two / "emb.npy")])
    assert code == 0, log[-4000:]
    assert stats[0][0] + stats[1][0] == len(rows) and stats[1][0] > 0
    expected, got = np.load(one / "emb.npy"), np.load(two / "emb.npy")
    assert got.shape == expected.shape == (len(rows) - 1, expected.shape[1])
    assert np.min(np.sum(expected * got, axis=1)) >= 0.99999
    for sidecar in ("emb.ids.json", "emb.rejects.jsonl"):
        assert (two / sidecar).read_text() == (one / sidecar).read_text(), sidecar
    assert sorted(path.name for path in two.iterdir()) == ["emb.ids.json", "emb.npy", "emb.rejects.jsonl"]
