"""EmbeddingModel: the ONE implementation of item -> prompt -> forward -> pooled vector.

Training (per GradCache chunk), encoding (Embedder) and evaluation all call this module, so
an item is embedded identically everywhere:

* ``prepare(items, instruction)`` -- CPU work per item: load the image (any mode -> RGB),
  build the prompt (see :mod:`vis_embed.model.prompts`) and run the Qwen processor on that one
  item (resize to min/max pixels, tokenise, expand the image placeholder).  No padding.
* ``collate(prepared)`` -- pad to the longest item of THIS list (tokenizer's padding side, or
  the one given) and concatenate the images' patches.  Output = the processor's keys,
  including ``mm_token_type_ids`` which transformers 5 needs for M-RoPE, plus the batch's
  bookkeeping computed on the host (:mod:`vis_embed.model.network.vision_metadata`).
* ``forward(**batch)`` -- run the *base* model (``model.model``: vision tower + decoder, not the
  LM head, so no full-vocabulary logits and no per-layer hidden states), pool the final hidden
  state at the last real token (any padding side), L2-normalise, return float32.
  Differentiable: no ``inference_mode`` here (the Embedder adds it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from safetensors import SafetensorError

from vis_embed.errors import ConfigError
from vis_embed.model.network.attention import (attention_name, load_attn_implementation, resolve_attn_implementation,
                                               set_attention)
from vis_embed.model.network.adaptation import (HeadAdaptation, LoraAdaptation, LoraOptions, adaptation_of,
                                                adapter_kind, attach_adapter, build_adaptation, has_lora,
                                                refuse_adapter_as_model)
from vis_embed.model.defaults import DTYPE_NAMES
from vis_embed.model.embedding_config import EmbeddingConfig, resolve_embedding_config
from vis_embed.model.network.patch_embedding import use_matmul_patch_embedding
from vis_embed.model.network.pooling import last_token_pool
from vis_embed.model.network.projection_head import ProjectionHead, load_exported_head
from vis_embed.model.inputs.preparer import (VIDEO_EXTRA_FIELDS, VISUAL_FIELDS, PreparedItem, Preparer, PreparesItems,
                                     token_limit)
from vis_embed.model.references import local_model_dir, looks_like_path, unreadable_weights
from vis_embed.model.network.rms_norm import use_fused_rms_norm
from vis_embed.model.network.vision_metadata import METADATA_KEY, describe_batch, pinned, run_base_model

if TYPE_CHECKING:
    from transformers import PreTrainedModel, ProcessorMixin


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def checked_device(device: str | torch.device | None) -> torch.device:
    """``device`` as a ``torch.device`` (None: :func:`default_device`).  A name torch does not know
    (``gpu``), or a CUDA device this machine lacks, is a ConfigError (was torch's traceback
    from inside the load)."""
    if device is None:
        return default_device()
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"unknown device {str(device)!r}; expected e.g. cpu, cuda or cuda:1") from None
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (resolved.index is not None and resolved.index >= count):
            raise ConfigError(f"device {str(device)!r} asked for, but this machine has {count} usable CUDA "
                              f"device(s)")
    return resolved


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device | None = None) -> torch.dtype | str:
    """The one dtype rule.  A ``torch.dtype`` as given, a name (``"bfloat16"``) as named; None or
    ``"auto"``: by device (bfloat16 on CUDA, float32 elsewhere; ``device`` default: the default
    device); ``"checkpoint"``: the checkpoint's own dtype, returned as transformers' spelling of
    it (the string ``"auto"``, which ``from_pretrained(dtype=...)`` takes)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        return torch.bfloat16 if (device or default_device()).type == "cuda" else torch.float32
    if dtype == "checkpoint":
        return "auto"
    resolved = getattr(torch, str(dtype), None)
    if not isinstance(resolved, torch.dtype):
        raise ConfigError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_NAMES)}")
    return resolved


def dtype_name(dtype: str | torch.dtype | None) -> str | None:
    """The name EmbeddingConfig records (``torch.float32`` -> ``"float32"``; float64 etc.: None)."""
    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
        return name if name in DTYPE_NAMES else None
    return dtype




class EmbeddingModel(torch.nn.Module, PreparesItems):
    """A Qwen-VL backbone (possibly peft-wrapped) + its processor, as an embedding model."""

    def __init__(self, backbone: torch.nn.Module, processor: ProcessorMixin,
                 embedding_config: EmbeddingConfig | None = None, *, name_or_path: str | None = None,
                 adapter: str | None = None, **settings: Any) -> None:
        super().__init__()
        # THE settings this model embeds with (dtype "auto" kept as a policy): prepare_one, the
        # preparer, the fingerprint and embedding_config.json all read this one object.
        # ``settings``: EmbeddingConfig fields over it (validated there, e.g. min <= max pixels).
        self.embedding_config = (embedding_config or EmbeddingConfig()).with_values(**settings)
        self.truncated_items = 0  # items whose text prepare_one cut to fit token_limit
        self.backbone = backbone
        use_matmul_patch_embedding(backbone)  # same numbers, a GEMM instead of oneDNN's conv
        use_fused_rms_norm(backbone)  # same numbers, torch's fused kernel instead of an element-wise chain
        self.head: ProjectionHead | None = None  # adaptation "head": applied after pooling
        self.processor = processor
        self.name_or_path = name_or_path
        self.adapter = adapter
        self.padding_side = getattr(processor.tokenizer, "padding_side", "right") or "right"
        tokenizer = processor.tokenizer
        self.pad_token_id = tokenizer.pad_token_id
        if self.pad_token_id is None:  # any id works: padded positions are masked out
            self.pad_token_id = tokenizer.convert_tokens_to_ids("<|endoftext|>") or 0
        # Over-long texts are cut explicitly and counted (prepare_one); the tokenizer's one-time
        # "sequence length is longer than the specified maximum" warning would only be noise.
        if isinstance(getattr(tokenizer, "deprecation_warnings", None), dict):
            tokenizer.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True

    # Read-only views of the config (what callers and results.json name); change the config instead.
    @property
    def prompt_format(self) -> str:
        return self.embedding_config.prompt_format

    @property
    def min_pixels(self) -> int:
        return self.embedding_config.min_pixels

    @property
    def max_pixels(self) -> int:
        return self.embedding_config.max_pixels

    @property
    def max_length(self) -> int | None:
        """The caller's token cap; None: the model's own (token_limit)."""
        return self.embedding_config.max_length

    @property
    def decode(self) -> str:
        """How images above the pixel budget are decoded (data/images.py)."""
        return self.embedding_config.decode

    @property
    def token_limit(self) -> int | None:
        """Most tokens one item may have: ``max_length``, else the model's own maximum (the
        tokenizer's ``model_max_length`` or the decoder's ``max_position_embeddings``)."""
        return token_limit(self.max_length, self.processor.tokenizer, getattr(self.backbone, "config", None))

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, adapter: str | Path | None = None,
                        device: str | torch.device | None = None, dtype: Any = None,
                        config: EmbeddingConfig | None = None, **settings: Any) -> EmbeddingModel:
        """Load a hub id or local checkpoint (and optionally a peft LoRA adapter or a projection
        head on top).  A local ``vis-embed export`` of a projection head brings its head along
        (the ``Dense`` module its ``modules.json`` lists: projection_head.load_exported_head).

        ``settings``: EmbeddingConfig fields by name (``prompt_format``, ``min_pixels``,
        ``max_length``, ``attn_implementation``, ...; an unknown name is a TypeError); those left
        at None: the adapter's recorded ``embedding_config.json`` > the base's > the default
        (:mod:`.embedding_config`).  ``dtype``: a name or a ``torch.dtype``.  ``config``: settings
        already resolved that way (the trainer's), used as they are.
        ``max_length`` cuts the end of an item's *text* (never instruction, template or image).
        ``decode``: ``"exact"`` or ``"fast"`` (images above the pixel budget decoded at a reduced scale).
        """
        from transformers import AutoModelForImageTextToText, AutoProcessor

        name = str(name_or_path)
        if looks_like_path(name) and not Path(name).expanduser().is_dir():
            raise ConfigError(f"model path not found: {name}")
        if looks_like_path(name):
            refuse_adapter_as_model(name)
        adapter = None if adapter is None else local_model_dir(adapter)  # a Hub id: its cached snapshot
        if config is None:
            config = resolve_embedding_config(name, adapter, dtype=dtype_name(dtype), **settings)
        device = checked_device(device)
        torch_dtype = resolve_dtype(dtype if isinstance(dtype, torch.dtype) else config.dtype, device)
        attn = resolve_attn_implementation(config.attn_implementation, device)
        try:
            processor = AutoProcessor.from_pretrained(name)
            backbone = AutoModelForImageTextToText.from_pretrained(
                name, dtype=torch_dtype, attn_implementation=load_attn_implementation(attn))
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigError(f"cannot load model {name!r}: {exc}") from exc
        except SafetensorError as exc:  # a truncated weights file: named, not a traceback
            raise unreadable_weights(f"{name} (its *.safetensors)", exc) from None
        set_attention(backbone, attn)
        # A head export's Dense module: without it the vectors would be the base's, not the export's.
        head = load_exported_head(name)
        if adapter is not None:  # a peft LoRA or a projection head, by its config file
            if head is not None:
                raise ConfigError(f"{name} is an export with a projection head (its modules.json); it is a "
                                  f"model of its own: load it without an adapter")
            backbone, head = attach_adapter(backbone, adapter, device)
        if head is not None:
            head = head.to(device).eval()
        backbone.to(device)
        backbone.eval()
        model = cls(backbone, processor, config, name_or_path=name, adapter=None if adapter is None else str(adapter))
        model.head = head
        return model

    def current_config(self, effective: bool = True) -> EmbeddingConfig:
        """The settings this model embeds with now.  ``effective``: dtype and attention kernel
        as resolved on this machine (what results record); else as policies (what is saved)."""
        update: dict[str, Any] = {"adaptation": adapter_kind(self) or self.embedding_config.adaptation}
        if effective:
            update["dtype"] = dtype_name(self.dtype)
            update["attn_implementation"] = attention_name(self.backbone) \
                or self.embedding_config.attn_implementation
        return self.embedding_config.model_copy(update=update)

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.backbone.parameters()).dtype

    @property
    def embedding_dim(self) -> int:
        if self.head is not None:
            return self.head.out_dim
        return int(self.base_model().config.text_config.hidden_size)

    def base_model(self) -> PreTrainedModel:
        """The Qwen-VL base model (vision tower + decoder, no LM head), LoRA layers included."""
        backbone = self.backbone
        if has_lora(backbone):  # peft wrapper: LoRA layers live inside
            backbone = backbone.get_base_model()
        return backbone.model

    # ------------------------------------------------------------------ adaptations
    def add_lora(self, options: LoraOptions | None = None, **fields: Any) -> None:
        """Wrap the backbone with a fresh peft LoRA adapter: ``options`` (or ``fields``: the
        recipe's ``lora:`` keys, :class:`~vis_embed.model.network.adaptation.LoraOptions`)."""
        build_adaptation("lora", lora=options or LoraOptions(**fields)).apply(self)

    def add_projection_head(self, out_dim: int | None = None) -> ProjectionHead:
        """Freeze the whole backbone and add a fresh trainable :class:`ProjectionHead`
        (identity-initialised: the vectors are unchanged until it trains)."""
        HeadAdaptation(out_dim).apply(self)
        assert self.head is not None
        return self.head

    def enable_gradient_checkpointing(self) -> None:
        """Recompute each block's activations in the backward pass instead of keeping them
        (non-reentrant, so LoRA's frozen base works); caching off.  Recent transformers name it
        ``activation_checkpointing_enable`` and deprecate the old name, which older ones need."""
        backbone = self.backbone
        if hasattr(backbone, "activation_checkpointing_enable"):
            backbone.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(backbone, "enable_input_require_grads"):
            backbone.enable_input_require_grads()
        if hasattr(backbone, "config"):
            backbone.config.use_cache = False

    def merge_adapter(self) -> None:
        """Fold the LoRA weights into the base weights (same vectors, no adapter overhead)."""
        adaptation = adaptation_of(self)
        if isinstance(adaptation, LoraAdaptation):
            adaptation.merge(self)
            # full weights now: recorded as `vis-embed merge` and save_pretrained record them
            self.embedding_config = self.embedding_config.model_copy(update={"adaptation": "full"})

    def save_pretrained(self, out_dir: str | Path) -> Path:
        """Adapter-only if peft-wrapped (peft format), the head only with a projection head,
        else full weights + processor; with ``embedding_config.json`` beside them, recording the
        kind saved (``adaptation``: lora, head or full, as the trainer records it)."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        adaptation = adaptation_of(self)
        adaptation.save(self, out_dir)  # the one save path (the trainer's checkpoints too)
        # the settings travel with the weights
        self.current_config(effective=False).model_copy(update={"adaptation": adaptation.kind}).save(out_dir)
        return out_dir

    # ------------------------------------------------------------------ items -> tensors
    def preparer(self) -> Preparer:
        """What preparing an item needs, without the weights (picklable: worker processes)."""
        dtype = self.dtype
        pixel_dtype = dtype_name(dtype) if dtype in (torch.bfloat16, torch.float16) else None
        return Preparer(self.processor, self.embedding_config, self.token_limit, pixel_dtype)

    def prepare(self, items: Sequence[dict[str, Any]], instruction: str | None = None,
                base_dir: str | Path | None = None) -> list[PreparedItem]:
        """Load images and build prompts; one :class:`PreparedItem` per item, unpadded."""
        return [self.prepare_one(item, instruction, base_dir) for item in items]

    def collate(self, prepared: Sequence[PreparedItem], padding_side: str | None = None,
                pin_memory: bool = False) -> dict[str, torch.Tensor]:
        """Pad to the longest item of ``prepared``; concatenate image patches in item order, and
        video patches (``pixel_values_videos`` / ``video_grid_thw``) likewise: a batch may mix
        image, video and text items (the model matches each kind's tokens to its patches in order).
        ``pin_memory``: the patches are gathered straight into page-locked memory, which a GPU
        copies from at full bus speed and without holding up the host (forward's copy); the
        other values are pinned too."""
        if not prepared:
            raise ValueError("cannot collate an empty list")
        side = padding_side or self.padding_side
        longest = max(p.length for p in prepared)
        input_ids = torch.full((len(prepared), longest), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prepared), longest), dtype=torch.long)
        mm_token_type_ids = torch.zeros((len(prepared), longest), dtype=prepared[0].mm_token_type_ids.dtype)
        for row, item in enumerate(prepared):
            span = slice(longest - item.length, longest) if side == "left" else slice(0, item.length)
            input_ids[row, span] = item.input_ids
            attention_mask[row, span] = 1
            mm_token_type_ids[row, span] = item.mm_token_type_ids
        batch = {"input_ids": input_ids, "attention_mask": attention_mask,
                 "mm_token_type_ids": mm_token_type_ids}
        for patches_name, grid_name in VISUAL_FIELDS:  # images, then videos: each kind in item order
            with_visual = [p for p in prepared if getattr(p, patches_name) is not None]
            if not with_visual:
                continue
            patches = [getattr(p, patches_name) for p in with_visual]
            if pin_memory:
                gathered = torch.empty((sum(len(p) for p in patches), *patches[0].shape[1:]),
                                       dtype=patches[0].dtype, pin_memory=True)
                batch[patches_name] = torch.cat(patches, out=gathered)
            else:
                batch[patches_name] = torch.cat(patches)
            batch[grid_name] = torch.cat([getattr(p, grid_name) for p in with_visual])
        with_videos = [p for p in prepared if p.pixel_values_videos is not None]
        for name in VIDEO_EXTRA_FIELDS:
            if with_videos and all(getattr(p, name) is not None for p in with_videos):
                batch[name] = torch.cat([getattr(p, name) for p in with_videos])
        # Every number the forward would otherwise read back from the device (model/network/vision_metadata.py).
        batch[METADATA_KEY] = describe_batch(self.base_model(), batch)
        if pin_memory:
            # Every value, not only the patches: a copy from pageable memory may wait for the GPU's
            # stream, which would stall a batch launched while the one before it runs (Embedder.encode).
            batch = {key: pinned(value) for key, value in batch.items()}
        return batch

    # ------------------------------------------------------------------ forward
    def forward(self, **batch: torch.Tensor) -> torch.Tensor:
        """(N, D) float32 L2-normalised embeddings; differentiable."""
        device = self.device
        # Asynchronous on a GPU: from pinned memory (collate) the copy overlaps the host's work.
        inputs = {key: value.to(device, non_blocking=device.type == "cuda") for key, value in batch.items()}
        metadata = inputs.pop(METADATA_KEY, None)
        visual = [name for name, _ in VISUAL_FIELDS if name in inputs]
        for name in visual:
            inputs[name] = inputs[name].to(self.dtype)
        if not visual and "position_ids" not in inputs and metadata is None:
            # Text-only batch: transformers would number positions from the first column,
            # offsetting left-padded rows.  RoPE is relative so the offset cancels in exact
            # arithmetic, but counting real tokens keeps each row's positions identical to
            # encoding it alone (M-RoPE's three axes coincide for text).
            positions = (inputs["attention_mask"].long().cumsum(-1) - 1).clamp(min=0)
            inputs["position_ids"] = positions.unsqueeze(0).expand(3, -1, -1)
        # A frozen backbone under a head needs no graph: only the head's parameters train.
        backbone_grad = torch.is_grad_enabled() and (self.head is None or self._backbone_trainable())
        with torch.set_grad_enabled(backbone_grad):
            if metadata is None:  # a batch not from collate (e.g. the processor's own): transformers' bookkeeping
                outputs = self.base_model()(**inputs, use_cache=False, return_dict=True)
            else:
                outputs = run_base_model(self.base_model(), inputs, metadata)
            last_index = None if metadata is None else metadata.last_index
            pooled = F.normalize(last_token_pool(outputs.last_hidden_state, inputs["attention_mask"], last_index)
                                 .float(), dim=-1)
        if self.head is not None:
            return F.normalize(self.head(pooled), dim=-1)
        return pooled

    def _backbone_trainable(self) -> bool:
        return any(parameter.requires_grad for parameter in self.backbone.parameters())

    def embed(self, items: Sequence[dict[str, Any]], instruction: str | None = None,
              base_dir: str | Path | None = None) -> torch.Tensor:
        """prepare + collate + forward in one call (one batch; grad follows the caller's mode)."""
        return self(**self.collate(self.prepare(items, instruction, base_dir)))

