"""Export a model (plus an optional LoRA adapter) as a sentence-transformers / vLLM directory.

A projection-head directory (``adaptation: head``, :mod:`vis_embed.model.network.projection_head`) as
``adapter`` exports the unchanged base plus ``Dense`` (identity activation) and ``Normalize``
modules after the base's: sentence-transformers applies the head.  Whether ``vllm serve``
applies it depends on vLLM's support for sentence-transformers ``Dense`` modules on Qwen-VL
(not tested here); without it vLLM would serve the base vectors.

``export_sentence_transformers(model, out, adapter=...)`` writes ONE directory that

* ``SentenceTransformer(out)`` loads with no custom code (modules: ``Transformer`` with the
  processor, last-token ``Pooling``, ``Normalize``; prompts ``query`` / ``document``), and
* ``vllm serve out --runner pooling --convert embed`` serves (a plain Qwen-VL checkpoint with
  the merged weights, the processor and a ``modules.json`` naming last-token pooling).

How the ``chat`` prompt format is reproduced.  vis_embed builds one user turn whose content is
the image (if any) followed by the text ``"<instruction> <text>"``, then the generation prompt
(:mod:`vis_embed.model.prompts`).  sentence-transformers instead sends a prompt (the
instruction) as a *system* message before the user turn.  The export therefore prepends
:data:`INSTRUCTION_TEMPLATE_PREFIX` to the processor's own chat template: it folds the system
message's text into the first user turn as ``"<instruction> <text>"`` (images first, both parts
stripped, empty parts left out) and then runs the original template unchanged, so the default
system block, role tokens and generation prompt are the checkpoint's own.  The
``add_generation_prompt`` flag is stored in ``sentence_bert_config.json``'s
``processing_kwargs``, and the pixel budget in the processor's image-processor ``size``.

The library half of ``vis-embed export`` (command line in :mod:`vis_embed.model.cli`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vis_embed.errors import ConfigError, DataError
from vis_embed.vectors.transforms import check_matryoshka_dims, vllm_matryoshka_fields
from vis_embed.io import atomic_directory, atomic_write_bytes, atomic_write_json
from vis_embed.model.network.adaptation import FullAdaptation, refuse_adapter_as_model, saved_adapter
from vis_embed.model.embedding_config import (EMBEDDING_CONFIG_FILE, EmbeddingConfig, read_embedding_config,
                                              resolve_embedding_config)
from vis_embed.model.defaults import CHECKPOINT_MARKER
from vis_embed.model.references import local_model_dir, looks_like_path, unreadable_weights

if TYPE_CHECKING:
    from transformers import ProcessorMixin

    from vis_embed.model.network.projection_head import ProjectionHead

EXPORT_FORMATS = ("sentence-transformers",)
# The identity task's instructions (vis_embed.prep.synth's "identity" pair): what the quickstart trains.
DEFAULT_QUERY_INSTRUCTION = "Find the same object as the one in the given image."
DEFAULT_DOCUMENT_INSTRUCTION = "Represent the given image."
# Why a token cap is not exported: the two cut different tokens, so the vectors of long items would differ.
UNEXPORTED_MAX_LENGTH = ("sentence-transformers cuts an item's tokens at the end (the generation prompt "
                         "and image tokens too), vis_embed only the end of the item's text")
# What an export prompts with when no embedding_config.json records the instruction (a base
# vis_embed never trained): the quickstart's task.
DEFAULT_INSTRUCTIONS = {"query_instruction": DEFAULT_QUERY_INSTRUCTION,
                        "document_instruction": DEFAULT_DOCUMENT_INSTRUCTION}

# Jinja prepended to the checkpoint's chat template (see the module docstring).  A top-level
# ``set messages`` shadows the caller's messages for the original template that follows.
INSTRUCTION_TEMPLATE_PREFIX = """\
{#- vis_embed export: a leading system message is the instruction; it joins the first user
    turn's text as "<instruction> <text>" (images first), vis_embed's "chat" prompt format. -#}
{%- set ns = namespace(instruction='', rebuilt=[], first_user=true) -%}
{%- set source = messages -%}
{%- if source and source[0]['role'] == 'system' -%}
{%- if source[0]['content'] is string -%}{%- set ns.instruction = source[0]['content'] -%}
{%- else -%}{%- for part in source[0]['content'] -%}{%- if part['type'] == 'text' -%}\
{%- set ns.instruction = ns.instruction + part['text'] -%}{%- endif -%}{%- endfor -%}{%- endif -%}
{%- set source = source[1:] -%}
{%- endif -%}
{%- for message in source -%}
{%- if message['role'] == 'user' -%}
{%- set parts = namespace(media=[], texts=[]) -%}
{%- if message['content'] is string -%}{%- set parts.texts = [message['content']] -%}
{%- else -%}{%- for part in message['content'] -%}
{%- if part['type'] == 'text' -%}{%- set parts.texts = parts.texts + [part['text']] -%}\
{%- else -%}{%- set parts.media = parts.media + [part] -%}{%- endif -%}
{%- endfor -%}{%- endif -%}
{%- set pieces = ([ns.instruction] if ns.first_user else []) + parts.texts -%}
{%- set ns.first_user = false -%}
{%- set body = pieces | map('trim') | select | join(' ') -%}
{%- set ns.rebuilt = ns.rebuilt + [{'role': 'user', 'content': parts.media + \
([{'type': 'text', 'text': body}] if body else [])}] -%}
{%- else -%}{%- set ns.rebuilt = ns.rebuilt + [message] -%}{%- endif -%}
{%- endfor -%}
{%- set messages = ns.rebuilt -%}
"""


def check_base_exists(base: str, recorded_in: Path | None = None) -> None:
    """Fail at once (not after minutes of hub retries) when a path-like base is missing."""
    if looks_like_path(base) and not Path(base).expanduser().is_dir():
        where = f" (recorded in {recorded_in})" if recorded_in is not None else ""
        raise ConfigError(f"base model not found: {base}{where}; pass --base with the base "
                          "checkpoint's directory or hub id")


def recorded_base(base: str | None, adapter_dir: Path | None) -> str:
    """``base``, else the adapter's recorded base (checked to exist when it is a path)."""
    if base is None:
        if adapter_dir is None:
            raise ConfigError("no model given")
        adaptation = saved_adapter(adapter_dir)
        base = adaptation.base_model(adapter_dir)
        check_base_exists(base, adapter_dir / adaptation.config_file)
    else:
        check_base_exists(base)
        if looks_like_path(base):
            refuse_adapter_as_model(base)  # a run's final/ given as the model
    return base


def load_folded(base: str | None, adapter: str | Path | None = None,
                dtype: Any = "checkpoint") -> tuple[Any, ProjectionHead | None, Any]:
    """``(model, head, processor)``: ``base`` with the adapter saved in ``adapter`` made standalone
    by its adaptation object (``Adaptation.fold``: a LoRA merged into the weights; a projection
    head returned beside the unchanged base); the base is the adapter's if None.

    ``dtype``: the written weights' dtype, by the one rule (``embedding_model.resolve_dtype``):
    "checkpoint" (default) keeps the checkpoint's own, "auto" is by device (float32 on CPU).
    """
    adapter_dir = None if adapter is None else local_model_dir(adapter)
    adaptation = None if adapter_dir is None else saved_adapter(adapter_dir)  # a clear error first
    model, processor = _load_base(recorded_base(base, adapter_dir), dtype)
    head = None
    if adaptation is not None:
        model, head = adaptation.fold(model, adapter_dir)
    model.eval()
    return model, head, processor


def load_merged(base: str | None, adapter: str | Path | None = None,
                dtype: Any = "checkpoint") -> tuple[Any, Any]:
    """``(model, processor)``: ``base`` with the LoRA ``adapter`` merged in (:func:`load_folded`);
    a projection head is refused (it is no weights of the base: ``vis-embed export`` ships it)."""
    if adapter is not None and not saved_adapter(adapter).merges:
        raise ConfigError(f"{adapter}: a projection head is not merged into the base's weights; "
                          "`vis-embed export --adapter` ships it as a sentence-transformers Dense module")
    model, _, processor = load_folded(base, adapter, dtype)
    return model, processor


def _load_base(base: str, dtype: Any) -> tuple[Any, Any]:
    """``(model, processor)`` of the checkpoint ``base`` (never the hub for a path)."""
    from safetensors import SafetensorError
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from vis_embed.model.network.embedding_model import resolve_dtype
    from vis_embed.model.network.projection_head import load_exported_head

    if looks_like_path(base) and load_exported_head(base) is not None:  # its head would be dropped
        raise ConfigError(f"{base} is an export with a projection head; merge or export the base it was "
                          "built from, with --adapter HEAD_DIR")
    torch_dtype = resolve_dtype(dtype or "checkpoint")
    local_only = looks_like_path(base)  # a path never needs the hub: no network retries
    try:
        model = AutoModelForImageTextToText.from_pretrained(base, dtype=torch_dtype,
                                                            local_files_only=local_only)
        processor = AutoProcessor.from_pretrained(base, local_files_only=local_only)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"cannot load base model {base!r}: {exc}") from exc
    except SafetensorError as exc:  # a truncated weights file: named, not a traceback
        raise unreadable_weights(f"{base} (its *.safetensors)", exc) from None
    return model, processor


def sentence_transformers_files(embedding_dim: int, query_instruction: str | None,
                                document_instruction: str | None) -> dict[str, Any]:
    """The sentence-transformers module files (relative path -> JSON object)."""
    prompts = {name: text for name, text in (("query", query_instruction),
                                            ("document", document_instruction)) if text}
    module = "sentence_transformers.{}"
    return {
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": module.format("base.modules.transformer.Transformer")},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": module.format("sentence_transformer.modules.pooling.Pooling")},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": module.format("base.modules.normalize.Normalize")},
        ],
        "sentence_bert_config.json": {
            "transformer_task": "feature-extraction",
            # Written out (not inferred at load time): without it sentence-transformers falls
            # back to text-only tokenisation with no chat template.
            "modality_config": {
                **{modality: {"method": "forward", "method_output_name": "last_hidden_state"}
                   for modality in ("text", "image")},
                "message": {"method": "forward", "method_output_name": "last_hidden_state",
                            "format": "structured"},
            },
            "module_output_name": "token_embeddings",
            # The embedding is read after the generation prompt, as vis_embed's "chat" format does.
            "processing_kwargs": {"chat_template": {"add_generation_prompt": True}},
        },
        # Both spellings of last-token pooling: sentence-transformers >= 6 reads pooling_mode,
        # vLLM (and older sentence-transformers) the pooling_mode_* flags.
        "1_Pooling/config.json": {
            "embedding_dimension": embedding_dim, "pooling_mode": "lasttoken", "include_prompt": True,
            "pooling_mode_lasttoken": True,
            "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False,
            "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
            "pooling_mode_weightedmean_tokens": False,
        },
        "2_Normalize/config.json": {"module_input_name": "sentence_embedding",
                                    "module_output_name": "sentence_embedding"},
        "config_sentence_transformers.json": {
            "model_type": "SentenceTransformer", "prompts": prompts, "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    }


def prepare_processor(processor: ProcessorMixin, min_pixels: int, max_pixels: int) -> ProcessorMixin:
    """The processor as the export ships it: vis_embed's pixel budget and instruction template."""
    template = getattr(processor, "chat_template", None)
    if not template:
        raise ConfigError("the model's processor has no chat template; the sentence-transformers "
                          "export reproduces the 'chat' prompt format only")
    if INSTRUCTION_TEMPLATE_PREFIX not in template:
        processor.chat_template = INSTRUCTION_TEMPLATE_PREFIX + template
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is not None:
        image_processor.size = {"shortest_edge": int(min_pixels), "longest_edge": int(max_pixels)}
    return processor


def export_sentence_transformers(model: str | None, out: str | Path, adapter: str | Path | None = None,
                                 query_instruction: str | None = None, document_instruction: str | None = None,
                                 min_pixels: int | None = None, max_pixels: int | None = None,
                                 dtype: Any = None, finish: Callable[[Path], None] | None = None,
                                 **settings: Any) -> Path:
    """Write the merged checkpoint + sentence-transformers files to ``out`` (atomically).
    ``finish`` is called with the folder being built, once the model is in it and before it
    becomes ``out``: what it writes there (the CLI's model card) lands with the model or not at all.

    Settings left at None (instructions, pixels, ``settings``: other EmbeddingConfig fields)
    take the adapter's / base's recorded ``embedding_config.json``, else the defaults (the
    instructions: :func:`export_instruction`; "" = no prompt).
    ``dtype``: the written weights' (default "checkpoint": the base checkpoint's own); the
    recorded dtype policy is the model's, not this.  The effective settings are written as the
    export's ``embedding_config.json``.
    """
    adapter = None if adapter is None else local_model_dir(adapter)  # a Hub id: its cached snapshot
    base = recorded_base(model, adapter)  # the adapter's recorded base when no model is given: an input too
    # ``out`` checked first (a folder of other files, or holding the models read, is refused), then built
    with atomic_directory(out, marker=CHECKPOINT_MARKER, what="a model checkpoint",
                          inputs=[path for path in (base, adapter) if path is not None]) as tmp:
        # ``dtype`` is the written weights' only, not the recorded policy (merge's rule)
        config = export_config(model, adapter, query_instruction=query_instruction,
                               document_instruction=document_instruction, min_pixels=min_pixels,
                               max_pixels=max_pixels, **settings)
        # a LoRA merged into the weights; a projection head beside the base, as a Dense module
        merged, head, processor = load_folded(model, adapter, dtype)
        processor = prepare_processor(processor, config.min_pixels, config.max_pixels)
        embedding_dim = int(merged.config.get_text_config().hidden_size)
        # vLLM reads these from config.json: it then serves `dimensions` (vis_embed/vectors/transforms.py)
        full_width = head.out_dim if head is not None else embedding_dim
        check_exported_widths(config.matryoshka_dims, full_width)
        merged.config.update(vllm_matryoshka_fields(config.matryoshka_dims, full_width))
        merged.save_pretrained(str(tmp), safe_serialization=True)
        processor.save_pretrained(str(tmp))
        files = sentence_transformers_files(embedding_dim, config.query_instruction, config.document_instruction)
        if head is not None:
            _add_head_modules(tmp, files, head)
        for relative, content in files.items():
            atomic_write_json(tmp / relative, content)
        config.save(tmp)
        if finish is not None:
            finish(tmp)
    return Path(out)


def check_exported_widths(dims: list[int] | None, full_width: int) -> None:
    """Refuse recorded Matryoshka widths above the model's: vLLM would list ``dimensions`` the
    model cannot give (the one rule: ``check_matryoshka_dims``)."""
    if dims:
        try:
            check_matryoshka_dims(dims, full_width)
        except DataError as exc:
            raise ConfigError(f"{EMBEDDING_CONFIG_FILE} (recorded): matryoshka_dims {dims}: {exc.reason}; "
                              "fix the record before exporting") from None


def export_config(model: str | None, adapter: str | Path | None, **given: Any) -> EmbeddingConfig:
    """The export's settings: given > recorded (adapter's over base's) > defaults, checked to
    be what the sentence-transformers layout can reproduce (the ``chat`` prompt format)."""
    base = model
    if base is None and adapter is not None:
        base = saved_adapter(adapter).base_model(Path(adapter).expanduser())
    if given.get("max_length") is not None:
        raise ConfigError(f"--max-length {given['max_length']}: {UNEXPORTED_MAX_LENGTH}; export without it")
    config = resolve_embedding_config(base, adapter, **given)
    if config.prompt_format != "chat":
        raise ConfigError(f"the model's prompt_format is {config.prompt_format!r} (recorded in its "
                          "embedding_config.json or given); the sentence-transformers export reproduces "
                          "the 'chat' prompt format only")
    update = {key: export_instruction(key, given.get(key), base, adapter) for key in DEFAULT_INSTRUCTIONS}
    if config.max_length is not None:  # recorded (trained with it): the export's own record says what it does
        warnings.warn(f"the recorded max_length {config.max_length} is not exported ({UNEXPORTED_MAX_LENGTH}); "
                      "the export's embedding_config.json records none", stacklevel=2)
        update["max_length"] = None
    return config.model_copy(update={**update, "adaptation": FullAdaptation.kind})  # full weights (+ ST modules)


def export_instruction(key: str, given: str | None, base: str | Path | None, adapter: str | Path | None) -> str:
    """The prompt ``key`` exports ("" = none): given > recorded (the adapter's file over the
    base's) > the default when no file records the key.  A recorded null is refused: training
    records it when its datasets had different instructions (and runs before "" was recorded
    for "none" wrote it for no instruction), so the default would be a prompt the model never saw."""
    if given is not None:
        return given
    for directory in (adapter, base):
        recorded = read_embedding_config(directory)
        if key not in recorded:
            continue
        if recorded[key] is None:
            path = Path(str(directory)).expanduser() / EMBEDDING_CONFIG_FILE
            raise ConfigError(f"{path}: records {key}: null (the training datasets had different instructions, "
                              f"or, in older runs, none); pass --{key.replace('_', '-')} TEXT ('' for no prompt)")
        return recorded[key]
    return DEFAULT_INSTRUCTIONS[key]


def _add_head_modules(directory: Path, files: dict[str, Any], head: ProjectionHead) -> None:
    """Append the projection head (Dense + Normalize) to the module files; write its weights."""
    from safetensors.torch import save

    from vis_embed.model.network.projection_head import sentence_transformers_head_files

    entries, configs, weights = sentence_transformers_head_files(head, first_index=len(files["modules.json"]))
    files["modules.json"] = files["modules.json"] + entries
    files.update(configs)
    dense_dir = directory / entries[0]["path"]
    dense_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(dense_dir / "model.safetensors", save(weights))
