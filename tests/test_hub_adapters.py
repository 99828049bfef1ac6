"""A LoRA adapter published on the Hub loads, merges and exports by its id, as its local folder
does (read from a Hub-cache copy, offline: the same path a download takes once cached)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vis_embed.errors import ConfigError
from vis_embed.model.references import local_model_dir
from vis_embed.model.runtime.embedder import Embedder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _model_fixtures import as_hub_cache, perturbed_adapter  # noqa: E402

ITEMS = [{"text": "a red square"}, {"text": "a blue circle"}]
REPO = "acme/visme-lora"

_LOAD_AND_MERGE = """
import json, sys
from vis_embed.model.runtime.embedder import Embedder
from vis_embed.training.merge import merge_adapter
base, repo, merged = sys.argv[1:4]
model = Embedder.from_pretrained(base, adapter=repo, device="cpu", dtype="float32")
vectors = model.encode([{"text": "a red square"}, {"text": "a blue circle"}], instruction="Find it.")
merge_adapter(repo, merged, dtype="float32")
print(json.dumps({"vectors": vectors.tolist(), "adapter": model.model.adapter}))
"""


def test_a_hub_adapter_loads_and_merges_by_its_id(tiny_checkpoint, tmp_path) -> None:
    base = tiny_checkpoint("qwen2-vl")
    adapter = perturbed_adapter(base, tmp_path / "lora")
    snapshot = as_hub_cache(adapter, tmp_path / "hub", REPO)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", _LOAD_AND_MERGE, str(base), REPO, str(tmp_path / "merged")],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    from_hub = json.loads(done.stdout.strip().splitlines()[-1])
    local = Embedder.from_pretrained(base, adapter=adapter, device="cpu", dtype="float32")
    expected = local.encode(ITEMS, instruction="Find it.")
    assert np.allclose(from_hub["vectors"], expected, atol=1e-5)
    assert from_hub["adapter"] == str(snapshot)  # the snapshot's content is what results fingerprint
    merged = Embedder.from_pretrained(tmp_path / "merged", device="cpu", dtype="float32")
    assert np.allclose(merged.encode(ITEMS, instruction="Find it."), expected, atol=1e-4)
    base_vectors = Embedder.from_pretrained(base, device="cpu", dtype="float32").encode(ITEMS, instruction="Find it.")
    assert (base_vectors * expected).sum(-1).min() < 0.9999  # the adapter changes the vectors: its absence shows


def test_a_hub_id_that_cannot_be_fetched_is_a_clear_error(tmp_path, monkeypatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="cannot fetch 'acme/not-cached' from the Hub"):
        local_model_dir("acme/not-cached")
    assert local_model_dir(tmp_path) == tmp_path  # a path is a path


def test_a_hub_adapter_exports_by_its_id(tiny_checkpoint, tmp_path) -> None:
    """``vis-embed export --adapter OWNER/NAME`` reads the snapshot, as merge does (was: a
    ConfigError, the adapter's files looked for in a local folder named OWNER/NAME)."""
    base = tiny_checkpoint("qwen2-vl")
    adapter = perturbed_adapter(base, tmp_path / "lora")
    as_hub_cache(adapter, tmp_path / "hub", REPO)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "vis_embed", "export", "--adapter", REPO, "--out",
                           str(tmp_path / "st"), "--query-instruction", "Find it.", "--document-instruction", "",
                           "--dtype", "float32"], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = Embedder.from_pretrained(base, adapter=adapter, device="cpu", dtype="float32").encode(
        ITEMS, instruction="Find it.")
    exported = Embedder.from_pretrained(tmp_path / "st", device="cpu", dtype="float32")
    assert np.allclose(exported.encode(ITEMS, instruction="Find it."), expected, atol=1e-4)
    assert "# Merged model for" in (tmp_path / "st" / "README.md").read_text()
