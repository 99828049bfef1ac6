"""Applying an evaluation protocol (:mod:`vis_embed.data.eval_protocols`): the one place where a
protocol changes what a run does.

- :func:`protocol_embedding_values`: the EmbeddingConfig values the protocol sets (frames per
  clip, prompt format), below any flag the user gave, filtered to the fields the EmbeddingConfig
  declares; the model is loaded with them (``Embedder.from_pretrained`` -> ``with_values``).
- :func:`apply_protocol`: the datasets as the protocol encodes them (no candidate instruction
  for ``qwen3-vl-embedding``).
- :func:`protocol_record`: what results.json says about it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from vis_embed.data.benchmark import EvalDatasetSpec
from vis_embed.data.eval_protocols import PROTOCOLS, EvalProtocol


def protocol_named(name: str | None) -> EvalProtocol | None:
    return None if name is None else PROTOCOLS[name]


def protocol_embedding_values(name: str | None, given: Mapping[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    """``given`` (the flags' values; None = not given) with the protocol's EmbeddingConfig values
    filling the ones not given, for the keys in ``fields`` (the EmbeddingConfig's fields)."""
    protocol = protocol_named(name)
    values = dict(given)
    known = set(fields)
    for key, value in (protocol.embedding_config.items() if protocol else ()):
        if key in known and values.get(key) is None:
            values[key] = value
    return values


def apply_protocol(specs: Iterable[EvalDatasetSpec], name: str | None) -> list[EvalDatasetSpec]:
    """The datasets with the protocol's instruction rule applied (unchanged without a protocol)."""
    protocol = protocol_named(name)
    if protocol is None or protocol.candidate_instruction:
        return list(specs)
    return [dataclasses.replace(spec, candidate_instruction=None) for spec in specs]


def protocol_record(name: str | None, embedding_config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """results.json's ``protocol`` block: the name, its rules, and which of its EmbeddingConfig
    values the model embedded with (``applied``) or does not declare (``not_applied``)."""
    protocol = protocol_named(name)
    if protocol is None:
        return None
    config = dict(embedding_config or {})
    return {"name": protocol.name, "description": protocol.description,
            "candidate_instruction": protocol.candidate_instruction,
            "embedding_config": dict(protocol.embedding_config),
            "applied": {key: config[key] for key in protocol.embedding_config if key in config},
            "not_applied": sorted(key for key in protocol.embedding_config if key not in config)}
