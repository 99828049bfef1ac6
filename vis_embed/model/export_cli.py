"""``vis-embed export``: argument parsing only (the library half is :mod:`vis_embed.model.export`).

    vis-embed export MODEL [--adapter A] --format sentence-transformers --out DIR
        [--query-instruction TEXT] [--document-instruction TEXT]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vis_embed.model.embedding_config import INSTRUCTIONS, LOADING, add_embedding_config_arguments, given_settings
from vis_embed.model.export import DEFAULT_DOCUMENT_INSTRUCTION, DEFAULT_QUERY_INSTRUCTION, EXPORT_FORMATS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", default=None,
                        help="base model: hub id or checkpoint directory (default: the adapter's recorded base)")
    parser.add_argument("--adapter", type=Path, default=None, help="LoRA adapter directory folded into the weights, or a projection-head "
                        "directory (adaptation: head) added as a Dense module")
    parser.add_argument("--format", choices=EXPORT_FORMATS, default="sentence-transformers",
                        help="output layout (sentence-transformers: also what `vllm serve` reads)")
    parser.add_argument("--out", required=True, type=Path, help="directory to write")
    # --query-instruction, --document-instruction, --min-pixels, --max-pixels, --dtype, ...: generated
    # from EmbeddingConfig; not given = the adapter's / model's recorded value, else the default.
    add_embedding_config_arguments(parser, groups=(LOADING, INSTRUCTIONS), help_overrides={
        "query_instruction": f"prompt 'query' (encode_query); '' for none (default: the recorded one, "
                             f"else {DEFAULT_QUERY_INSTRUCTION!r})",
        "document_instruction": f"prompt 'document' (encode_document); '' for none (default: the recorded "
                                f"one, else {DEFAULT_DOCUMENT_INSTRUCTION!r})",
        "dtype": "dtype of the written weights (default: checkpoint, the base checkpoint's own; auto: by "
                 "device, bfloat16 on CUDA and float32 elsewhere)"})


def run(args: argparse.Namespace) -> int:
    from vis_embed.errors import ConfigError
    from vis_embed.model.export import export_sentence_transformers

    if args.model is None and args.adapter is None:
        raise ConfigError("give MODEL, --adapter, or both")
    out = export_sentence_transformers(args.model, args.out, adapter=args.adapter, **given_settings(args))
    print(f"sentence-transformers model written to {out} "
          f"(SentenceTransformer({str(out)!r}); vllm serve {out} --runner pooling --convert embed)")
    return 0
