"""Bounded text work per request: ``--max-input-tokens`` and ``usage.prompt_tokens``.

An item's input tokens are the tokens of ``"<instruction> <text>"`` plus its image's merged
visual tokens (what OpenAI's ``usage`` counts and what the model embeds, the chat template
aside).  Over ``--max-input-tokens`` an item is refused (400, OpenAI's behaviour) or, with
``--long-input truncate``, its text is cut at the end until it fits.

A long text must not cost the server the time of tokenising it whole (1 MB took 50 s, with
every other client waiting): the text is first cut to ``CHARS_PER_TOKEN`` characters per
allowed token (model/inputs/lengths.within_token_budget, the rule encode and search use too) --
more than any real text needs, so nothing that fits is cut -- and only that prefix is tokenised.
In refuse mode a text longer than that is refused without tokenising.

A request as a whole is bounded too (``--max-request-tokens``: items x tokens, the instruction
counted in every item, as the model runs it): 40 one-character items under a 4,096-emoji
instruction held the model for 45 s.  Over the budget a request is refused with 413; the
instruction's share (its tokens x the items) is checked first, before any item is tokenised.

All of this runs in the request's thread, before the request joins a batch, with its own copy
of the tokenizer (the model thread's is not shared across threads) behind a lock.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vis_embed.model.inputs.lengths import CHARS_PER_TOKEN, visual_tokens, within_token_budget
from vis_embed.model.prompts import join_instruction
from vis_embed.serving.errors import RequestError
from vis_embed.serving.settings import ServerSettings

if TYPE_CHECKING:
    from vis_embed.model.runtime.embedder import Embedder

DEFAULT_MAX_INPUT_TOKENS = 8192  # OpenAI's embeddings limit, for a model that records none
TYPICAL_CHARS_PER_TOKEN = 4


def model_max_tokens(embedder: Embedder) -> int:
    """The model's recorded maximum length (``EmbeddingModel.token_limit``), else 8192."""
    limit = getattr(getattr(embedder, "model", None), "token_limit", None)
    return int(limit) if isinstance(limit, int) and limit > 0 else DEFAULT_MAX_INPUT_TOKENS


class InputLimiter:
    """Applies the token limit to a request's items and counts their tokens."""

    def __init__(self, embedder: Embedder, settings: ServerSettings) -> None:
        # max_input_tokens, long_input, max_request_tokens: checked where the settings were built
        self.max_tokens = settings.max_input_tokens or model_max_tokens(embedder)
        self.max_request_tokens = settings.max_request_tokens
        self.mode = settings.long_input
        self.max_chars = self.max_tokens * CHARS_PER_TOKEN
        self._model = embedder.model
        self._tokenizer = copy.deepcopy(embedder.model.processor.tokenizer)
        self._lock = threading.Lock()

    def apply(self, items: Sequence[dict[str, Any]], instruction: str | None) -> tuple[list[dict[str, Any]], int]:
        """``(items, prompt_tokens)``: texts cut (truncate mode) and the tokens of the request."""
        self.check_instruction_share(len(items), instruction)
        limited, total = [], 0
        for index, item in enumerate(items):
            item, tokens = self._limit_item(item, instruction, f"input[{index}]")
            limited.append(item)
            total += tokens
            if total > self.max_request_tokens:
                raise self._request_too_large(f"its first {index + 1} items hold {total} tokens")
        return limited, total

    def check_instruction_share(self, n_items: int, instruction: str | None) -> None:
        """413 if the instruction alone, in each of ``n_items`` items, is over the request budget
        (cheap: one short tokenisation; run before images are decoded or items tokenised)."""
        if instruction and n_items * self._count(instruction, None) > self.max_request_tokens:
            raise self._request_too_large(f"its instruction in each of its {n_items} items holds "
                                          f"{n_items * self._count(instruction, None)} tokens")

    def _request_too_large(self, size: str) -> RequestError:
        return RequestError(413, f"the request is over this server's limit of {self.max_request_tokens} tokens per "
                                 f"request (--max-request-tokens): {size}; split it", param="input")

    def _limit_item(self, item: dict[str, Any], instruction: str | None, param: str) -> tuple[dict[str, Any], int]:
        visual = visual_tokens(self._model, item) or 0
        text = item.get("text")
        if text is not None and len(text) > self.max_chars:
            if self.mode == "refuse":
                raise self._too_long(param, f"{len(text)} characters")
            text = within_token_budget(text, self.max_tokens)  # cut by characters before any tokenising
        if text is not None and self.mode == "truncate" and len(text) > self.max_tokens * TYPICAL_CHARS_PER_TOKEN:
            # Most texts pass the limit within a typical number of characters per token:
            # tokenising that prefix first spares the rest.
            prefix = text[:self.max_tokens * TYPICAL_CHARS_PER_TOKEN]
            if visual + self._count(instruction, prefix) > self.max_tokens:
                text = prefix
        count = self._count(instruction, text)
        if visual + count <= self.max_tokens:
            return ({**item, "text": text} if text is not None else item), visual + count
        if self.mode == "refuse" or not text:
            raise self._too_long(param, f"{visual + count} tokens")
        return self._truncated(item, instruction, text, visual, param)

    def _truncated(self, item: dict[str, Any], instruction: str | None, text: str, visual: int,
                   param: str) -> tuple[dict[str, Any], int]:
        with self._lock:
            text_ids = self._tokenizer(text, add_special_tokens=False)["input_ids"]
        budget = self.max_tokens - visual - self._count(instruction, None)
        while budget > 0:
            # Re-tokenising the joined prompt can merge pieces differently: cut until it fits.
            cut = self._decode(text_ids[:budget])
            count = self._count(instruction, cut)
            if cut.strip() and visual + count <= self.max_tokens:
                return {**item, "text": cut}, visual + count
            budget -= max(1, visual + count - self.max_tokens)
        raise self._too_long(param, "its image and instruction alone")

    def _count(self, instruction: str | None, text: str | None) -> int:
        joined = join_instruction(instruction, text)
        if not joined:
            return 0
        with self._lock:
            return len(self._tokenizer(joined, add_special_tokens=False)["input_ids"])

    def _decode(self, ids: list[int]) -> str:
        with self._lock:
            return self._tokenizer.decode(ids)

    def _too_long(self, param: str, size: str) -> RequestError:
        return RequestError(400, f"{param}: {size}, above this server's limit of {self.max_tokens} tokens "
                                 f"per input (--max-input-tokens); shorten it or ask the operator for "
                                 f"--long-input truncate", param=param)
