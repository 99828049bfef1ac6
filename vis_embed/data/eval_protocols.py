"""Evaluation protocols: how a benchmark is put to a model, beyond its data.

Published MMEB-V2 numbers differ with protocol details (instructions on the candidate side,
where the instruction goes, 8 or 64 frames per clip), so a run names its protocol and
results.json records it.  The table is plain data; :mod:`vis_embed.evaluation.protocol_runs`
applies it in one place (the model's EmbeddingConfig overrides at load time, the datasets'
instructions before encoding).

``vlm2vec`` (MMEB-V2's default; VLM2Vec's eval harness)
    The manifest's query and candidate instructions, in the model's own prompt format;
    8 frames per clip (``np.linspace`` over the frames).
``qwen3-vl-embedding`` (Qwen3-VL-Embedding's reported protocol)
    The query instruction in the system turn (prompt format ``chat-system``), no candidate
    instruction, 64 frames per clip.

A protocol's ``embedding_config`` values are defaults of the model's EmbeddingConfig that a
flag given on the command line overrides; a key the EmbeddingConfig does not declare is left
out (and reported in results.json as not applied).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class EvalProtocol:
    name: str
    description: str
    embedding_config: Mapping[str, Any] = field(default_factory=dict)  # EmbeddingConfig defaults
    candidate_instruction: bool = True  # False: candidates are encoded without an instruction


PROTOCOLS: Mapping[str, EvalProtocol] = MappingProxyType({
    "vlm2vec": EvalProtocol(
        "vlm2vec", "VLM2Vec's MMEB-V2 harness: the manifest's instructions on both sides, 8 frames per clip",
        MappingProxyType({"video_frames": 8})),
    "qwen3-vl-embedding": EvalProtocol(
        "qwen3-vl-embedding", "Qwen3-VL-Embedding's: the query instruction in the system turn, no candidate "
        "instruction, 64 frames per clip",
        MappingProxyType({"video_frames": 64, "prompt_format": "chat-system"}), candidate_instruction=False),
})
PROTOCOL_NAMES: tuple[str, ...] = tuple(PROTOCOLS)
