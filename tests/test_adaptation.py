"""The adaptation objects (model/network/adaptation/): each kind saves and loads back to the same
vectors through the one save path, the recipe's section builds the peft config whole, and
what a model holds is asked of the module (not probed elsewhere)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vis_embed.model.network.adaptation import (ADAPTATIONS, FullAdaptation, HeadAdaptation, LoraAdaptation,
                                                LoraOptions, adaptation_of, saved_adaptation)
from vis_embed.model.network.embedding_model import EmbeddingModel
from vis_embed.training.recipe import load_recipe

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ITEMS = [{"text": "a red square"}, {"text": "a blue circle"}, {"text": "a green triangle"}]


def _load(base: Path, adapter: Path | None = None) -> EmbeddingModel:
    return EmbeddingModel.from_pretrained(base, adapter=adapter, device="cpu", dtype="float32")


def _vectors(model: EmbeddingModel) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model.embed(ITEMS)


def _trained(model: EmbeddingModel) -> None:
    """Move every trainable weight off its initial value (fresh LoRA B is zero, a fresh head the
    identity: a round trip of untrained weights would prove nothing)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator).to(parameter.dtype))


@pytest.mark.parametrize("kind", ["lora", "head", "full"])
def test_each_kind_round_trips_save_then_load_to_the_same_vectors(kind, tiny_checkpoint, tmp_path) -> None:
    base = tiny_checkpoint("qwen2-vl")
    model = _load(base)
    plain = _vectors(model)
    adaptation = {"lora": LoraAdaptation(LoraOptions(r=2, alpha=4, dropout=0.0, vision=True).peft_config()),
                  "head": HeadAdaptation(8), "full": FullAdaptation()}[kind]
    adaptation.apply(model)
    _trained(model)
    before = _vectors(model)
    assert (before.shape[1] == 8) if kind == "head" else (before - plain).abs().max() > 1e-4
    assert adaptation_of(model).kind == kind
    saved = model.save_pretrained(tmp_path / kind)
    recorded = json.loads((saved / "embedding_config.json").read_text())["adaptation"]
    assert recorded == kind  # the kind saved, as the trainer records it (full: full weights)
    assert type(saved_adaptation(saved)) is ADAPTATIONS[kind]
    if kind == "full":
        loaded = _load(saved)  # a checkpoint of its own
    else:
        loaded = _load(base, adapter=saved)
    torch.testing.assert_close(_vectors(loaded), before, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["full", "lora"])
def test_the_trainers_save_and_save_pretrained_give_the_same_weights_one_fingerprint(kind, tiny_checkpoint,
                                                                                      tmp_path) -> None:
    """The same weights saved by the trainer's path (the adaptation object's save + the trained
    embedding_config.json) and by ``EmbeddingModel.save_pretrained`` record the same kind and
    load to the same fingerprint: the kind is recorded one way, and it is no part of the
    fingerprint (a model that once recorded None and once "full" was refused as another model)."""
    from vis_embed.data.train import TrainDataConfig
    from vis_embed.model.embedding_config import EmbeddingConfig, read_embedding_config
    from vis_embed.model.runtime.embedder import Embedder
    from vis_embed.training.model_setup import trained_embedding_config

    base = tiny_checkpoint("qwen2-vl")
    model = _load(base)
    adaptation = _adaptation(kind)
    adaptation.apply(model)
    _trained(model)
    by_trainer, by_save = tmp_path / "trainer", tmp_path / "save_pretrained"
    by_trainer.mkdir()
    adaptation.save(model, by_trainer, state=_trainable(model))
    trained_embedding_config(_recipe(adaptation=kind), TrainDataConfig(path=tmp_path / "d.yaml", datasets=[]),
                             model).save(by_trainer)
    model.save_pretrained(by_save)
    assert read_embedding_config(by_trainer)["adaptation"] == read_embedding_config(by_save)["adaptation"] == kind

    def fingerprint(directory: Path) -> str:
        model_dir, adapter = (directory, None) if kind == "full" else (base, directory)
        return Embedder.from_pretrained(model_dir, adapter=adapter, device="cpu", dtype="float32").fingerprint()

    assert fingerprint(by_trainer) == fingerprint(by_save)
    # the kind alone never moves a fingerprint: it says what trained, not how the model embeds
    config = EmbeddingConfig()
    assert {config.with_values(adaptation=k).fingerprint() for k in ("lora", "head", "full")} == {config.fingerprint()}


def _adaptation(kind: str):
    return {"lora": lambda: LoraAdaptation(LoraOptions(r=2, alpha=4, dropout=0.0).peft_config()),
            "head": HeadAdaptation, "full": FullAdaptation}[kind]()


def _trainable(model: EmbeddingModel) -> dict[str, torch.Tensor]:
    return {name: parameter.detach().clone() for name, parameter in model.named_parameters()
            if parameter.requires_grad}


@pytest.mark.parametrize("kind", ["lora", "head", "full"])
def test_load_weights_restores_a_saved_state_into_a_fresh_model(kind, tiny_checkpoint, tmp_path) -> None:
    """Resume and warm start: save (with the trainable state a backend gathers) -> a freshly
    built model of the same adaptation -> load_weights -> the same vectors and the same weights.
    (``full`` once loaded with strict=False under the checkpoint's key names: 1 of 58 matched and
    the base weights stayed.)"""
    base = tiny_checkpoint("qwen2-vl")
    adaptation = _adaptation(kind)
    model = _load(base)
    adaptation.apply(model)
    _trained(model)
    state = _trainable(model)
    adaptation.save(model, tmp_path, state=state)
    fresh = _load(base)
    adaptation.apply(fresh)
    assert (_vectors(fresh) - _vectors(model)).abs().max() > 1e-4
    adaptation.check_saved(tmp_path, fresh, "test")
    adaptation.load_weights(fresh, tmp_path)
    torch.testing.assert_close(_vectors(fresh), _vectors(model), atol=1e-6, rtol=0)
    loaded = _trainable(fresh)
    assert loaded.keys() == state.keys()
    for name, value in state.items():
        assert torch.equal(loaded[name], value), name


def test_full_saves_the_gathered_state_not_the_modules_own(tiny_checkpoint, tmp_path) -> None:
    """Under ZeRO-3 the module's parameters are partitioned: the backend's gathered state is what
    must be written (in the module's dtype), and resume / warm start read exactly it back."""
    from vis_embed.model.network.adaptation import warm_start

    base = tiny_checkpoint("qwen2-vl")
    model = _load(base)
    FullAdaptation().apply(model)
    gathered = {name: value.double() + 0.01 for name, value in _trainable(model).items()}  # not the module's
    FullAdaptation().save(model, tmp_path, state=gathered)
    fresh = _load(base)
    FullAdaptation().apply(fresh)
    warm_start(fresh, FullAdaptation(), tmp_path)  # recipe init_adapter with adaptation: full
    for name, parameter in fresh.named_parameters():
        assert parameter.dtype == torch.float32
        assert torch.equal(parameter, gathered[name].float()), name


def test_full_load_weights_builds_no_second_model(tiny_checkpoint, tmp_path, monkeypatch) -> None:
    """Resume / warm start of ``adaptation: full`` copies the saved tensors into the built model;
    it once built a second model with ``from_pretrained`` to read them (twice the memory of a 7B)."""
    import transformers

    base = tiny_checkpoint("qwen2-vl")
    model = _load(base)
    FullAdaptation().apply(model)
    _trained(model)
    FullAdaptation().save(model, tmp_path)
    fresh = _load(base)
    FullAdaptation().apply(fresh)
    built = []
    original = transformers.PreTrainedModel.__init__

    def counting(self, *args, **kwargs) -> None:
        built.append(type(self).__name__)
        original(self, *args, **kwargs)

    monkeypatch.setattr(transformers.PreTrainedModel, "__init__", counting)
    FullAdaptation().load_weights(fresh, tmp_path)
    assert built == []
    for name, value in model.backbone.state_dict().items():
        assert torch.equal(fresh.backbone.state_dict()[name], value), name


def test_full_refuses_a_checkpoint_that_lacks_weights(tiny_checkpoint, tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    from vis_embed.errors import ConfigError

    model = _load(tiny_checkpoint("qwen2-vl"))
    FullAdaptation().save(model, tmp_path)
    weights = load_file(str(tmp_path / "model.safetensors"))
    dropped = next(name for name in weights if "layers.0.mlp" in name)
    save_file({name: value for name, value in weights.items() if name != dropped}, str(tmp_path / "model.safetensors"),
              metadata={"format": "pt"})
    with pytest.raises(ConfigError, match="lacks 1 of the model's weights"):
        FullAdaptation().load_weights(_load(tiny_checkpoint("qwen2-vl")), tmp_path)


def _recipe(**sections):
    raw = {"model": "m", "data": "d.yaml", "schedule": "s.parquet", "output_dir": "out", "max_steps": 1,
           "global_batch_size": 8, **sections}
    return load_recipe(raw=raw)


def test_the_recipe_section_builds_the_peft_config_whole() -> None:
    lora = {"r": 8, "alpha": 16, "dropout": 0.1, "vision": True, "target_modules": ["q_proj"]}
    recipe = _recipe(adaptation={"kind": "lora", "lora": lora})
    assert recipe.adaptation == _recipe(lora=lora).adaptation  # the older top-level spelling: the same
    adaptation = recipe.adaptation.build()
    assert isinstance(adaptation, LoraAdaptation) and adaptation.kind == "lora"
    config = adaptation.peft_config
    assert (config.r, config.lora_alpha, config.lora_dropout, config.bias) == (8, 16, 0.1, "none")
    assert "q_proj" in config.target_modules and "k_proj" not in config.target_modules
    assert adaptation.trains_vision and "visual" in config.target_modules
    assert not _recipe().adaptation.build().trains_vision  # the decoder only by default


def test_full_and_head_kinds_and_the_older_spellings() -> None:
    assert isinstance(_recipe(adaptation={"kind": "full"}).adaptation.build(), FullAdaptation)
    assert _recipe(adaptation="full").adaptation.kind == "full"  # `adaptation: KIND`
    older = _recipe(lora={"enabled": False})  # `lora.enabled: false` means `adaptation.kind: full`
    assert older.adaptation.kind == "full" and isinstance(older.adaptation.build(), FullAdaptation)
    assert _recipe(lora={"enabled": True}).adaptation.kind == "lora"
    head = _recipe(adaptation="head", head={"dim": 12}).adaptation.build()
    assert isinstance(head, HeadAdaptation) and head.out_dim == 12
    assert _recipe(adaptation={"kind": "head", "head": {"dim": 12}}).adaptation.head.dim == 12


def test_older_spellings_set_on_the_command_line_keep_the_file_section(tmp_path) -> None:
    recipe_file = tmp_path / "recipe.yaml"
    recipe_file.write_text("model: m\ndata: d.yaml\nschedule: s.parquet\noutput_dir: out\nmax_steps: 1\n"
                           "global_batch_size: 8\nadaptation:\n  kind: lora\n  lora:\n    r: 8\n")
    recipe = load_recipe(recipe_file, overrides=["adaptation=head", "lora.alpha=4"])
    assert (recipe.adaptation.kind, recipe.adaptation.lora.r, recipe.adaptation.lora.alpha) == ("head", 8, 4)
    recipe = load_recipe(recipe_file, overrides=["adaptation.lora.r=2", "lora.enabled=false"])
    assert (recipe.adaptation.kind, recipe.adaptation.lora.r) == ("full", 2)


def test_a_run_recorded_with_the_older_spelling_resumes_with_the_new_one(tmp_path) -> None:
    import yaml

    from vis_embed.errors import ConfigError
    from vis_embed.training.recipe import recipe_to_dict
    from vis_embed.training.run_dir import check_resumed_recipe

    raw = {"model": "m", "data": "d.yaml", "schedule": "s.parquet", "output_dir": "out", "max_steps": 1,
           "global_batch_size": 8}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump({**raw, "adaptation": "lora", "lora": {"r": 8}}))
    same = recipe_to_dict(load_recipe(raw={**raw, "adaptation": {"kind": "lora", "lora": {"r": 8}}}))
    check_resumed_recipe(tmp_path, same)  # the same run, spelled as now
    other = recipe_to_dict(load_recipe(raw={**raw, "adaptation": {"lora": {"r": 4}}}))
    with pytest.raises(ConfigError, match=r"adaptation\.lora\.r: 8 -> 4"):
        check_resumed_recipe(tmp_path, other)


def test_one_class_per_declared_kind() -> None:
    """The kind vocabulary is declared once (embedding_config.AdaptationKind); the registry has
    one class per kind, and the recipe's kind builds that class."""
    import typing

    from vis_embed.model.embedding_config import AdaptationKind, EmbeddingConfig

    kinds = typing.get_args(AdaptationKind)
    assert set(ADAPTATIONS) == set(kinds)
    assert EmbeddingConfig.model_fields["adaptation"].annotation == AdaptationKind | None
    for kind in kinds:
        assert type(_recipe(adaptation={"kind": kind}).adaptation.build()) is ADAPTATIONS[kind]


def _write(directory: Path, files: dict[str, object]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (directory / name).write_text(json.dumps(content))
    return directory


LORA_CONFIG = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"],
               "base_model_name_or_path": "org/base"}
HEAD_FILE = {"in_dim": 4, "out_dim": 2, "base_model_name_or_path": "org/head-base"}


def test_the_recorded_kind_decides_and_the_files_only_without_a_record(tmp_path) -> None:
    from vis_embed.errors import ConfigError
    from vis_embed.model.network.adaptation import saved_adapter

    lora = _write(tmp_path / "lora", {"adapter_config.json": LORA_CONFIG,
                                      "embedding_config.json": {"adaptation": "lora"}})
    assert isinstance(saved_adaptation(lora), LoraAdaptation)
    assert saved_adapter(lora).base_model(lora) == "org/base"
    older = _write(tmp_path / "older", {"head_config.json": HEAD_FILE})  # written before the kind was recorded
    head = saved_adaptation(older)
    assert isinstance(head, HeadAdaptation) and head.out_dim == 2
    assert head.base_model(older) == "org/head-base"
    full = _write(tmp_path / "full", {"config.json": {}, "embedding_config.json": {"adaptation": "full"}})
    assert isinstance(saved_adaptation(full), FullAdaptation)
    assert saved_adaptation(_write(tmp_path / "plain", {"config.json": {}})) is None
    with pytest.raises(ConfigError, match="not an adapter directory"):
        saved_adapter(full)  # a full checkpoint is a model, not an adapter over one
    # a record the files contradict: refused, naming the record
    contradicted = _write(tmp_path / "contradicted", {"head_config.json": HEAD_FILE,
                                                      "embedding_config.json": {"adaptation": "lora"}})
    with pytest.raises(ConfigError, match=r"contradicted/embedding_config\.json: records adaptation 'lora'.*"
                                          r"holds head's head_config\.json"):
        saved_adaptation(contradicted)
    missing = _write(tmp_path / "missing", {"embedding_config.json": {"adaptation": "head"}})
    with pytest.raises(ConfigError, match=r"records adaptation 'head', but the directory has no head_config\.json"):
        saved_adaptation(missing)


def test_what_the_model_card_says_is_asked_of_the_registry() -> None:
    from vis_embed.model.files.model_card import CardFacts, card_data, model_card

    for kind, title, library in (("lora", "LoRA adapter", "peft"), ("head", "Projection head", "vis_embed"),
                                 ("full", "Model", "transformers"), (None, "Model", "transformers")):
        facts = CardFacts(base_model="org/base", adaptation=kind)
        assert facts.adapter == (kind in ("lora", "head"))
        assert f"# {title} for `org/base`" in model_card(facts)
        assert card_data(facts).library_name == library
        assert ("lora" in card_data(facts).tags) == (kind == "lora")
        assert card_data(facts, merged=True).library_name == "sentence-transformers"


def test_missing_or_truncated_weights_are_a_config_error_naming_the_file(tiny_checkpoint, tmp_path) -> None:
    """Without the check peft looks a missing adapter file up on the Hub (a network traceback) and
    safetensors reports a truncated file without naming it."""
    import shutil

    from vis_embed.errors import ConfigError
    from vis_embed.model.files.export import load_merged

    base = tiny_checkpoint("qwen2-vl")
    model = _load(base)
    model.add_lora(r=2)
    adapter = model.save_pretrained(tmp_path / "lora")
    weights = adapter / "adapter_model.safetensors"
    intact = weights.read_bytes()
    weights.unlink()
    for load in (lambda: _load(base, adapter), lambda: load_merged(str(base), adapter)):
        with pytest.raises(ConfigError, match="no adapter_model.safetensors"):
            load()
    weights.write_bytes(intact[:100])
    for load in (lambda: _load(base, adapter), lambda: load_merged(str(base), adapter)):
        with pytest.raises(ConfigError, match="lora/adapter_model.safetensors: not a readable safetensors file"):
            load()
    full = tmp_path / "full"
    shutil.copytree(base, full)
    (full / "model.safetensors").write_bytes((base / "model.safetensors").read_bytes()[:5000])
    with pytest.raises(ConfigError, match=r"full \(its \*.safetensors\): not a readable safetensors file"):
        _load(full)


def test_the_card_states_the_recorded_prompt_format_and_what_an_export_holds(tmp_path) -> None:
    from vis_embed.model.embedding_config import EmbeddingConfig
    from vis_embed.model.files.model_card import CardFacts, write_model_card

    EmbeddingConfig(prompt_format="chat-system").save(tmp_path)
    card = write_model_card(tmp_path, CardFacts(base_model="org/base")).read_text()
    assert "`chat-system` prompt format" in card and "`chat` prompt format" not in card
    for kind, title in (("lora", "Merged model"), ("head", "Model with a projection head"), (None, "Model")):
        card = write_model_card(tmp_path, CardFacts(base_model="org/base", adaptation=kind), merged=True).read_text()
        assert f"# {title} for `org/base`" in card, kind
        assert "--adapter THIS_DIR" not in card  # an export is a model of its own: no usage that fails
        assert "vis-embed eval --model THIS_DIR" in card and 'SentenceTransformer("THIS_DIR")' in card
