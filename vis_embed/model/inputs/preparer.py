"""Preparer: item -> :class:`PreparedItem` (image loaded, prompt built, tokenised), model-free.

The CPU half of :class:`~vis_embed.model.network.embedding_model.EmbeddingModel`: everything
``prepare_one`` needs -- the HF processor, the pixel budget, the prompt format, the token
limit and the decode mode -- and nothing else, so it pickles to a worker process
(:mod:`vis_embed.model.runtime.prepare_pool`) without the model's weights.  ``EmbeddingModel.preparer()``
builds one from the model's EmbeddingConfig (the object itself, not its fields copied); the
model, the worker processes and the length estimate (:mod:`vis_embed.model.inputs.lengths`) all go
through it, so an item is prepared one way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from PIL import Image

from vis_embed.data.image_geometry import crop_to_bbox, fit_aspect_ratio
from vis_embed.data.images import FAST_DECODE_MARGIN, item_decode_mode, load_image
from vis_embed.data.items import check_item
from vis_embed.data.video import Clip, load_video
from vis_embed.errors import DataError
from vis_embed.model.embedding_config import EmbeddingConfig
from vis_embed.model.inputs.lengths import processor_size, within_token_budget
from vis_embed.model.prompts import build_prompt

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase


def token_limit(max_length: int | None, tokenizer: PreTrainedTokenizerBase,
                config: PretrainedConfig | None) -> int | None:
    """Most tokens one item may have: ``max_length``, else the model's own maximum (the
    tokenizer's ``model_max_length`` or the decoder's ``max_position_embeddings``)."""
    if max_length is not None:
        return max_length
    limits = [getattr(tokenizer, "model_max_length", None),
              getattr(getattr(config, "text_config", config), "max_position_embeddings", None)]
    sane = [int(limit) for limit in limits if isinstance(limit, int) and 0 < limit < 10**8]  # 1e30 = unset
    return min(sane) if sane else None


@dataclass
class PreparedItem:
    """One item after CPU preprocessing: token ids and (optionally) its image patches."""

    input_ids: torch.Tensor  # (L,) long
    mm_token_type_ids: torch.Tensor  # (L,) int; 1 marks image tokens, 2 video tokens
    pixel_values: torch.Tensor | None = None  # (patches, patch_dim)
    image_grid_thw: torch.Tensor | None = None  # (1, 3)
    truncated: bool = False  # the item's text was cut to the token limit
    pixel_values_videos: torch.Tensor | None = None  # a video item's patches (every frame pair)
    video_grid_thw: torch.Tensor | None = None  # (1, 3): (frame pairs, h, w), like image_grid_thw
    second_per_grid_ts: torch.Tensor | None = None  # (1,): Qwen2.5-VL's seconds per frame pair (temporal RoPE)

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])

    _TENSORS = ("input_ids", "mm_token_type_ids", "pixel_values", "image_grid_thw", "pixel_values_videos",
                "video_grid_thw", "second_per_grid_ts")

    def to_numpy(self) -> dict[str, Any]:
        """The fields as numpy arrays (what a worker process sends; no torch pickling).  numpy has
        no bfloat16: such a tensor travels as its 16-bit pattern, its dtype named beside it."""
        fields: dict[str, Any] = {"truncated": self.truncated, "bfloat16": []}
        for name in self._TENSORS:
            tensor = getattr(self, name)
            if tensor is not None and tensor.dtype == torch.bfloat16:
                tensor = tensor.view(torch.int16)
                fields["bfloat16"].append(name)
            fields[name] = None if tensor is None else tensor.numpy()
        return fields

    @classmethod
    def from_numpy(cls, fields: dict[str, Any]) -> PreparedItem:
        """The inverse of :meth:`to_numpy`; the tensors share the arrays' memory (no copy)."""
        tensors = {name: (None if fields[name] is None else torch.from_numpy(np.asarray(fields[name])))
                   for name in cls._TENSORS}
        for name in fields.get("bfloat16", ()):
            tensors[name] = tensors[name].view(torch.bfloat16)
        return cls(**tensors, truncated=bool(fields["truncated"]))

    def visual_fields(self) -> tuple[tuple[str, str], ...]:
        """The (patches, grid) field pairs this item fills: images', videos', or none."""
        return tuple(pair for pair in VISUAL_FIELDS if getattr(self, pair[0]) is not None)


# The processor's outputs of each kind of visual input: patches and their (t, h, w) grid rows.
VISUAL_FIELDS = (("pixel_values", "image_grid_thw"), ("pixel_values_videos", "video_grid_thw"))
# Per-video fields besides the patches and grid (Qwen2.5-VL's temporal RoPE spacing), collated alike.
VIDEO_EXTRA_FIELDS = ("second_per_grid_ts",)


def channels_first(image: Image.Image) -> torch.Tensor | Image.Image:
    """An RGB image as the (3, H, W) uint8 tensor transformers' image processor makes of it first;
    another mode as it is (the processor converts it).  Why: for a PIL image the processor copies
    it whole three times (``convert("RGB")`` even of an RGB image, ``np.array``, then
    ``contiguous()`` after a permute); PIL's ``split`` gives the planes in one pass: 1.0 ms less of
    a 1008x756 photo, ~50 ms of a 12 MP one (benchmarks/prepare_throughput.py), same values (a test)."""
    if image.mode != "RGB":
        return image
    return torch.from_numpy(np.stack([np.asarray(plane) for plane in image.split()]))


def clip_channels_first(frames: list[Image.Image]) -> torch.Tensor | list[Image.Image]:
    """A clip's frames (one size: :class:`ClipGrid`) as the (T, 3, H, W) uint8 tensor of
    :func:`channels_first`'s planes, which the video processor takes as one video; frames of
    another mode or of mixed sizes as they are.  An 8-frame 448x448 clip: 0.41-0.74x of the
    processor's time on the three architectures (best of 15, alternated), same outputs (a test)."""
    planes = [channels_first(frame) for frame in frames]
    if not all(isinstance(plane, torch.Tensor) for plane in planes) or len({plane.shape for plane in planes}) != 1:
        return frames
    return torch.stack(planes)


class ClipGrid:
    """One clip's frames brought to one grid, each as it is loaded (frame 0 first): slivers padded
    (``fit_aspect_ratio``, within ``budget`` pixels, as images), then resized to the size the
    first frame is resized to (``target_size``: the processor's rule) -- the processor's stacked
    video tensor needs one size.  Bicubic, as the processor's own resize."""

    def __init__(self, budget: int, target_size: Callable[[int, int], tuple[int, int]]) -> None:
        self.budget = budget
        self.target_size = target_size
        self.size: tuple[int, int] | None = None  # the first frame's target, once it was seen

    def __call__(self, frame: Image.Image) -> Image.Image:
        frame = fit_aspect_ratio(frame, max_pixels=self.budget)
        if self.size is None:
            self.size = self.target_size(*frame.size)
        return frame if frame.size == self.size else frame.resize(self.size, Image.Resampling.BICUBIC)


@dataclass(frozen=True, eq=False)
class Preparer:
    """How to prepare items for one model (picklable: a processor and a few settings)."""

    processor: Any
    # The model's EmbeddingConfig (prompt format, pixel budget, decode mode): read, never copied.
    config: EmbeddingConfig
    token_limit: int | None = None
    # The model's dtype when it is a 16-bit float: the forward pass casts the patches to it
    # first thing, so casting them here gives the same bits and halves what crosses the
    # worker pipes, the collation and the host-to-GPU copy (4.8 MB -> 2.4 MB a 256-token image).
    pixel_dtype: str | None = None

    def signature(self) -> tuple[Any, ...]:
        """Equal for preparers that prepare every item identically (same processor object)."""
        return (id(self.processor), self.config.fingerprint(), self.token_limit, self.pixel_dtype)

    def prompt(self, visual: bool | str | None, instruction: str | None, text: str | None) -> str:
        """The item's prompt with one unexpanded placeholder of its visual input ("image" or
        True, "video", None) -- also what lengths.py counts."""
        return build_prompt(self.processor, visual, instruction, text, self.config.prompt_format)

    def target_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) this model's processor resizes such an image to (what fast decoding keeps 2x of)."""
        config = self.config
        return processor_size(self.processor.image_processor, config.min_pixels, config.max_pixels, width, height)

    def video_target_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) every frame of a clip whose first frame is ``width`` x ``height`` is
        resized to: the processor's size rule with the per-frame budget ``video_max_pixels``."""
        config = self.config
        return processor_size(self.processor.video_processor, config.min_pixels, config.video_max_pixels,
                              width, height)

    def load_video(self, item: dict[str, Any], base_dir: str | Path | None = None) -> Clip:
        """The checked item's clip as the model will see it: ``video_frames`` frames picked
        (data/video.py), slivers padded, and every frame resized to the target size of the
        first (the rule for clips whose frames differ in size: one grid per clip) as it is loaded."""
        config = self.config
        multiple = int(getattr(self.processor.video_processor, "temporal_patch_size", 2))
        try:
            return load_video(item["video"], base_dir, config.video_frames, multiple=multiple,
                              fit_frame=ClipGrid(FAST_DECODE_MARGIN ** 2 * config.video_max_pixels,
                                                 self.video_target_size),
                              max_pixels=config.video_max_pixels, decode=config.decode,
                              target_size=self.video_target_size)
        except DataError as exc:
            raise DataError(exc.reason, path=exc.path, line=exc.line, field="video") from None

    def load_image(self, item: dict[str, Any], base_dir: str | Path | None = None) -> Image.Image | None:
        """The checked item's image as the model will see it (RGB, cropped, sliver-padded), or None."""
        image = item.get("image")
        if image is None:
            return None
        try:
            pil_image = load_image(image, base_dir=base_dir, max_pixels=self.config.max_pixels,
                                   decode=item_decode_mode(item, self.config.decode), target_size=self.target_size)
        except DataError as exc:
            raise DataError(exc.reason, path=exc.path, line=exc.line, field="image") from None
        if "bbox" in item:
            pil_image = crop_to_bbox(pil_image, item["bbox"], None if hasattr(image, "convert") else str(image))
        # After the crop: a box can make a sliver too.  Padded, not refused (data/image_geometry.py); a
        # canvas beyond a few times the pixel budget is never allocated (the processor would
        # shrink it to the budget anyway): the sliver is scaled down first.
        return fit_aspect_ratio(pil_image, max_pixels=FAST_DECODE_MARGIN ** 2 * self.config.max_pixels)

    def prepare_one(self, item: dict[str, Any], instruction: str | None = None,
                    base_dir: str | Path | None = None) -> PreparedItem:
        """Validate, load, build the prompt and tokenise one item; an over-long text is cut."""
        item = check_item(item)
        pil_image = self.load_video(item, base_dir) if "video" in item else self.load_image(item, base_dir)
        limit = self.token_limit
        text = within_token_budget(item.get("text"), limit)  # never tokenise what cannot fit
        prepared = self.process(pil_image, instruction, text)
        if limit is None or prepared.length <= limit:
            prepared.truncated = text is not item.get("text")
            return prepared
        tokenizer = self.processor.tokenizer
        while prepared.length > limit and text:
            # Cut the end of the item's text only: visual tokens and the template must stay.
            # Re-tokenising the joined prompt can merge pieces differently, hence the loop.
            text_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            excess = prepared.length - limit
            # A character cut between its byte tokens decodes as U+FFFD, which can tokenise back
            # to as many tokens: dropped, and the text always gets shorter, so the loop ends.
            cut = tokenizer.decode(text_ids[:max(len(text_ids) - excess, 0)]).rstrip("\ufffd")
            text = cut if len(cut) < len(text) else text[:-1]
            prepared = self.process(pil_image, instruction, text)
        if prepared.length > limit:
            visual = None if pil_image is None else "video" if isinstance(pil_image, Clip) else "image"
            kept = [part for part in (visual, "instruction" if instruction else None) if part] + ["prompt template"]
            raise DataError(f"{prepared.length} tokens without its text ({', '.join(kept)}), above the "
                            f"limit of {limit}", field=visual or ("instruction" if instruction else "text"))
        prepared.truncated = True
        return prepared

    def process(self, visual: Image.Image | Clip | None, instruction: str | None, text: str | None) -> PreparedItem:
        """Run the processor on one loaded item (a PIL image, a :class:`Clip` or None): resize an
        image to the pixel budget, tokenise, expand the placeholder."""
        is_clip = isinstance(visual, Clip)
        kind = "video" if is_clip else "image" if visual is not None else None
        kwargs: dict[str, Any] = {"text": [self.prompt(kind, instruction, text)], "return_tensors": "pt"}
        if is_clip:
            # ONE video (frame pairs merged by the vision tower), frames already at their grid size
            # (load_video); the processor neither resamples frames nor resizes them again.
            kwargs["videos"] = [clip_channels_first(visual.frames)]
            kwargs["videos_kwargs"] = {
                "do_resize": False, "do_sample_frames": False, "cap_pixels_per_frame": False,
                "video_metadata": [visual.video_metadata()]}
        elif visual is not None:
            kwargs["images"] = [channels_first(visual)]
            kwargs["images_kwargs"] = {"size": {"shortest_edge": self.config.min_pixels,
                                                "longest_edge": self.config.max_pixels}}
        outputs = self.processor(**kwargs)
        input_ids = outputs["input_ids"][0]
        mm_types = outputs.get("mm_token_type_ids")
        mm_types = torch.zeros_like(input_ids) if mm_types is None else mm_types[0]
        patches = {name: outputs.get(name) for name in ("pixel_values", "pixel_values_videos")}
        if self.pixel_dtype is not None:
            patches = {name: None if value is None else value.to(getattr(torch, self.pixel_dtype))
                       for name, value in patches.items()}
        return PreparedItem(input_ids=input_ids, mm_token_type_ids=mm_types, **patches,
                            image_grid_thw=outputs.get("image_grid_thw"), video_grid_thw=outputs.get("video_grid_thw"),
                            second_per_grid_ts=outputs.get("second_per_grid_ts"))


class PreparesItems:
    """``prepare_one`` and the truncation count of a model that has ``preparer()`` and a
    ``truncated_items`` counter: the EmbeddingModel, and the dry run's processor-only stand-in."""

    truncated_items: int

    def preparer(self) -> Preparer:
        raise NotImplementedError

    def prepare_one(self, item: dict[str, Any], instruction: str | None = None,
                    base_dir: str | Path | None = None) -> PreparedItem:
        """One item as :class:`Preparer` prepares it; counts a text cut to the token limit."""
        return self.count_truncated(self.preparer().prepare_one(item, instruction, base_dir))

    def count_truncated(self, prepared: PreparedItem) -> PreparedItem:
        """``prepared``, counted in ``truncated_items`` if its text was cut (any process cut it)."""
        if prepared.truncated:
            self.truncated_items += 1
        return prepared
