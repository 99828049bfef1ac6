"""mteb integration (``vis_embed.integrations.mteb``, ``vis-embed mteb``).

The acceptance property: on the synthetic tiny benchmark and a tiny random model, mteb's
evaluator (its own retrieval search and pytrec_eval scoring) and ``vis-embed eval`` give the
same precision at 1 for every retrieval dataset.  Two scorers can only agree on a ranking
that has no exact tie at rank 1 (vis_embed orders tied scores pessimistically, pytrec_eval by
document id), so the test first checks from mteb's saved rankings that no query has one.
mteb writes its scores rounded to 5 decimals; the file's value is compared with vis_embed's
P@1 rounded the same way, and the unrounded P@1 is recomputed from mteb's saved rankings.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("mteb")

from mteb.abstasks.task_metadata import TaskMetadata  # noqa: E402
from mteb.types import PromptType  # noqa: E402

from vis_embed.cli import main  # noqa: E402
from vis_embed.errors import ConfigError, DataError  # noqa: E402


@pytest.fixture(scope="module")
def synth_manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vis_embed.prep.synth import generate

    return generate(tmp_path_factory.mktemp("synth") / "out", seed=0, size="tiny", workers=1) / "benchmark.yaml"


def _result_files(out: Path) -> dict[str, dict]:
    files = list((out / "results").glob("*/*/*.json"))
    return {json.loads(f.read_text())["task_name"]: json.loads(f.read_text())
            for f in files if f.name not in ("model_meta.json",)}


def _top1(predictions: dict[str, dict[str, float]], drop_self: bool) -> dict[str, tuple[str, float, float]]:
    """Per query: (best document, best score, second-best score) of mteb's saved ranking."""
    tops = {}
    for query, scores in predictions.items():
        ranked = sorted(((s, d) for d, s in scores.items() if not (drop_self and d == query)), reverse=True)
        tops[query] = (ranked[0][1], ranked[0][0], ranked[1][0] if len(ranked) > 1 else -np.inf)
    return tops


def test_mteb_and_vis_embed_eval_agree_on_p_at_1(tiny_checkpoint, synth_manifest: Path, tmp_path: Path) -> None:
    from vis_embed.integrations.mteb_tasks import manifest_tasks

    checkpoint = str(tiny_checkpoint("qwen2-vl"))
    common = ["--model", checkpoint, "--device", "cpu", "--batch-size", "8", "--quiet"]
    assert main(["eval", *common, "--benchmark", str(synth_manifest), "--out", str(tmp_path / "eval"),
                 "--no-pictures"]) == 0
    assert main(["mteb", *common, "--benchmark", str(synth_manifest), "--out", str(tmp_path / "mteb"),
                 "--save-predictions"]) == 0
    ours = json.loads((tmp_path / "eval" / "results.json").read_text())["datasets"]
    theirs = _result_files(tmp_path / "mteb")
    tasks = {task.metadata.name: task for task in manifest_tasks(synth_manifest)}
    identity = [name for name, task in tasks.items() if task.spec.layout == "gallery"]
    assert len(identity) == 3 and set(theirs) == set(tasks)  # every retrieval dataset, one file each
    for name, task in tasks.items():
        task.load_data()
        split = task.dataset["default"]["test"]
        predictions = json.loads((tmp_path / "mteb" / "predictions" / f"{name}_predictions.json").read_text())
        tops = _top1(predictions["default"]["test"], drop_self=task.ignore_identical_ids)
        assert all(best > second for _doc, best, second in tops.values()), f"{name}: a tie at rank 1"
        exact = np.mean([doc in split["relevant_docs"][query] for query, (doc, _b, _s) in tops.items()])
        p_at_1 = ours[name]["metrics"]["P@1"] / 100
        assert exact == pytest.approx(p_at_1, abs=1e-6), name
        assert theirs[name]["scores"]["test"][0]["precision_at_1"] == pytest.approx(round(p_at_1, 5), abs=1e-6), name
        assert theirs[name]["scores"]["test"][0]["main_score"] == theirs[name]["scores"]["test"][0]["precision_at_1"]
    meta = json.loads(next((tmp_path / "mteb" / "results").glob("*/*/model_meta.json")).read_text())
    assert meta["embed_dim"] > 0 and meta["n_parameters"] > 0 and set(meta["modalities"]) == {"image", "text"}


def _metadata(name: str, prompt=None) -> TaskMetadata:
    return TaskMetadata(name=name, description="d", dataset={"path": "x/y", "revision": "r"}, prompt=prompt,
                        type="Any2AnyRetrieval", category="i2i", modalities=["image"], eval_langs=["eng-Latn"],
                        main_score="precision_at_1")


class _RecordingEmbedder:
    """Stands in for Embedder: records each encode call and returns a vector per item."""

    embedding_dim = 3

    def __init__(self) -> None:
        self.calls: list[tuple[list[dict], str | None]] = []

    def encode(self, items, instruction=None, batch_size=16, show_progress=False):
        self.calls.append((list(items), instruction))
        return np.ones((len(items), 3), dtype=np.float32)


def _model(instructions=None):
    from vis_embed.integrations.mteb import VisEmbedMtebModel

    model = VisEmbedMtebModel.__new__(VisEmbedMtebModel)  # no checkpoint: the embedder is a recorder
    model.embedder = model.model = _RecordingEmbedder()
    model.instructions = instructions or {}
    model.batch_size, model.show_progress, model.dim = 4, False, None
    return model


def test_instructions_override_then_task_prompt_then_defaults() -> None:
    model = _model({"Mine": {"query": "Q override"}})
    task = _metadata("Mine", prompt={"query": "task q", "document": "task d"})
    assert model.instruction_for(task, PromptType.query) == "Q override"
    assert model.instruction_for(task, PromptType.document) == "task d"   # not overridden: the task's own
    plain = _metadata("Other", prompt="find it")
    assert model.instruction_for(plain, PromptType.query) == "find it"
    assert model.instruction_for(plain, PromptType.document) is None       # a str prompt is the query side's
    assert model.instruction_for(_metadata("Bare"), PromptType.document) is None
    assert model.instruction_for(_metadata("Bare"), PromptType.query) is None  # no prompt anywhere: none


def test_instruction_yaml_is_validated(tmp_path: Path) -> None:
    from vis_embed.integrations.mteb import load_instructions

    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"A": "find A", "B": {"document": "represent B"}}))
    assert load_instructions(good) == {"A": {"query": "find A"}, "B": {"document": "represent B"}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"A": {"passage": "x"}}))
    with pytest.raises(DataError, match="A.passage"):
        load_instructions(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_instructions(bad)


def test_encode_gathers_all_batches_into_one_embedder_call() -> None:
    from PIL import Image

    model = _model()
    image = Image.new("RGB", (8, 8), (200, 10, 10))
    batches = [{"text": ["a red square", "  "], "image": [image, image]}, {"text": ["only text"], "image": [None]},
               {"image": ["/abs/path.png"]}]
    vectors = model.encode(batches, task_metadata=_metadata("T", prompt={"query": "Find it."}),
                           hf_split="test", hf_subset="default", prompt_type=PromptType.query)
    assert vectors.shape == (4, 3)
    [(items, instruction)] = model.embedder.calls  # one call: Embedder's own length-sorted batching
    assert instruction == "Find it."
    assert items == [{"image": image, "text": "a red square"}, {"image": image}, {"text": "only text"},
                     {"image": "/abs/path.png"}]


def test_manifest_tasks_refuse_non_retrieval_layouts(synth_manifest: Path) -> None:
    from vis_embed.integrations.mteb_tasks import manifest_tasks

    assert [t.metadata.name for t in manifest_tasks(synth_manifest, ["SynthRec"])] == ["SynthRec"]
    with pytest.raises(ConfigError, match="no dataset named 'Nope'"):
        manifest_tasks(synth_manifest, ["Nope"])


def test_gallery_task_excludes_same_image_rows_by_explicit_lists(tmp_path: Path) -> None:
    """A gallery row sharing the query's image file under another id is left out of its ranking."""
    from PIL import Image


    for name, colour in (("a", (255, 0, 0)), ("b", (0, 255, 0)), ("c", (0, 0, 255))):
        Image.new("RGB", (16, 16), colour).save(tmp_path / f"{name}.png")
    queries = [{"id": "q1", "image": "a.png", "identity": "x"}]
    gallery = [{"id": "g1", "image": "a.png", "identity": "x"}, {"id": "g2", "image": "b.png", "identity": "x"},
               {"id": "g3", "image": "c.png", "identity": "y"}]
    for file, rows in (("q.jsonl", queries), ("g.jsonl", gallery)):
        (tmp_path / file).write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = _loaded_task(tmp_path / "bench.yaml", {
        "name": "Gal", "meta_task": "Re-ID", "split": "IND", "layout": "gallery", "queries": "q.jsonl",
        "gallery": "g.jsonl"})
    split = task.dataset["default"]["test"]
    assert split["relevant_docs"] == {"q1": {"g2": 1}}
    assert split["top_ranked"] == {"q1": ["g2", "g3"]}
    assert task.metadata.category == "i2i"


def test_unreachable_hub_is_a_one_line_error(tiny_checkpoint, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import mteb

    def unreachable(self, *args, **kwargs):  # what datasets raises without network
        raise ConnectionError("Couldn't reach 'mteb/cub200_retrieval' on the Hub (LocalEntryNotFoundError)")

    task_class = type(mteb.get_task("CUB200I2IRetrieval"))
    monkeypatch.setattr(task_class, "load_data", unreachable)
    code = main(["mteb", "--model", str(tiny_checkpoint("qwen2-vl")), "--tasks", "CUB200I2IRetrieval",
                 "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len([line for line in err if line.startswith("error:")]) == 1
    assert "CUB200I2IRetrieval" in err[-1] and "Hugging Face Hub" in err[-1] and "cannot be reached" in err[-1]


def test_missing_mteb_names_the_extra(monkeypatch, capsys, tmp_path: Path) -> None:
    import vis_embed.integrations as integrations

    real = integrations.find_spec
    monkeypatch.setattr(integrations, "find_spec", lambda name: None if name == "mteb" else real(name))
    code = main(["mteb", "--model", "m", "--tasks", "X", "--out", str(tmp_path)])
    assert code == 2 and "vis_embed[mteb]" in capsys.readouterr().err


class _FakeModel:
    def __init__(self, name_or_path: str, adapter: str | None) -> None:
        import torch

        self.name_or_path, self.adapter = name_or_path, adapter
        self._weights = [torch.zeros(3, 2)]

    def parameters(self):
        return iter(self._weights)


class _FakeEmbedder:
    embedding_dim = 2

    def __init__(self, name_or_path: str, adapter: str | None = None) -> None:
        self.model = _FakeModel(name_or_path, adapter)

    def fingerprint(self) -> str:
        return "ab" * 32


def test_model_meta_names_the_model_and_its_adapter(tmp_path: Path) -> None:
    from vis_embed.integrations.mteb import model_meta

    (tmp_path / "ckpt").mkdir()
    assert model_meta(_FakeEmbedder("Qwen/Qwen2-VL-2B-Instruct")).name == "Qwen/Qwen2-VL-2B-Instruct"
    adapted = model_meta(_FakeEmbedder("Qwen/Qwen2-VL-2B-Instruct", str(tmp_path / "run" / "final")))
    assert adapted.name == "vis_embed/Qwen2-VL-2B-Instruct+final"  # not the base's name: another model
    assert adapted.adapted_from == "Qwen/Qwen2-VL-2B-Instruct"
    snapshot = tmp_path / "hub" / "models--acme--visme-lora" / "snapshots" / ("0" * 40)  # an adapter from the Hub
    from_hub = model_meta(_FakeEmbedder("Qwen/Qwen2-VL-2B-Instruct", str(snapshot)))
    assert from_hub.name == "vis_embed/Qwen2-VL-2B-Instruct+visme-lora"  # its repo's name, not its commit
    local = model_meta(_FakeEmbedder(str(tmp_path / "ckpt")))
    assert local.name == "vis_embed/ckpt" and local.revision == "ab" * 8
    assert local.n_parameters == 6 and local.embed_dim == 2
    assert model_meta(_FakeEmbedder(str(tmp_path / "ckpt")), name="mine").name == "vis_embed/mine"


def test_dim_cuts_the_vectors_and_names_another_model(tmp_path: Path) -> None:
    from vis_embed.integrations.mteb import model_meta

    model = _model()
    model.dim = 2
    vectors = model.encode([{"text": ["a", "b"]}], task_metadata=_metadata("T"), hf_split="test",
                           hf_subset="default", prompt_type=PromptType.query)
    np.testing.assert_allclose(vectors, np.full((2, 2), 2 ** -0.5), rtol=1e-6)
    (tmp_path / "ckpt").mkdir()
    embedder = _FakeEmbedder(str(tmp_path / "ckpt"))
    full, cut = model_meta(embedder), model_meta(embedder, dim=1)
    assert (cut.name, cut.embed_dim) == ("vis_embed/ckpt-dim1", 1) and cut.revision != full.revision


def test_candidates_task_marks_every_listed_positive_relevant(tmp_path: Path) -> None:
    """A row with ``"positives": N`` (MomentSeeker) has N relevant candidates, as vis-embed eval
    counts a hit on any of them (the task had only candidates[0]: mteb scored such a row's hit 0)."""
    from PIL import Image


    for name, colour in (("q", (9, 9, 9)), ("a", (255, 0, 0)), ("b", (0, 255, 0)), ("c", (0, 0, 255))):
        Image.new("RGB", (16, 16), colour).save(tmp_path / f"{name}.png")
    rows = [{"id": "r0", "query": {"image": "q.png"}, "positives": 2,
             "candidates": [{"image": "a.png"}, {"image": "b.png"}, {"image": "c.png"}]},
            {"id": "r1", "query": {"image": "q.png"}, "candidates": [{"image": "c.png"}, {"image": "a.png"}]}]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = _loaded_task(tmp_path / "bench.yaml", {
        "name": "Moments", "meta_task": "V-MRET", "split": "IND", "benchmark": "other", "layout": "candidates",
        "path": "c.jsonl"})
    split = task.dataset["default"]["test"]
    assert split["relevant_docs"] == {"q0": {"c0": 1, "c1": 1}, "q1": {"c2": 1}}
    assert split["top_ranked"] == {"q0": ["c0", "c1", "c2"], "q1": ["c2", "c0"]}


def _loaded_task(manifest: Path, dataset: dict):
    """The mteb task of a one-dataset manifest written to ``manifest``, its data loaded."""
    from vis_embed.integrations.mteb_tasks import manifest_tasks

    manifest.write_text(yaml.safe_dump({"name": "t", "datasets": [dataset]}))
    [task] = manifest_tasks(manifest)
    task.load_data()
    return task
