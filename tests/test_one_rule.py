"""Each "one place" claim of docs/architecture.md, checked on the source (AST), and the doc
itself: a "the one" / "the only" phrase there must be one this file checks.

A rule written twice drifts (the review found the same-label mask three times, the hub-id
test four times with three answers): each test below fails when a second copy appears.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("vis_embed",)


@cache
def _trees() -> dict[str, ast.Module]:
    """Every module of the packages by its path relative to the repository."""
    return {str(path.relative_to(ROOT)): ast.parse(path.read_text(encoding="utf-8"))
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _where(matches: Callable[[ast.AST], bool]) -> set[str]:
    """The modules holding a node for which ``matches`` is true."""
    return {name for name, tree in _trees().items() if any(matches(node) for node in ast.walk(tree))}


def _string(value: str) -> Callable[[ast.AST], bool]:
    return lambda node: isinstance(node, ast.Constant) and node.value == value


def _name(name: str) -> Callable[[ast.AST], bool]:
    return lambda node: (isinstance(node, ast.Name) and node.id == name) or \
        (isinstance(node, ast.alias) and node.name.rpartition(".")[2] == name)


def _call_of(name: str) -> Callable[[ast.AST], bool]:
    def matches(node: ast.AST) -> bool:
        if not isinstance(node, ast.Call):
            return False
        func = node.func
        return (isinstance(func, ast.Name) and func.id == name) or \
            (isinstance(func, ast.Attribute) and func.attr == name)
    return matches


def _definition(name: str) -> Callable[[ast.AST], bool]:
    return lambda node: isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name


def _source(node: ast.AST) -> str:
    return ast.unparse(node)


# ------------------------------------------------------------------ the rules, one module each
def test_one_index_stack() -> None:
    """vectors/index_spec.py holds the index vocabulary and its rules (bytes per vector, which kinds
    re-rank, the IVF list and probe counts, and the one check of an index name); gallery/index_choice.resolve_index
    is the one chooser (``auto`` with or without a memory budget) and gallery/search.build_index the one
    factory: eval, ``vis-embed index``, ``search`` and the server's store call them."""
    spec = "vis_embed/vectors/index_spec.py"
    for rule in ("bytes_per_vector", "check_rescore", "ivf_lists", "default_nprobe", "pq_bytes_for", "IndexSpec",
                 "check_index_name"):
        assert _where(_definition(rule)) == {spec}, rule
    # no other byte count: no second function computing bytes per vector, no other IVF formula
    assert _where(lambda node: isinstance(node, ast.FunctionDef) and "bytes_per_vector" in node.name
                  and node.name != "test_bytes_per_vector") == {spec}
    sqrt_of_rows = _where(lambda node: isinstance(node, ast.Call) and _source(node.func).endswith("sqrt")
                          and "rows" in _source(node))
    assert sqrt_of_rows == {spec}
    assert _where(lambda node: isinstance(node, ast.Call) and _source(node.func).startswith("faiss.IndexIVF")) \
        == {"vis_embed/gallery/search.py"}
    assert _where(_call_of("ivf_lists")) == _where(_call_of("default_nprobe")) == {"vis_embed/gallery/search.py"}
    # the rescore rule: defined once, asked by the eval settings, the spec and the stored index's loader
    assert _where(_call_of("check_rescore")) == {spec, "vis_embed/evaluation/settings.py", "vis_embed/gallery/store.py"}
    # the one chooser: auto is decided in index_choice only, and both callers ask it
    for chooser in ("resolve_index", "choose_index", "_by_budget"):
        assert _where(_definition(chooser)) == {"vis_embed/gallery/index_choice.py"}, chooser
    assert _where(_call_of("resolve_index")) >= {"vis_embed/evaluation/gallery_ranking.py",
                                                 "vis_embed/gallery/store.py", "vis_embed/gallery/search.py"}
    assert _where(_name("FLAT_AUTO_ROWS")) == {"vis_embed/gallery/index_choice.py"}
    # one check of a name: only index_spec asks whether a name is in the vocabulary (the
    # settings, a manifest's options and `vis-embed index --kind` call check_index_name)
    asks_membership = _where(lambda node: isinstance(node, ast.Compare) and any(
        isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
        _source(c) in ("INDEX_NAMES", "STORE_KINDS", "STORED_KINDS", "ALIASES") for c in node.comparators))
    assert asks_membership <= {spec}
    assert _where(_call_of("check_index_name")) == {spec, "vis_embed/data/eval_options.py",
                                                    "vis_embed/gallery/store.py"}
    # the factory takes a spec: no call passes it a kind name or loose build parameters
    assert _where(lambda node: _call_of("build_index")(node) and any(  # type: ignore[attr-defined]
        keyword.arg in ("kind", "nlist", "nprobe", "rescore") for keyword in node.keywords)) == set()  # type: ignore[attr-defined]
    # one vocabulary: the kind names are spelled as a tuple in index_spec only
    vocabularies = _where(lambda node: isinstance(node, ast.Tuple) and {"flat", "ivf-pq"} <= {
        element.value for element in node.elts if isinstance(element, ast.Constant)})
    assert vocabularies == {spec}


def test_validation_errors_are_formatted_in_config_only() -> None:
    """config.format_validation_error is the one formatter; ``reported`` / ``validated`` carry
    it to every config and setting.  The server's request body answers in OpenAI's error
    schema (``param``), its own vocabulary, in serving/schemas.py."""
    handlers = _where(lambda node: isinstance(node, ast.ExceptHandler) and node.type is not None
                      and "ValidationError" in _source(node.type))
    assert handlers == {"vis_embed/config.py", "vis_embed/serving/schemas.py"}


def test_omp_wait_policy_and_the_log_handler_are_set_by_the_command_line_only() -> None:
    assert _where(_string("OMP_WAIT_POLICY")) == {"vis_embed/cli.py"}
    assert _where(_call_of("addHandler")) | _where(_call_of("basicConfig")) == {"vis_embed/cli.py"}


def test_the_embedding_settings_are_declared_once() -> None:
    """No pydantic model but EmbeddingConfig declares a loading setting (the recipe's
    model_options are generated from it)."""
    settings = {"prompt_format", "min_pixels", "max_pixels", "max_length", "decode", "attn_implementation"}

    def declares_setting(node: ast.AST) -> bool:
        return isinstance(node, ast.ClassDef) and any(_source(base).endswith(("BaseModel", "Settings"))
                                                      for base in node.bases) and any(
            isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.target.id in settings
            for item in node.body)
    assert _where(declares_setting) == {"vis_embed/model/embedding_config.py"}
    assert _where(lambda node: isinstance(node, ast.Constant) and node.value == 200704) == {
        "vis_embed/model/defaults.py"}  # DEFAULT_MAX_PIXELS


def test_pixel_order_and_decode_modes_are_checked_by_the_config_only() -> None:
    assert _where(lambda node: isinstance(node, ast.JoinedStr) and "exceeds max_pixels" in _source(node)) == {
        "vis_embed/model/embedding_config.py"}
    assert _where(_name("DECODE_MODES")) == {"vis_embed/data/images.py", "vis_embed/model/embedding_config.py"}


def test_items_are_prepared_and_pooled_in_one_place() -> None:
    """Preparer: the one item -> PreparedItem path (prompt included); EmbeddingModel: the one
    forward + pooling."""
    assert _where(_call_of("build_prompt")) == {"vis_embed/model/inputs/preparer.py"}
    assert _where(_call_of("PreparedItem")) == {"vis_embed/model/inputs/preparer.py"}
    assert _where(_call_of("last_token_pool")) == {"vis_embed/model/network/embedding_model.py"}


def test_the_dtype_rule_is_resolve_dtype() -> None:
    by_device = _where(lambda node: isinstance(node, ast.IfExp) and "bfloat16" in _source(node))
    assert by_device == {"vis_embed/model/network/embedding_model.py"}


def test_one_model_card_writer_and_one_adapter_config_reader() -> None:
    assert _where(_name("ModelCardData")) | _where(_name("ModelCard")) == {"vis_embed/model/files/model_card.py"}
    assert _where(_name("PeftConfig")) == {"vis_embed/model/references.py"}
    assert _where(_string("adapter_config.json")) == {"vis_embed/model/references.py"}  # ADAPTER_CONFIG


def test_one_hub_id_rule() -> None:
    assert _where(_definition("is_hub_id")) == {"vis_embed/io.py"}
    assert _where(_name("HUB_ID")) == {"vis_embed/io.py"}
    counts_slashes = _where(lambda node: _call_of("count")(node) and bool(node.args)  # type: ignore[attr-defined]
                            and _string("/")(node.args[0]))  # type: ignore[attr-defined]
    assert counts_slashes == set()


def test_one_image_url_fetcher() -> None:
    def http_import(node: ast.AST) -> bool:
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        return any(name.startswith(("http.client", "urllib.request", "requests", "httpx", "urllib3"))
                   for name in names)
    assert _where(http_import) == {"vis_embed/data/fetch.py"}


def _pairs_a_tensor_with_itself(node: ast.AST) -> bool:
    """``x[:, None] == x[None, :]`` (one tensor's codes against themselves: the same-label rule;
    two different tensors, as the own-image diagnostic's records, are another relation)."""
    if not (isinstance(node, ast.Compare) and len(node.comparators) == 1):
        return False
    left, right = node.left, node.comparators[0]
    return (isinstance(left, ast.Subscript) and isinstance(right, ast.Subscript)
            and _source(left).endswith("[:, None]") and _source(right).endswith("[None, :]")
            and _source(left.value) == _source(right.value))


def test_one_same_label_rule() -> None:
    """``labels[:, None] == labels[None, :]``: infonce.false_negative_mask, called by every loss."""
    pairwise = _where(_pairs_a_tensor_with_itself)
    assert pairwise == {"vis_embed/training/losses/infonce.py"}
    for loss in ("two_tier", "two_tier_margin", "triplet_hinge", "diagnostics"):
        module = f"vis_embed/training/losses/{loss}.py"
        assert module in _where(_name("false_negative_mask")) | _where(_name("info_nce_loss")), loss


def test_one_bbox_inside_image_rule() -> None:
    assert _where(lambda node: isinstance(node, ast.JoinedStr) and "lies outside the" in _source(node)) == {
        "vis_embed/data/image_geometry.py"}


def test_one_item_validator_one_missing_extra_rule_one_cpuinfo_reader() -> None:
    assert _where(_definition("check_item")) == {"vis_embed/data/items.py"}
    assert _where(_name("find_spec")) == {"vis_embed/integrations/__init__.py"}
    assert _where(lambda node: isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and node.value == "/proc/cpuinfo") == {"vis_embed/provenance.py"}


def test_one_bad_item_rule() -> None:
    """item_feed.accepted decides a prepared item that came back as a DataError: encode, the dry
    run, the server and the trainer's worker path."""
    decides = _where(lambda node: _call_of("isinstance")(node) and len(node.args) == 2  # type: ignore[attr-defined]
                     and _name("DataError")(node.args[1]) and "result" in _source(node.args[0]))  # type: ignore[attr-defined]
    assert decides == {"vis_embed/model/runtime/item_feed.py"}
    assert "vis_embed/training/step_items.py" in _where(_call_of("accepted"))


def test_one_input_image_format_allow_list() -> None:
    """Every input image is opened by image_guards.open_image (PIL told INPUT_FORMATS)."""
    opens = _where(lambda node: isinstance(node, ast.Call) and _source(node.func) == "Image.open")
    assert opens == {"vis_embed/data/image_guards.py"}


def test_one_attention_rule() -> None:
    """model/network/attention.resolve_attn_implementation picks the kernel; only it asks whether a flash
    package is usable, only it registers with transformers, and the model's loading calls it."""
    probes = (_name("is_flash_attn_2_available"), _name("is_flash_attn_4_available"), _name("AttentionInterface"))
    assert set().union(*(_where(probe) for probe in probes)) == {"vis_embed/model/network/attention.py"}
    assert _where(_call_of("resolve_attn_implementation")) == {"vis_embed/model/network/embedding_model.py"}


def test_one_global_ranking_and_one_group_membership_rule() -> None:
    """The gallery and qrels layouts rank through GlobalRanking: only it builds an evaluation's
    search index (the stored index, ``vis-embed index``, and mining's neighbours call the same
    factory) and resolves ties at the cut-off; group_means and group_counts share one membership rule."""
    assert _where(_call_of("build_index")) == {"vis_embed/evaluation/gallery_ranking.py", "vis_embed/gallery/store.py",
                                               "vis_embed/mining/hard_negatives.py"}
    flat_indexes = _where(lambda node: isinstance(node, ast.Attribute) and node.attr == "IndexFlatIP")
    # no faiss index built outside the index stack (the chooser times one to pick the fastest kind)
    assert flat_indexes == {"vis_embed/gallery/search.py", "vis_embed/gallery/index_choice.py"}
    assert _where(_call_of("results_past_ties")) == {"vis_embed/evaluation/gallery_ranking.py"}
    assert _where(_call_of("_group_keys")) == {"vis_embed/data/taxonomy.py"}
    assert _where(_definition("_group_keys")) == {"vis_embed/data/taxonomy.py"}


def test_one_tie_rule_for_every_exact_search_of_gallery_search() -> None:
    """Gallery search orders hits and chooses the rows tied at the k-th score by one rule,
    gallery/hit_order.py (higher score, then the smaller row id, missing hits last): the package's
    only lexsort.  search.py calls it for the final order (tie_order), numpy's cut (_best_columns)
    and faiss flat's deeper search (_whole_tie); the bf16 shortlist's re-scoring and the quantized
    kinds' re-ranking call it too.  Torch's cut (_smallest_tied) restates it on the device, for
    speed, and says so; it is pinned to the same hits by tests/test_gallery_search.py
    (test_the_torch_and_numpy_cuts_choose_the_tied_rows_by_one_rule)."""
    gallery = {name: tree for name, tree in _trees().items() if name.startswith("vis_embed/gallery/")}
    assert {name for name, tree in gallery.items()
            if any(_call_of("lexsort")(node) for node in ast.walk(tree))} == {"vis_embed/gallery/hit_order.py"}

    def calling(module: str, name: str) -> set[str]:
        functions = [node for node in ast.walk(gallery[module]) if isinstance(node, ast.FunctionDef)]
        return {function.name for function in functions if any(_call_of(name)(node) for node in ast.walk(function))}
    assert calling("vis_embed/gallery/search.py", "hit_order") == {"tie_order", "_best_columns", "_whole_tie"}
    assert calling("vis_embed/gallery/search_bf16.py", "hit_order") == {"_search_block", "_brute_force"}
    assert calling("vis_embed/gallery/quantized_index.py", "hit_order") == {"rescored"}
    pin = "test_the_torch_and_numpy_cuts_choose_the_tied_rows_by_one_rule"  # the twin points to it, and it exists
    twin = next(node for node in ast.walk(gallery["vis_embed/gallery/search.py"])
                if isinstance(node, ast.FunctionDef) and node.name == "_smallest_tied")
    assert "hit_order" in (ast.get_docstring(twin) or "") and pin in (ast.get_docstring(twin) or "")
    assert f"def {pin}(" in (ROOT / "tests" / "test_gallery_search.py").read_text(encoding="utf-8")


def test_one_frame_rule() -> None:
    """Which frames of a clip the model sees is data/video.frame_indices: the library's only
    linspace, which load_video and the length estimate both call."""
    linspaces = _where(lambda node: isinstance(node, ast.Call) and _source(node.func).endswith("linspace"))
    assert {path for path in linspaces if path.startswith("vis_embed/")} == {"vis_embed/data/video.py"}
    assert {"vis_embed/data/video.py", "vis_embed/model/inputs/lengths.py"} <= _where(_call_of("frame_indices"))


def test_batch_bookkeeping_is_computed_in_vision_metadata_only() -> None:
    """model/network/vision_metadata.py computes a batch's vision boundaries, positions and M-RoPE index
    (transformers' vision_utils, the model's get_rope_index); the collation calls it once."""
    probes = (_call_of("get_rope_index"), _name("vision_utils"), _call_of("get_vision_cu_seqlens"))
    assert set().union(*(_where(probe) for probe in probes)) == {"vis_embed/model/network/vision_metadata.py"}
    assert _where(_call_of("describe_batch")) == {"vis_embed/model/network/embedding_model.py"}
    # one move of the vision keywords to the device (their boundaries' host lengths noted for the
    # moved tensors): vision_on, for a batch's metadata (BatchMetadata.to) and the tower's dummy
    module = "vis_embed/model/network/vision_metadata.py"
    assert _where(_call_of("remember_segment_lengths")) == {module}
    functions = [node for node in ast.walk(_trees()[module]) if isinstance(node, ast.FunctionDef)]
    assert {function.name for function in functions
            if any(_call_of("remember_segment_lengths")(node) for node in ast.walk(function))} == {"vision_on"}
    assert {function.name for function in functions
            if any(_call_of("vision_on")(node) for node in ast.walk(function))} == {"to", "vision_tower_dummy"}


def test_one_compile_rule() -> None:
    """model/network/compile_blocks.resolve_compile decides whether to compile; the Embedder asks
    it, and training through training_compiles (which adds only ZeRO-3's exception)."""
    assert _where(_definition("resolve_compile")) == {"vis_embed/model/network/compile_blocks.py"}
    assert _where(_call_of("resolve_compile")) == {"vis_embed/model/runtime/embedder.py",
                                                   "vis_embed/training/model_setup.py"}
    assert _where(_call_of("training_compiles")) == {"vis_embed/training/model_setup.py"}


def test_the_rule_checks_see_a_second_copy(tmp_path: Path, monkeypatch) -> None:
    """The scanner is not blind: a module restating the same-label rule is found."""
    copy = ast.parse("same = (ids[:, None] == ids[None, :]) & (ids[:, None] >= 0)\n")
    monkeypatch.setitem(_trees(), "vis_embed/elsewhere.py", copy)
    assert "vis_embed/elsewhere.py" in _where(_pairs_a_tensor_with_itself)


# ------------------------------------------------------------------ the doc's claims are these
def test_one_regular_file_check() -> None:
    """A FIFO blocks an open forever and a device can be endless: io.not_regular says which, once."""
    assert _where(lambda node: isinstance(node, ast.Attribute) and node.attr == "S_ISFIFO") == {"vis_embed/io.py"}


def test_one_text_cutting_rule() -> None:
    """Texts are cut by characters before tokenising with model/inputs/lengths' CHARS_PER_TOKEN only."""
    defines = _where(lambda node: isinstance(node, ast.Assign) and any(
        isinstance(target, ast.Name) and target.id == "CHARS_PER_TOKEN" for target in node.targets))
    assert defines == {"vis_embed/model/inputs/lengths.py"}
    assert _where(_definition("within_token_budget")) == {"vis_embed/model/inputs/lengths.py"}
    assert {"vis_embed/model/inputs/preparer.py", "vis_embed/serving/limits.py"} \
        <= _where(_call_of("within_token_budget"))


# Each "the one ..." / "the only ..." phrase of docs/architecture.md, and the test above that makes it true.
def test_one_dataset_revision_table() -> None:
    """vis_embed/prep/mmeb_v2_sources.REVISIONS is the one dataset -> revision table, and hub.py the
    one reader of hub datasets and files: every pinned load goes through it (references.model_file
    the one reader of a model repo's own files, beside transformers' loading of its weights)."""
    tables = _where(lambda node: (isinstance(node, ast.AnnAssign) and _source(node.target) == "REVISIONS")
                    or (isinstance(node, ast.Assign) and any(_source(t) == "REVISIONS" for t in node.targets)))
    assert tables == {"vis_embed/prep/mmeb_v2_sources.py"}
    readers = _where(lambda node: isinstance(node, ast.Call) and _source(node.func).rpartition(".")[2] in
                     ("load_dataset", "get_dataset_config_names", "hf_hub_download", "snapshot_download"))
    assert readers == {"vis_embed/prep/hub.py", "vis_embed/model/references.py"}


ADAPTATION = "vis_embed/model/network/adaptation"


def test_what_adaptation_a_model_holds_is_asked_of_the_adaptation_module() -> None:
    """Probing a backbone for peft (``peft_config``) is the model/network/adaptation/ package's
    alone (base.has_lora, the LoRA kind, options.adaptation_of): the trainer, checkpoints, export,
    the model card and EmbeddingModel ask its objects."""
    probes = _where(lambda node: (isinstance(node, ast.Attribute) and node.attr == "peft_config")
                    or _string("peft_config")(node))
    assert probes == {f"{ADAPTATION}/base.py", f"{ADAPTATION}/lora.py", f"{ADAPTATION}/options.py"}
    assert _where(_call_of("get_peft_model")) == {f"{ADAPTATION}/lora.py"}
    assert _where(_string("head_config.json")) == {"vis_embed/model/references.py"}
    # the one save path: only the adaptation objects write a model's weights
    assert _where(_call_of("save_head")) == {f"{ADAPTATION}/head.py"}
    assert _where(_call_of("merge_and_unload")) == {f"{ADAPTATION}/lora.py"}  # the one merge


def _imported_modules(path: Path) -> Iterator[str]:
    """The dotted names ``path`` imports (``from P import a``: ``P`` and ``P.a``), relative ones resolved."""
    package = path.relative_to(ROOT).parent.parts  # what a relative import starts from
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def test_the_adaptation_package_is_imported_whole() -> None:
    """Outside model/network/adaptation/, its names are imported from the package (its API in
    __init__), never from a submodule: vis_embed/, tests/ and benchmarks/ alike."""
    package = ADAPTATION.replace("/", ".")
    submodules = {f"{package}.{path.stem}" for path in (ROOT / ADAPTATION).glob("*.py") if path.stem != "__init__"}
    assert {f"{package}.base", f"{package}.options", f"{package}.saved"} <= submodules
    importers = {str(path.relative_to(ROOT)) for folder in ("vis_embed", "tests", "benchmarks")
                 for path in sorted((ROOT / folder).rglob("*.py"))
                 if not path.is_relative_to(ROOT / ADAPTATION)
                 and any(name in submodules for name in _imported_modules(path))}
    assert importers == set()


def test_the_saved_adaptation_is_decided_by_the_kind_registry() -> None:
    """What a directory holds is model/network/adaptation.saved_adaptation's answer (its recorded
    kind selects the class from ADAPTATIONS; the files only for an older directory): export,
    merge, the quickstart and the model card ask it and the class it returns; the kinds are
    declared once (embedding_config.AdaptationKind)."""
    references, saved = "vis_embed/model/references.py", f"{ADAPTATION}/saved.py"
    for rule, where in (("saved_adaptation", saved), ("saved_adapter", saved), ("_kind_by_files", saved),
                        ("ADAPTATIONS", f"{ADAPTATION}/base.py")):
        assert _where(lambda node, rule=rule: _definition(rule)(node) or (
            isinstance(node, ast.AnnAssign) and _source(node.target) == rule)) == {where}, rule
    # the adapter files and the two base readers are asked by saved_adaptation and the objects only
    assert _where(_call_of("is_peft_adapter")) == {references, saved}
    assert _where(_call_of("base_model_of")) | _where(_call_of("head_base_model")) == {f"{ADAPTATION}/lora.py",
                                                                                       f"{ADAPTATION}/head.py"}
    # one vocabulary: the kinds are spelled together in embedding_config only
    def spells_kinds(node: ast.AST) -> bool:
        constants = {element.value for element in ast.walk(node) if isinstance(element, ast.Constant)}
        return isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Subscript)) and \
            len({"lora", "head", "full"} & constants) >= 2
    vocabularies = _where(spells_kinds)
    # (recipe_spellings.py: the older top-level `lora:` / `head:` sections, section names, not kinds)
    assert vocabularies == {"vis_embed/model/embedding_config.py", "vis_embed/training/recipe_spellings.py"}
    # no module compares a kind by name, but the readers of the older spellings (a recipe's
    # `lora.enabled: false`, a model_card.json written before the kind was recorded)
    compares_a_kind = _where(lambda node: isinstance(node, ast.Compare) and any(
        isinstance(operand, ast.Constant) and operand.value in ("lora", "head", "full")
        for operand in (node.left, *node.comparators)))
    assert compares_a_kind == {"vis_embed/training/recipe_spellings.py", "vis_embed/model/files/model_card.py"}


def test_one_settings_base() -> None:
    """config.Settings sets the settings' behaviour (unknown keys, inf/nan, the error type);
    no class sets it again (the HTTP request bodies answer in OpenAI's schema)."""
    assert _where(lambda node: isinstance(node, ast.keyword) and node.arg == "allow_inf_nan") == {
        "vis_embed/config.py"}
    forbids = _where(lambda node: isinstance(node, ast.keyword) and node.arg == "extra"
                     and _source(node.value) == "'forbid'")
    assert forbids == {"vis_embed/config.py", "vis_embed/serving/schemas.py", "vis_embed/serving/gallery_routes.py"}
    assert _where(_call_of("SettingsError")) == {"vis_embed/config.py"}


def test_one_file_record_base_and_one_model_record() -> None:
    """config.FileRecord is the base of every record of a JSON file written and read back
    (unknown keys kept, errors through the formatter): no other class subclasses BaseModel but
    the settings base and the server's request bodies, and none sets extra="ignore";
    config.ModelRecord is "which model made these vectors" (.ids.json, index.json)."""
    assert _where(lambda node: isinstance(node, ast.ClassDef)
                  and any(_source(base) == "BaseModel" for base in node.bases)) == {
        "vis_embed/config.py", "vis_embed/serving/schemas.py", "vis_embed/serving/gallery_routes.py"}
    assert _where(lambda node: isinstance(node, ast.keyword) and node.arg == "extra"
                  and _source(node.value) == "'ignore'") == set()
    records = {node.name for tree in _trees().values() for node in ast.walk(tree)
               if isinstance(node, ast.ClassDef) and any(_source(base) == "FileRecord" for base in node.bases)}
    assert records >= {"ResultsFile", "ResultsModel", "DatasetResult", "ProtocolRecord", "IndexFile",
                       "EncodedAlignment", "CardFacts", "HeadFile", "TrainerStateFile", "ModelRecord"}
    assert _where(_definition("ModelRecord")) == _where(_definition("FileRecord")) == {"vis_embed/config.py"}
    fingerprint_fields = _where(lambda node: isinstance(node, ast.ClassDef) and any(
        isinstance(item, ast.AnnAssign) and _source(item.target) == "fingerprint" for item in node.body))
    assert fingerprint_fields == {"vis_embed/config.py"}


def test_json_files_are_read_through_io() -> None:
    """A JSON file is read by vis_embed/io.py (read_json_value, read_json_object, read_jsonl, or
    json_value on the text of a file the caller holds open): a BOM dropped, the depth bounded,
    the file named in errors.  json.load is called nowhere else, and json.loads elsewhere only on
    a string that is no file's text: a CSV cell's bbox, a synthetic identity's parameters, an
    mteb dataset column, the server's request body, a Parquet schedule's metadata."""
    def json_call(*names: str) -> Callable[[ast.AST], bool]:
        return lambda node: isinstance(node, ast.Call) and _source(node.func) in names

    io = "vis_embed/io.py"
    assert _where(json_call("json.load")) <= {io}
    assert _where(lambda node: isinstance(node, ast.ImportFrom) and node.module == "json") == set()
    assert _where(json_call("json.loads")) == {
        io, "vis_embed/prep/identities.py", "vis_embed/prep/synth/patches.py", "vis_embed/integrations/mteb.py",
        "vis_embed/serving/schemas.py", "vis_embed/sampling/schedule_io.py"}
    read_here = re.compile(r"\.(read_text|read_bytes|read)\(|\bopen\(")
    assert _where(lambda node: json_call("json.loads")(node) and read_here.search(_source(node))) == set()


def test_config_objects_cross_module_boundaries_whole() -> None:
    """A settings object is handed on whole, not unpacked into keyword arguments the callee
    re-checks: LossConfig into build_objective, ServerSettings into the image policy, the batcher
    and the input limiter, the recipe's lora: section into the LoRA adaptation, its optimizer:
    section into the backends, gradcache: into the memory plan and the GradCache step,
    temperature: (with loss:, which owns two_tier's fixed tau) into the Temperature."""
    from vis_embed.model.network.adaptation import LoraOptions
    from vis_embed.model.embedding_config import EmbeddingConfig
    from vis_embed.serving.settings import ServerSettings
    from vis_embed.training.recipe import GradCacheConfig, LossConfig, OptimizerConfig, TemperatureConfig

    def unpacks(callee: str, fields: set[str]) -> Callable[[ast.AST], bool]:
        return lambda node: _call_of(callee)(node) and any(  # type: ignore[attr-defined]
            keyword.arg in fields or (keyword.arg or "").startswith(tuple(fields)) for keyword in node.keywords)

    loss_fields = set(LossConfig.model_fields) | {"two_tier_alpha", "two_tier_weight", "two_tier_margin",
                                                  "hinge_margin"}
    assert _where(unpacks("build_objective", loss_fields)) == set()
    server_fields = set(ServerSettings.model_fields) - {"model_name"}
    for callee in ("ImagePolicy", "MicroBatcher", "InputLimiter"):
        assert _where(unpacks(callee, server_fields)) == set(), callee
    assert _where(unpacks("add_lora", set(LoraOptions.model_fields))) == set()
    def passes(callee: str, fields: set[str]) -> Callable[[ast.AST], bool]:  # by exact keyword (lr_schedule= is none)
        return lambda node: _call_of(callee)(node) and any(  # type: ignore[attr-defined]
            keyword.arg in fields for keyword in node.keywords)

    for callee in ("TorchBackend", "DeepSpeedBackend", "lr_lambda"):
        assert _where(passes(callee, set(OptimizerConfig.model_fields) | {"min_ratio"})) == set(), callee
    assert _where(_call_of("lr_lambda")) == {"vis_embed/training/lr_schedule.py"}  # lr_schedule_of(optimizer)
    for callee in ("contrastive_step", "plan_training"):
        assert _where(unpacks(callee, set(GradCacheConfig.model_fields))) == set(), callee
    # the trainer's temperature: Temperature.from_config(recipe.temperature, recipe.loss), nowhere else built
    assert _where(_call_of("Temperature")) == set()
    assert _where(unpacks("Temperature", set(TemperatureConfig.model_fields) | {"min_value"})) == set()
    # the one translation of the lora: section into peft
    assert _where(unpacks("LoraConfig", {"r", "lora_alpha"})) == {f"{ADAPTATION}/lora.py"}
    # from_pretrained takes EmbeddingConfig fields as **settings or config=, not a hand list
    listed = _where(lambda node: isinstance(node, ast.FunctionDef) and node.name == "from_pretrained" and any(
        argument.arg in set(EmbeddingConfig.model_fields) - {"dtype"} for argument in node.args.kwonlyargs
        + node.args.args))
    assert listed == set()


def test_one_matryoshka_width_rule() -> None:
    """The widths a model was trained for and a --dim cut are checked by vectors/transforms.py's
    check_matryoshka_dims / check_dim, which the recipe, EmbeddingConfig, the loss and eval ask."""
    def restates(node: ast.AST) -> bool:
        text = _source(node) if isinstance(node, (ast.JoinedStr, ast.Constant)) else ""
        return "exceeds the model's embedding width" in text or "strictly increasing" in text \
            or "exceed the embedding width" in text
    assert _where(restates) == {"vis_embed/vectors/transforms.py"}
    assert _where(_call_of("check_matryoshka_dims")) >= {"vis_embed/model/embedding_config.py",
                                                         "vis_embed/training/losses/matryoshka.py"}


CLAIMS = {
    "the one global ranking": test_one_global_ranking_and_one_group_membership_rule,
    "the one membership rule": test_one_global_ranking_and_one_group_membership_rule,
    "The only place that sets": test_omp_wait_policy_and_the_log_handler_are_set_by_the_command_line_only,
    "the only place that shows": test_omp_wait_policy_and_the_log_handler_are_set_by_the_command_line_only,
    "the ONE declaration of the settings": test_the_embedding_settings_are_declared_once,
    "the ONE item -> PreparedItem path": test_items_are_prepared_and_pooled_in_one_place,
    "the ONE implementation of prompt": test_items_are_prepared_and_pooled_in_one_place,
    "the one dtype rule": test_the_dtype_rule_is_resolve_dtype,
    "the one regular-file check": test_one_regular_file_check,
    "the one text-cutting rule": test_one_text_cutting_rule,
    "the one model card writer": test_one_model_card_writer_and_one_adapter_config_reader,
    "the one adapter-config reader": test_one_model_card_writer_and_one_adapter_config_reader,
    "the one hub-id rule": test_one_hub_id_rule,
    "the only ValidationError": test_validation_errors_are_formatted_in_config_only,
    "the only `except ValidationError`": test_validation_errors_are_formatted_in_config_only,
    "the ONE image-URL fetcher": test_one_image_url_fetcher,
    "the one same-label rule": test_one_same_label_rule,
    "the one attention rule": test_one_attention_rule,
    "the one compile rule": test_one_compile_rule,
    "the ONE place where a batch's bookkeeping is computed": test_batch_bookkeeping_is_computed_in_vision_metadata_only,
    "the ONE format allow-list every input image is opened with": test_one_input_image_format_allow_list,
    "the one bbox-inside-image rule": test_one_bbox_inside_image_rule,
    "the one validator": test_one_item_validator_one_missing_extra_rule_one_cpuinfo_reader,
    "the one missing-extra rule": test_one_item_validator_one_missing_extra_rule_one_cpuinfo_reader,
    "the one /proc/cpuinfo reader": test_one_item_validator_one_missing_extra_rule_one_cpuinfo_reader,
    "the one bad-item rule": test_one_bad_item_rule,
    "the one pixel-order and decode-mode check": test_pixel_order_and_decode_modes_are_checked_by_the_config_only,
    "the one dataset -> revision table": test_one_dataset_revision_table,
    "the ONE frame rule": test_one_frame_rule,
    "the ONE adaptation decision": test_what_adaptation_a_model_holds_is_asked_of_the_adaptation_module,
    "the one save path": test_what_adaptation_a_model_holds_is_asked_of_the_adaptation_module,
    "the one peft probe": test_what_adaptation_a_model_holds_is_asked_of_the_adaptation_module,
    "the one kind registry": test_the_saved_adaptation_is_decided_by_the_kind_registry,
    "the one merge": test_what_adaptation_a_model_holds_is_asked_of_the_adaptation_module,
    "the one settings base": test_one_settings_base,
    "the one Matryoshka": test_one_matryoshka_width_rule,
    "the one index vocabulary": test_one_index_stack,
    "the one index chooser": test_one_index_stack,
    "the one index factory": test_one_index_stack,
    "the one tie rule": test_one_tie_rule_for_every_exact_search_of_gallery_search,
    "the one bytes-per-vector rule": test_one_index_stack,
    "the one rescore rule": test_one_index_stack,
    "the one IVF list formula": test_one_index_stack,
}
CLAIM = re.compile(r"\bthe (?:one|only|ONE)\b[^,;()]*", re.IGNORECASE)


def _doc_claims() -> Iterator[str]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    text = re.sub(r"```yaml.*?```", "", text, flags=re.DOTALL)  # examples' instruction texts claim nothing
    yield from (" ".join(match.group(0).split()) for match in CLAIM.finditer(text))


def test_every_one_claim_of_the_architecture_doc_has_its_check() -> None:
    unchecked = [claim for claim in _doc_claims() if not any(claim.startswith(key) or key.startswith(claim)
                                                             for key in CLAIMS)]
    assert unchecked == [], "a 'the one X' claim in docs/architecture.md needs a test in this file"
    stated = list(_doc_claims())
    assert [key for key in CLAIMS if not any(claim.startswith(key) for claim in stated)] == []

