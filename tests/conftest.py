"""Shared fixtures.  Tiny checkpoints are built once per test session and reused."""

from __future__ import annotations

import os

# Before torch is imported by any test module: idle OpenMP threads sleep instead of spinning
# (on a busy 2-core machine spinning threads make tiny-model steps many times slower).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``tiny_checkpoint(arch="qwen2-vl", seed=0) -> Path`` of a saved tiny random checkpoint."""
    built: dict[tuple[str, int], Path] = {}

    def get(arch: str = "qwen2-vl", seed: int = 0) -> Path:
        key = (arch, seed)
        if key not in built:
            from vis_embed.model.files.tiny import build_tiny_checkpoint

            out_dir = tmp_path_factory.mktemp(f"tiny-{arch}-{seed}")
            built[key] = Path(build_tiny_checkpoint(out_dir, arch=arch, seed=seed))
        return built[key]

    return get


# Where the project's ``../shared`` lives; tests may point it elsewhere (e.g. to a missing
# folder, to check that a fresh clone skips the reference-parity tests instead of failing).
SHARED_DIR_ENV = "VIS_EMBED_TEST_SHARED_DIR"


@pytest.fixture(scope="session")
def shared_reference() -> Path:
    """``../shared/reference`` beside the repository (published tables and peer score files).

    A user's clone has no ``../shared``: the tests that compare against it are skipped with the
    reason (CI has it and runs them).
    """
    shared = os.environ.get(SHARED_DIR_ENV) or Path(__file__).resolve().parents[1].parent / "shared"
    path = Path(shared) / "reference"
    if not path.is_dir():
        pytest.skip(f"reference-parity test: needs the project's shared reference data at {path} "
                    f"(absent in a fresh clone; set {SHARED_DIR_ENV} to its folder)")
    return path


@pytest.fixture(scope="module")
def one_torch_thread():
    """Pin torch to one intra-op thread for a module (``pytestmark = usefixtures(...)``).

    On a 2-core box shared with other jobs, OpenMP threads spin against each other and make
    tiny-model steps many times slower; one thread is also bit-for-bit deterministic, which
    the exact-equality training tests rely on.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def embedder(tiny_checkpoint):
    """The tiny checkpoint's Embedder in float32 on the CPU, once per module (the server tests
    share it; a module that needs another embedder defines its own ``embedder``)."""
    from vis_embed.model.runtime.embedder import Embedder

    return Embedder.from_pretrained(tiny_checkpoint(), device="cpu", dtype="float32")
