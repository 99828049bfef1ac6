"""Model helpers shared by test modules (not a test module itself)."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from vis_embed.model.network.embedding_model import EmbeddingModel


def perturbed_adapter(base: Path, out: Path, seed: int = 0) -> Path:
    """A LoRA adapter (r 4, alpha 8, decoder and vision tower) on ``base`` whose B matrices are
    drawn at random, like a trained one: a fresh LoRA has B = 0 and changes no vector.  Saved
    to ``out``, which is returned."""
    model = EmbeddingModel.from_pretrained(base, device="cpu", dtype="float32")
    model.add_lora(r=4, alpha=8, dropout=0.0, vision=True)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.backbone.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    model.save_pretrained(out)
    return out


def as_hub_cache(directory: Path, cache: Path, repo: str) -> Path:
    """``directory`` as huggingface_hub's cache holds a downloaded model repo ``repo`` (refs/main
    -> a snapshot), so that ``HF_HUB_CACHE=cache HF_HUB_OFFLINE=1`` loads ``repo`` from it.
    Returns the snapshot folder."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo_dir = cache / f"models--{repo.replace('/', '--')}"
    shutil.copytree(directory, repo_dir / "snapshots" / commit)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(commit)
    return repo_dir / "snapshots" / commit
