"""Preparer: item -> :class:`PreparedItem` (image loaded, prompt built, tokenised), model-free.

The CPU half of :class:`~vis_embed.model.embedding_model.EmbeddingModel`: everything
``prepare_one`` needs -- the HF processor, the pixel budget, the prompt format, the token
limit and the decode mode -- and nothing else, so it pickles to a worker process
(:mod:`vis_embed.model.prepare_pool`) without the model's weights.  ``EmbeddingModel.preparer()``
builds one from the model's EmbeddingConfig (the object itself, not its fields copied); the
model, the worker processes and the length estimate (:mod:`vis_embed.model.lengths`) all go
through it, so an item is prepared one way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vis_embed.data.image_geometry import crop_to_bbox, fit_aspect_ratio
from vis_embed.data.images import FAST_DECODE_MARGIN, item_decode_mode, load_image
from vis_embed.data.items import check_item
from vis_embed.errors import DataError
from vis_embed.model.embedding_config import EmbeddingConfig
from vis_embed.model.lengths import processor_size, within_token_budget
from vis_embed.model.prompts import build_prompt


def token_limit(max_length: int | None, tokenizer: Any, config: Any) -> int | None:
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
    mm_token_type_ids: torch.Tensor  # (L,) int; 1 marks image tokens
    pixel_values: torch.Tensor | None = None  # (patches, patch_dim)
    image_grid_thw: torch.Tensor | None = None  # (1, 3)
    truncated: bool = False  # the item's text was cut to the token limit

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])

    _TENSORS = ("input_ids", "mm_token_type_ids", "pixel_values", "image_grid_thw")

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

    def prompt(self, has_image: bool, instruction: str | None, text: str | None) -> str:
        """The item's prompt with one unexpanded image placeholder (also what lengths.py counts)."""
        return build_prompt(self.processor, has_image, instruction, text, self.config.prompt_format)

    def target_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) this model's processor resizes such an image to (what fast decoding keeps 2x of)."""
        config = self.config
        return processor_size(self.processor.image_processor, config.min_pixels, config.max_pixels, width, height)

    def load_image(self, item: dict[str, Any], base_dir: str | Path | None = None) -> Any:
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
        pil_image = self.load_image(item, base_dir)
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
            text = tokenizer.decode(text_ids[:max(len(text_ids) - excess, 0)])
            prepared = self.process(pil_image, instruction, text)
        if prepared.length > limit:
            raise DataError(f"{prepared.length} tokens without its text (image and instruction), above the "
                            f"limit of {limit}", field="image" if pil_image is not None else "instruction")
        prepared.truncated = True
        return prepared

    def process(self, pil_image: Any, instruction: str | None, text: str | None) -> PreparedItem:
        """Run the processor on one loaded item (resize to the pixel budget, tokenise, expand)."""
        kwargs: dict[str, Any] = {"text": [self.prompt(pil_image is not None, instruction, text)],
                                  "return_tensors": "pt"}
        if pil_image is not None:
            kwargs["images"] = [pil_image]
            kwargs["images_kwargs"] = {"size": {"shortest_edge": self.config.min_pixels,
                                                "longest_edge": self.config.max_pixels}}
        outputs = self.processor(**kwargs)
        input_ids = outputs["input_ids"][0]
        mm_types = outputs.get("mm_token_type_ids")
        mm_types = torch.zeros_like(input_ids) if mm_types is None else mm_types[0]
        pixel_values = outputs.get("pixel_values")
        if pixel_values is not None and self.pixel_dtype is not None:
            pixel_values = pixel_values.to(getattr(torch, self.pixel_dtype))
        return PreparedItem(input_ids=input_ids, mm_token_type_ids=mm_types, pixel_values=pixel_values,
                            image_grid_thw=outputs.get("image_grid_thw"))


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
