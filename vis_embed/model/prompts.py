"""Prompt formats: how an item (image?, text?) plus an instruction becomes the model's text.

One implementation, used by training, encoding and evaluation alike (via EmbeddingModel).

``chat`` (default)
    The processor's chat template applied to one user turn whose content is the image (if
    any) followed by the text ``"<instruction> <text>"``, with the generation prompt
    (``<|im_start|>assistant\\n``) appended.  The last real token is the final token of that
    generation prompt, so the embedding is read where the model would start answering.
``chat-system``
    The chat template with the instruction as the system turn and the item (image, text)
    alone in the user turn, as Qwen3-VL-Embedding is prompted (without an instruction the
    system turn says ``Represent the user's input.``, its default).
``vlm2vec``
    VLM2Vec's raw format, no template: ``"<|image_pad|> " + instruction + " " + text``
    (parts that are absent are left out together with their separating space), so that
    checkpoints trained with VLM2Vec can be used as released.

In both formats the single image placeholder is expanded by the processor to the image's
number of merged visual tokens.
"""

from __future__ import annotations

from typing import Any

from vis_embed.errors import ConfigError

PROMPT_FORMATS = ("chat", "chat-system", "vlm2vec")
DEFAULT_SYSTEM_INSTRUCTION = "Represent the user's input."  # chat-system without an instruction


def join_instruction(instruction: str | None, text: str | None) -> str:
    """``"<instruction> <text>"`` leaving out empty parts (instruction is prepended to text)."""
    return " ".join(part.strip() for part in (instruction, text) if part and part.strip())


def check_prompt_format(prompt_format: str) -> str:
    if prompt_format not in PROMPT_FORMATS:
        raise ConfigError(f"unknown prompt_format {prompt_format!r}; choose one of {PROMPT_FORMATS}")
    return prompt_format


def build_prompt(processor: Any, has_image: bool, instruction: str | None, text: str | None,
                 prompt_format: str = "chat") -> str:
    """The prompt text for one item, with ONE (unexpanded) image placeholder if ``has_image``."""
    body = join_instruction(None if prompt_format == "chat-system" else instruction, text)
    if prompt_format == "vlm2vec":
        image_token = getattr(processor, "image_token", "<|image_pad|>")
        return " ".join(part for part in ((image_token if has_image else ""), body) if part)
    if prompt_format not in ("chat", "chat-system"):
        check_prompt_format(prompt_format)
    if getattr(processor, "chat_template", None) is None:
        raise ConfigError("the model's processor has no chat template; "
                          "use prompt_format='vlm2vec' for raw-prompt checkpoints")
    content: list[dict[str, str]] = []
    if has_image:
        content.append({"type": "image"})
    if body:
        content.append({"type": "text", "text": body})
    messages = [{"role": "user", "content": content}]
    if prompt_format == "chat-system":  # the instruction is the system turn, the user turn the item alone
        system = instruction.strip() if instruction and instruction.strip() else DEFAULT_SYSTEM_INSTRUCTION
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system}]})
    return processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
