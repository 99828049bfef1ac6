"""What a Qwen-VL forward would read back from the device, computed on the host at collation.

transformers' Qwen2-VL / Qwen2.5-VL / Qwen3-VL forward derives a batch's bookkeeping from its
grids (``image_grid_thw`` rows are (t, h, w)) on the device and reads it back to the host:
``grid_thw.tolist()`` for the vision rotary positions and windows, ``.item()`` for
``max_seqlen`` and in the decoder's M-RoPE index (``get_rope_index``: one per image), the split
sizes of ``get_image_features``, the padding mask's "can the mask be skipped" test and the
pooling's "every row has a token" check -- about 30 host reads per forward of a small batch,
each a stall of the GPU's queue.  The collation has every number on the host already, so
:func:`describe_batch` computes all of it there, with transformers' own functions
(``transformers.vision_utils`` and the model's ``get_rope_index``, called on CPU tensors: the
same code, so the same integers), and :func:`run_base_model` hands it to the model on the
device through the keyword arguments those functions pop when given (``cu_seqlens``,
``position_ids``, ``window_index``, ...), the model's ``mm_encoder_outputs`` and a prepared
4D decoder mask.  What is left in the forward: one read per visual modality (transformers'
check that the visual tokens match the features).  Images and clips of one batch go through
the vision tower in one call (their patches have one width), so each vision block attends
once per batch, whatever it mixes.  On several ranks a batch without any runs the tower on a
dummy where the ranks' collectives need it (:func:`vision_tower_dummy`).

Generic over modalities (``image``, ``video``): a modality is there when its
``{modality}_grid_thw`` is in the batch; its patches are :data:`PIXEL_KEYS` ``[modality]``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch

from vis_embed.model.network.pooling import last_token_index

if TYPE_CHECKING:
    from collections.abc import Callable

    from transformers import PreTrainedModel
    from transformers.utils import ModelOutput

# Key under which collate() puts the metadata into a batch (forward pops it).
METADATA_KEY = "vis_embed_metadata"
# The patches of each modality (transformers' names).
PIXEL_KEYS = {"image": "pixel_values", "video": "pixel_values_videos"}
# Batch keys get_rope_index takes besides the grids (Qwen2.5-VL's video timing).
ROPE_EXTRA_KEYS = ("second_per_grid_ts",)


class BatchMetadata:
    """The host-computed bookkeeping of one collated batch (``.to(device)`` like a tensor, so
    code that moves a batch's values moves it too).  A plain class, not a dataclass: DDP's
    input mover passes it through untouched and the forward moves it."""

    def __init__(self, vision: dict[str, Any], segment_lengths: dict[str, list[int]],
                 visual_tokens: dict[str, int], position_ids: torch.Tensor, padded: bool,
                 last_index: torch.Tensor) -> None:
        self.vision = vision  # keyword arguments of the ONE vision-tower call (every modality's grids)
        self.segment_lengths = segment_lengths  # cu-seqlens key -> host segment lengths
        self.visual_tokens = visual_tokens  # modality -> its merged tokens, in PIXEL_KEYS order
        self.position_ids = position_ids  # (3, batch, length): the decoder's M-RoPE positions
        self.padded = padded  # some row has padding: the decoder needs its mask
        self.last_index = last_index  # (batch,): each row's last real token

    def to(self, device: torch.device | str, non_blocking: bool = False) -> BatchMetadata:
        return self._mapped(lambda tensor: tensor.to(device, non_blocking=non_blocking),
                            vision=vision_on(self.vision, self.segment_lengths, device, non_blocking))

    def pin_memory(self) -> BatchMetadata:
        """Its tensors in page-locked memory (as ``Tensor.pin_memory``): a copy from pageable
        memory may wait for the GPU's stream, so a batch launched while the previous one still
        runs must come from pinned memory to overlap it (EmbeddingModel.collate)."""
        return self._mapped(pinned)

    def _mapped(self, function: Callable[[torch.Tensor], torch.Tensor],
                vision: dict[str, Any] | None = None) -> BatchMetadata:
        """The same metadata with ``function`` applied to each of its tensors (``vision``: its
        vision keywords mapped already)."""
        return BatchMetadata(_tensors_mapped(self.vision, function) if vision is None else vision,
                             self.segment_lengths, self.visual_tokens, _tensor_mapped(self.position_ids, function),
                             self.padded, _tensor_mapped(self.last_index, function))


def vision_on(vision: dict[str, Any], segment_lengths: dict[str, list[int]], device: torch.device | str,
              non_blocking: bool = False) -> dict[str, Any]:
    """The vision-tower keywords ``vision`` (:func:`vision_kwargs`) with their tensors on ``device``,
    the host lengths of the moved boundaries told to the CPU attention path
    (model/network/attention.py), so its row plan needs no read either: ``BatchMetadata.to``'s
    move of a batch's vision, and :func:`vision_tower_dummy`'s of its dummy's."""
    from vis_embed.model.network.packed_rows import remember_segment_lengths

    moved = _tensors_mapped(vision, lambda tensor: tensor.to(device, non_blocking=non_blocking))
    for key, values in segment_lengths.items():
        remember_segment_lengths(moved[key], values)
    return moved


def _tensors_mapped(values: dict[str, Any], function: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, Any]:
    return {key: _tensor_mapped(value, function) for key, value in values.items()}


def _tensor_mapped(value: Any, function: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    return function(value) if isinstance(value, torch.Tensor) else value


def pinned(value: Any) -> Any:
    """``value`` in page-locked memory: a tensor (made contiguous first: pinning an expanded
    tensor copies into one with its stride-0 layout, which torch refuses) or anything with a
    ``pin_memory`` method (:class:`BatchMetadata`); pinned already: itself."""
    if isinstance(value, torch.Tensor):
        return value if value.is_pinned() else value.contiguous().pin_memory()
    return value.pin_memory()


def describe_batch(base_model: PreTrainedModel, batch: dict[str, Any]) -> BatchMetadata:
    """The metadata of a collated CPU ``batch`` for a Qwen-VL base model (vision tower +
    decoder; ``EmbeddingModel.base_model()``).  A batch of images and clips is described as ONE
    vision-tower call over both kinds' grids (images first): each block then attends once for
    the whole batch, whatever it mixes."""
    grids = {modality: batch[f"{modality}_grid_thw"] for modality in PIXEL_KEYS
             if batch.get(f"{modality}_grid_thw") is not None}
    vision: dict[str, Any] = {}
    segments: dict[str, list[int]] = {}
    if grids:
        vision, segments = vision_kwargs(base_model.visual, torch.cat(list(grids.values())))
    merge = int(base_model.visual.spatial_merge_size) ** 2
    tokens = {modality: int(grid.prod(dim=-1).sum()) // merge for modality, grid in grids.items()}
    mask = batch["attention_mask"]
    return BatchMetadata(vision, segments, tokens, decoder_positions(base_model, batch, grids),
                         padded=not bool(mask.all()), last_index=last_token_index(mask))


def vision_kwargs(visual: torch.nn.Module, grid_thw: torch.Tensor) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """Keyword arguments that replace the vision tower's own bookkeeping for ``grid_thw`` (CPU),
    and the host lengths of each boundary tensor among them."""
    from transformers import vision_utils

    grid = grid_thw.cpu()
    merge = int(visual.spatial_merge_size)
    kwargs: dict[str, Any] = {"position_ids": vision_utils.get_vision_position_ids(grid, merge),
                              "cu_seqlens": vision_utils.get_vision_cu_seqlens(grid)}
    if hasattr(visual, "window_size"):  # Qwen2.5-VL: windowed blocks between the full ones
        kwargs["window_index"], kwargs["cu_window_seqlens"] = vision_utils.get_vision_window_index(
            grid, spatial_merge_size=merge, window_size=visual.window_size, patch_size=visual.patch_size)
    if hasattr(visual, "num_grid_per_side"):  # Qwen3-VL: a learned position grid, resampled per image
        kwargs["interp_indices"], kwargs["interp_weights"] = \
            vision_utils.get_vision_interpolation_indices_and_weights(
                grid, num_grid_per_side=visual.num_grid_per_side, mode=visual.interpolation_mode,
                align_corners=visual.interpolation_align_corners, spatial_merge_size=merge)
    lengths: dict[str, list[int]] = {}
    for key, max_key in (("cu_seqlens", "max_seqlen"), ("cu_window_seqlens", "max_window_seqlen")):
        if key in kwargs:
            lengths[key] = (kwargs[key][1:] - kwargs[key][:-1]).tolist()
            kwargs[max_key] = max(lengths[key], default=0)
    return kwargs, lengths


def vision_tower_dummy(visual: torch.nn.Module) -> dict[str, Any]:
    """For a batch without images or videos, where the ranks need it (else ``{}``): the vision
    tower ``visual`` run on a dummy and its output cut to nothing, as the ``mm_encoder_outputs``
    of :func:`run_base_model` (no visual token takes it: the same vectors, every trainable
    weight of the tower gets a gradient of exactly 0).  On several ranks every rank must make
    the same collectives in the same order: when the tower's weights are ZeRO-3 partitions
    (each module's forward gathers its weights, and its backward again), or when they train
    (ZeRO-2/3 reduce gradients in buckets; a rank whose tower got none reduced other buckets:
    gloo aborted, NCCL would hang).  Handed over like real features, so the graph is a batch
    with images': the decoder's input depends on the tower, as there.  The dummy: one merge
    group of zero patches (grid 1 x merge x merge, each patch channels x temporal patch x
    patch x patch wide, from the tower's config)."""
    from vis_embed.distributed import get_world_size

    if get_world_size() <= 1:
        return {}
    parameters = list(visual.parameters())
    if not (any(hasattr(p, "ds_id") for p in parameters)  # DeepSpeed's is_zero_param: a ZeRO-3 partition
            or (torch.is_grad_enabled() and any(p.requires_grad for p in parameters))):
        return {}
    config = visual.config
    merge = int(visual.spatial_merge_size)
    width = int(config.in_channels) * int(config.temporal_patch_size) * int(config.patch_size) ** 2
    grid = torch.tensor([[1, merge, merge]])
    vision = vision_on(*vision_kwargs(visual, grid), visual.device)
    pixels = torch.zeros((merge * merge, width), dtype=visual.dtype, device=visual.device)
    output = visual(pixels, grid_thw=grid.to(visual.device), return_dict=True, **vision)
    deepstack = getattr(output, "deepstack_features", None)  # Qwen3-VL
    return {"image": _encoder_output(output.pooler_output[:0],
                                     None if deepstack is None else [feature[:0] for feature in deepstack])}


def _encoder_output(pooled: torch.Tensor, deepstack: list[torch.Tensor] | None) -> SimpleNamespace:
    """What the model reads of get_*_features' output: pooler_output (and deepstack_features)."""
    return SimpleNamespace(pooler_output=(pooled,),
                           deepstack_features=None if deepstack is None else [(feature,) for feature in deepstack])


def decoder_positions(base_model: PreTrainedModel, batch: dict[str, Any],
                      grids: dict[str, torch.Tensor]) -> torch.Tensor:
    """(3, batch, length) M-RoPE positions: the model's own ``get_rope_index`` on the host for a
    batch with visual items; for text only, real tokens counted (as ``EmbeddingModel.forward``
    does without metadata: each row numbered as if encoded alone)."""
    mask = batch["attention_mask"]
    if not grids:
        return (mask.long().cumsum(-1) - 1).clamp(min=0).unsqueeze(0).expand(3, -1, -1).contiguous()
    extra = {key: batch[key] for key in ROPE_EXTRA_KEYS if batch.get(key) is not None}
    positions, _deltas = base_model.get_rope_index(
        batch["input_ids"], mm_token_type_ids=batch["mm_token_type_ids"], attention_mask=mask,
        **{f"{modality}_grid_thw": grid for modality, grid in grids.items()}, **extra)
    return positions


def run_base_model(base_model: PreTrainedModel, inputs: dict[str, torch.Tensor],
                   metadata: BatchMetadata) -> ModelOutput:
    """The base model's forward with ``metadata`` (already on the device) instead of its own
    bookkeeping: the vision tower called ONCE with every modality's patches (images, then
    clips) and the precomputed keywords, its output split by the host-known token counts and
    handed over per modality as ``mm_encoder_outputs`` (whole, not split per item: the model
    concatenates the pieces again); the M-RoPE positions given, and the decoder mask prepared
    (None without padding: the causal kernel alone)."""
    inputs = dict(inputs)
    modalities = list(metadata.visual_tokens)
    encoded: dict[str, Any] = {}
    if modalities:
        # as get_*_features cast them; both kinds' patches have the same width (temporal patch x C x p x p)
        pixels = torch.cat([inputs.pop(PIXEL_KEYS[modality]).type(base_model.visual.dtype)
                            for modality in modalities])
        grid_thw = torch.cat([inputs[f"{modality}_grid_thw"] for modality in modalities])
        output = base_model.visual(pixels, grid_thw=grid_thw, return_dict=True, **metadata.vision)
        counts = [metadata.visual_tokens[modality] for modality in modalities]  # host ints: no read
        pooled = torch.split(output.pooler_output, counts)
        deepstack = getattr(output, "deepstack_features", None)  # Qwen3-VL
        stacks = [torch.split(feature, counts) for feature in deepstack] if deepstack is not None else None
        for k, modality in enumerate(modalities):
            encoded[modality] = _encoder_output(pooled[k], None if stacks is None else [pieces[k] for pieces in stacks])
    else:  # no image or video: the tower on a dummy where the ranks need it (as the first call too)
        encoded = vision_tower_dummy(base_model.visual)
    mask = inputs.pop("attention_mask")
    decoder_mask = decoder_attention_mask(base_model, mask, inputs["input_ids"]) if metadata.padded else None
    return base_model(**inputs, attention_mask=decoder_mask, position_ids=metadata.position_ids,
                      mm_encoder_outputs=encoded or None, use_cache=False, return_dict=True)


def decoder_attention_mask(base_model: PreTrainedModel, mask: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """The decoder's causal + padding mask as transformers builds it, materialised without its
    read-back test of whether it could be skipped (a padded batch never can)."""
    from transformers.masking_utils import create_causal_mask

    text_config = base_model.language_model.config
    shape_only = torch.empty((*input_ids.shape, 0), dtype=base_model.language_model.dtype, device=mask.device)
    # config, inputs_embeds, attention_mask, cache by position: transformers 5.24 renamed the
    # cache's keyword (past_key_values before), and the floor in pyproject.toml is older.
    return create_causal_mask(text_config, shape_only, mask, None, allow_is_causal_skip=False)
