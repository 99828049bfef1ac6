"""A vis_embed model as an mteb 2.x encoder (MTEB and its image extension MIEB).

``VisEmbedMtebModel`` is what ``mteb.evaluate`` takes: it implements mteb's
``EncoderProtocol`` (``encode`` over a DataLoader of batched dicts, ``similarity``,
``mteb_model_meta``) on top of :class:`vis_embed.model.runtime.embedder.Embedder`.  A DataLoader's
batches are gathered into one list of items and encoded with ONE ``Embedder.encode`` call, so
everything Embedder does (length-sorted exact batches, the prefetching worker, the item
contract, NaN checks) holds here too; mteb's batch size only sets how its loader chunks rows.

Inputs: mteb hands ``text`` (str) and/or ``image`` (PIL image, or a path string) columns;
a row is one item with whichever of the two it has (text + image = an image+text item).
The manifest tasks of :mod:`vis_embed.integrations.mteb_tasks` add a ``vis_embed_item``
column holding the exact item ``vis-embed eval`` encodes (image path, text, bbox), which
wins when present.

Instructions (``instruction_for``), first match wins:
1. the user's YAML mapping (``--instructions``): ``TASK: {query: ..., document: ...}``
   (a plain string is the query instruction);
2. the task's own prompt (a manifest task carries its manifest's ``query_instruction`` /
   ``candidate_instruction``; a registered mteb task may define one);
3. for queries, mteb's default prompt of the task type; documents get none (the model's
   plain "represent" prompt), as vis_embed's candidate side of a retrieval manifest.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from vis_embed.errors import ConfigError, DataError
from vis_embed.integrations import require
from vis_embed.io import fingerprint_json, is_hub_id, read_text
from vis_embed.model.references import hub_repo_of
from vis_embed.vectors.stored_form import StoredForm
from vis_embed.vectors.transforms import truncate

require("mteb", "mteb", "the mteb integration")

from mteb.models.abs_encoder import AbsEncoder  # noqa: E402  (after the extra's check)
from mteb.models.model_meta import ModelMeta, ScoringFunction  # noqa: E402
from mteb.types import PromptType  # noqa: E402

if TYPE_CHECKING:
    from mteb.abstasks.task_metadata import TaskMetadata

    from vis_embed.model.runtime.embedder import Embedder

ITEM_COLUMN = "vis_embed_item"   # JSON of the exact vis_embed item of a row (manifest tasks)
PROMPT_TYPES = ("query", "document")


def load_instructions(path: str | Path) -> dict[str, dict[str, str]]:
    """The per-task instruction overrides of a YAML file: ``{task: {query?, document?}}``."""
    path = Path(path)
    try:
        document = yaml.safe_load(read_text(path)) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}".splitlines()[0]) from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: expected a mapping TASK: {{query: ..., document: ...}}")
    mapping: dict[str, dict[str, str]] = {}
    for task, value in document.items():
        if isinstance(value, str):
            value = {"query": value}
        if not isinstance(value, dict) or not value:
            raise DataError("expected an instruction string or {query: ..., document: ...}", path=path,
                            field=str(task))
        for key, text in value.items():
            if key not in PROMPT_TYPES:
                raise DataError(f"unknown prompt type {key!r} (expected query or document)", path=path,
                                field=f"{task}.{key}")
            if not isinstance(text, str) or not text.strip():
                raise DataError("expected a non-empty string", path=path, field=f"{task}.{key}")
        mapping[str(task)] = dict(value)
    return mapping


class VisEmbedMtebModel(AbsEncoder):
    """An :class:`Embedder` as an mteb encoder (text, image and image+text inputs)."""

    def __init__(self, embedder: Embedder, *, name: str | None = None,
                 instructions: Mapping[str, Mapping[str, str]] | None = None,
                 batch_size: int = 16, show_progress: bool = False, dim: int | None = None) -> None:
        self.embedder = embedder
        # Matryoshka width (--dim): vectors cut and renormalised (vectors/transforms.py); a new model for mteb
        self.dim = None if dim is None else StoredForm(dim=dim).checked(
            embedder.embedding_dim, embedder.embedding_config).dim
        self.model = embedder  # mteb's AbsEncoder reads `model` for an optional similarity()
        self.instructions = {task: dict(value) for task, value in (instructions or {}).items()}
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.mteb_model_meta = model_meta(embedder, name, self.dim)

    @classmethod
    def from_pretrained(cls, model: str | Path, adapter: str | Path | None = None, *,
                        instructions: str | Path | Mapping[str, Mapping[str, str]] | None = None,
                        name: str | None = None, batch_size: int = 16, show_progress: bool = False,
                        dim: int | None = None, **overrides: Any) -> VisEmbedMtebModel:
        """Load ``model`` (+ ``adapter``) as ``vis-embed eval`` does (overrides: prompt_format,
        max_pixels, device, ... when not None); ``instructions``: a YAML path or a mapping."""
        from vis_embed.model.runtime.embedder import load_embedder

        if isinstance(instructions, (str, Path)):
            instructions = load_instructions(instructions)
        embedder = load_embedder(model, adapter, **overrides)
        return cls(embedder, name=name, instructions=instructions, batch_size=batch_size,
                   show_progress=show_progress, dim=dim)

    # ------------------------------------------------------------------ instructions
    def instruction_for(self, task_metadata: TaskMetadata, prompt_type: PromptType | None) -> str | None:
        """The instruction items of ``task_metadata``'s ``prompt_type`` side are encoded with."""
        side = prompt_type.value if prompt_type is not None else "query"
        override = self.instructions.get(task_metadata.name)
        if override is not None and side in override:
            return override[side]
        prompt = task_metadata.prompt
        if isinstance(prompt, dict):
            return prompt.get(side) or None
        if isinstance(prompt, str) and prompt:
            return prompt if side == "query" else None
        if side == "document":
            return None
        return self.get_instruction(task_metadata, prompt_type) or None

    # ------------------------------------------------------------------ encoding
    def encode(self, inputs: Iterable[Mapping[str, Any]], *, task_metadata: TaskMetadata, hf_split: str,
               hf_subset: str, prompt_type: PromptType | None = None, **kwargs: Any) -> np.ndarray:
        items = [item for batch in inputs for item in batch_items(batch)]
        if not items:
            return np.zeros((0, self.dim or self.embedder.embedding_dim), dtype=np.float32)
        return truncate(self.embedder.encode(items, instruction=self.instruction_for(task_metadata, prompt_type),
                                    batch_size=int(kwargs.get("batch_size") or self.batch_size),
                                    show_progress=bool(kwargs.get("show_progress_bar", self.show_progress))),
                        self.dim)


def batch_items(batch: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The vis_embed items of one mteb batch (a dict of equally long columns)."""
    if ITEM_COLUMN in batch:
        return [json.loads(encoded) for encoded in batch[ITEM_COLUMN]]
    texts, images = batch.get("text"), batch.get("image")
    size = len(texts if texts is not None else images if images is not None else [])
    items = []
    for row in range(size):
        item: dict[str, Any] = {}
        if images is not None and images[row] is not None:
            item["image"] = images[row]
        if texts is not None and isinstance(texts[row], str) and texts[row].strip():
            item["text"] = texts[row]
        items.append(item)  # an empty item is Embedder's to refuse, naming its position
    return items


def model_meta(embedder: Embedder, name: str | None = None, dim: int | None = None) -> ModelMeta:
    """The ModelMeta mteb records with every result: name, revision (the weights+adapter+
    prompt fingerprint), embedding size, parameters, modalities, cosine similarity."""
    model = embedder.model
    base = str(model.name_or_path)
    if name is None:  # mteb wants "organization/model"; an adapter makes it another model than its base
        if model.adapter:
            adapter = hub_repo_of(model.adapter) or str(model.adapter)  # a Hub adapter: its repo, not its commit
            name = f"vis_embed/{Path(base).name}+{Path(adapter).name}"
        else:
            name = base if is_hub_id(base) else f"vis_embed/{Path(base).name}"
    elif "/" not in name:
        name = f"vis_embed/{name}"
    if dim is not None and dim != embedder.embedding_dim:
        name = f"{name}-dim{dim}"  # its own results folder: another width is another model
    revision = embedder.fingerprint() if dim is None else fingerprint_json([embedder.fingerprint(), dim])
    return ModelMeta(
        loader=None, name=name, revision=revision[:16], release_date=None, languages=None,
        n_parameters=sum(p.numel() for p in model.parameters()), memory_usage_mb=None, max_tokens=None,
        embed_dim=dim or embedder.embedding_dim, license=None, open_weights=True, public_training_code=None,
        public_training_data=None, framework=["PyTorch", "Transformers"], similarity_fn_name=ScoringFunction.COSINE,
        use_instructions=True, training_datasets=None, adapted_from=base if model.adapter else None,
        modalities=["image", "text"],
    )
