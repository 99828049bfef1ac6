"""``adaptation: head``: a frozen backbone and a trained projection head, saved like an adapter
(head_config.json + head.safetensors) and applied by Embedder, ``vis-embed eval``, resume and
the sentence-transformers export."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from vis_embed.cli import main as cli_main
from vis_embed.errors import ConfigError
from vis_embed.model.runtime.embedder import Embedder
from vis_embed.model.network.embedding_model import EmbeddingModel
from vis_embed.model.network.projection_head import HEAD_CONFIG, HEAD_WEIGHTS, ProjectionHead, load_head, save_head
from vis_embed.training.recipe import load_recipe
from vis_embed.training.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _model_fixtures import as_hub_cache  # noqa: E402
from _training_fixtures import tiny_recipe, write_identity_dataset, write_schedule  # noqa: E402
from eval_fakes import make_identity_benchmark  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ITEMS = [{"text": "a red square"}, {"text": "a blue circle"}]


def test_a_fresh_head_is_the_identity() -> None:
    vectors = torch.randn(3, 8)
    assert torch.equal(ProjectionHead(8)(vectors), vectors)
    assert torch.equal(ProjectionHead(8, 5)(vectors), vectors[:, :5])  # truncated identity


def test_head_round_trips_and_bad_directories_name_file_and_field(tmp_path: Path) -> None:
    head = ProjectionHead(6, 4)
    with torch.no_grad():
        head.linear.weight.add_(torch.randn(4, 6))
    save_head(tmp_path / "h", head, "base-model")
    loaded = load_head(tmp_path / "h")
    assert all(torch.equal(a, b) for a, b in zip(head.state_dict().values(), loaded.state_dict().values()))
    config_path = tmp_path / "h" / HEAD_CONFIG
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "out_dim": "four"}))
    with pytest.raises(ConfigError, match=rf"{HEAD_CONFIG}: field 'out_dim'"):
        load_head(tmp_path / "h")
    config_path.write_text(json.dumps({**config, "out_dim": 5}))
    with pytest.raises(ConfigError, match=rf"{HEAD_WEIGHTS}: does not match {HEAD_CONFIG}"):
        load_head(tmp_path / "h")
    config_path.write_text(json.dumps({**config, "adapter_type": "lora"}))
    with pytest.raises(ConfigError, match="field 'adapter_type'"):
        load_head(tmp_path / "h")


def test_add_projection_head_freezes_the_backbone_and_keeps_the_vectors(tiny_checkpoint) -> None:
    model = EmbeddingModel.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu", dtype="float32")
    with torch.no_grad():
        before = model.embed(ITEMS)
    model.add_projection_head()
    trainable = [name for name, parameter in model.named_parameters() if parameter.requires_grad]
    assert trainable == ["head.linear.weight", "head.linear.bias"]
    embeddings = model.embed(ITEMS)
    assert torch.allclose(embeddings, before, atol=1e-6)
    embeddings.sum().backward()  # the graph reaches the head only
    assert model.head.linear.weight.grad is not None
    with pytest.raises(ConfigError, match="already has an adapter"):
        model.add_projection_head()


@pytest.fixture(scope="module")
def trained(tiny_checkpoint, tmp_path_factory) -> tuple[Path, Path]:
    """(base, OUT of a 2-step head run with checkpoint-1)."""
    base = tiny_checkpoint("qwen2-vl")
    root = tmp_path_factory.mktemp("head")
    data = write_identity_dataset(root / "data", identities=8)
    schedule = write_schedule(data, root / "schedule.parquet", steps=2, batch=4)
    raw = tiny_recipe(base, data, schedule, root / "run", max_steps=2, adaptation="head", optimizer__lr=5e-2,
                      optimizer__decay="constant", checkpoint__every=1)
    Trainer(load_recipe(raw=raw)).train()
    return base, root / "run"


def test_head_run_saves_only_the_head_and_changes_the_vectors(trained) -> None:
    base, run = trained
    final = run / "final"
    assert (final / HEAD_CONFIG).is_file() and not (final / "adapter_config.json").exists()
    assert set(load_file(str(final / HEAD_WEIGHTS))) == {"linear.weight", "linear.bias"}
    config = json.loads((final / HEAD_CONFIG).read_text())
    assert config["base_model_name_or_path"] == str(base.resolve())
    assert "# Projection head for" in (final / "README.md").read_text()
    plain = Embedder.from_pretrained(base, device="cpu", dtype="float32")
    headed = Embedder.from_pretrained(base, adapter=final, device="cpu", dtype="float32")
    assert np.abs(plain.encode(ITEMS) - headed.encode(ITEMS)).max() > 1e-4
    assert headed.fingerprint() != plain.fingerprint()


def test_resumed_head_run_ends_with_the_same_head(trained, tmp_path) -> None:
    _base, run = trained
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(run / "checkpoint-1", resumed_dir / "checkpoint-1")
    recipe = load_recipe(run / "recipe.yaml", overrides=[f"output_dir={resumed_dir}"])
    trainer = Trainer(recipe, resume=True)
    assert trainer.start_step == 1
    final = trainer.train()
    straight, resumed = load_file(str(run / "final" / HEAD_WEIGHTS)), load_file(str(final / HEAD_WEIGHTS))
    assert all(torch.equal(straight[name], resumed[name]) for name in straight)


def test_head_result_evaluates(trained, tmp_path) -> None:
    base, run = trained
    bench = make_identity_benchmark(tmp_path / "bench", n_views=2)
    manifest = bench["candidates"].parent / "benchmark.yaml"
    manifest.write_text(yaml.safe_dump({"name": "tiny", "datasets": [
        {"name": "Cand", "benchmark": "MVEB", "meta_task": "ID-Rec", "split": "IND", "layout": "candidates",
         "path": "cand.jsonl", "image_root": "images", "query_instruction": "Find the same object.",
         "candidate_instruction": "Represent the image."}]}))
    out = tmp_path / "eval"
    assert cli_main(["eval", "--model", str(base), "--adapter", str(run / "final"), "--benchmark", str(manifest),
                     "--out", str(out), "--device", "cpu", "--quiet", "--no-pictures"]) == 0
    assert json.loads((out / "results.json").read_text())["model"]["adapter"] == str(run / "final")


def test_sentence_transformers_export_applies_the_head(trained, tmp_path) -> None:
    sentence_transformers = pytest.importorskip("sentence_transformers")
    base, run = trained
    out = tmp_path / "st"
    assert cli_main(["export", "--adapter", str(run / "final"), "--out", str(out),
                     "--document-instruction", "Represent the image."]) == 0
    modules = json.loads((out / "modules.json").read_text())
    assert [m["path"] for m in modules][-2:] == ["3_Dense", "4_Normalize"]
    model = sentence_transformers.SentenceTransformer(str(out), device="cpu")
    ours = Embedder.from_pretrained(base, adapter=run / "final", device="cpu", dtype="float32").encode(
        ITEMS, instruction="Represent the image.")
    theirs = np.asarray(model.encode_document([item["text"] for item in ITEMS], convert_to_numpy=True))
    cosines = (ours * theirs).sum(-1) / np.linalg.norm(theirs, axis=-1)
    assert cosines.min() >= 0.9999
    base_vectors = Embedder.from_pretrained(base, device="cpu", dtype="float32").encode(
        ITEMS, instruction="Represent the image.")
    assert ((base_vectors * ours).sum(-1)).min() < 0.999  # the check would see a missing head



@pytest.fixture(scope="module")
def head_export(tiny_checkpoint, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(base, a perturbed 8-wide head with Matryoshka dims, its `vis-embed export`)."""
    base = tiny_checkpoint("qwen2-vl")
    root = tmp_path_factory.mktemp("head-export")
    model = EmbeddingModel.from_pretrained(base, device="cpu", dtype="float32")
    head = model.add_projection_head(out_dim=8)
    with torch.no_grad():
        head.linear.weight.add_(torch.randn(head.linear.weight.shape, generator=torch.Generator().manual_seed(0)))
    model.embedding_config = model.embedding_config.with_values(matryoshka_dims=[4], query_instruction="Find it.",
                                                                document_instruction="")
    model.save_pretrained(root / "head")
    assert cli_main(["export", "--adapter", str(root / "head"), "--out", str(root / "st")]) == 0
    return base, root / "head", root / "st"


def test_a_head_export_loads_with_its_head(head_export) -> None:
    """Embedder (hence `vis-embed encode --model EXPORT`) applies the export's Dense module: the
    vectors are the head's, 8 wide, not the base's."""
    base, head_dir, out = head_export
    ours = Embedder.from_pretrained(base, adapter=head_dir, device="cpu", dtype="float32")
    exported = Embedder.from_pretrained(out, device="cpu", dtype="float32")
    assert exported.embedding_dim == 8 and exported.embedding_config.matryoshka_dims == [4]
    assert np.allclose(exported.encode(ITEMS, instruction="Find it."), ours.encode(ITEMS, instruction="Find it."),
                       atol=1e-5)
    with pytest.raises(ConfigError, match="export with a projection head"):
        Embedder.from_pretrained(out, adapter=head_dir, device="cpu", dtype="float32")
    assert "# Model with a projection head for" in (out / "README.md").read_text()  # not "Merged model"


def test_exported_head_modules_vis_embed_cannot_apply_are_refused(head_export, tmp_path) -> None:
    from vis_embed.model.network.projection_head import load_exported_head

    _base, _head_dir, out = head_export
    copy = tmp_path / "st"
    copy.mkdir()
    shutil.copytree(out / "3_Dense", copy / "3_Dense")
    modules = json.loads((out / "modules.json").read_text())
    (copy / "modules.json").write_text(json.dumps(modules + [{"idx": 5, "name": "5", "path": "5_Router",
                                                             "type": "sentence_transformers.models.Router"}]))
    with pytest.raises(ConfigError, match="module 'Router', which vis_embed does not apply"):
        load_exported_head(copy)
    (copy / "modules.json").write_text(json.dumps(modules))
    weights = copy / "3_Dense" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated
    with pytest.raises(ConfigError, match=r"3_Dense/model.safetensors: not a readable safetensors file"):
        load_exported_head(copy)


_HUB_LOAD = """
import json, sys
import numpy as np
from vis_embed.model.runtime.embedder import Embedder
model = Embedder.from_pretrained(sys.argv[1], device="cpu", dtype="float32")
vectors = model.encode([{"text": "a red square"}, {"text": "a blue circle"}], instruction="Find it.")
print(json.dumps({"dim": model.embedding_dim, "matryoshka": model.embedding_config.matryoshka_dims,
                  "query_instruction": model.embedding_config.query_instruction, "vectors": vectors.tolist()}))
"""


def test_a_head_export_on_the_hub_loads_with_its_head_and_settings(head_export, tmp_path) -> None:
    """A Hub id reads the files the export records beside its weights (modules.json and its Dense
    module, embedding_config.json) as a local directory does -- here from the Hub's cache,
    offline: an export pushed to the Hub embeds as it did before the push."""
    import subprocess

    _base, _head_dir, out = head_export
    as_hub_cache(out, tmp_path / "hub", "acme/visme-head")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", _HUB_LOAD, "acme/visme-head"], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    from_hub = json.loads(done.stdout.strip().splitlines()[-1])
    local = Embedder.from_pretrained(out, device="cpu", dtype="float32")
    assert (from_hub["dim"], from_hub["matryoshka"], from_hub["query_instruction"]) == (8, [4], "Find it.")
    assert np.allclose(from_hub["vectors"], local.encode(ITEMS, instruction="Find it."), atol=1e-5)
