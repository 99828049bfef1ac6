"""``vis-embed export``: argument parsing only (the library half is :mod:`vis_embed.model.files.export`).

    vis-embed export MODEL [--adapter A] --format sentence-transformers --out DIR
        [--query-instruction TEXT] [--document-instruction TEXT] [--results RESULTS_JSON]

The exported directory carries a model card README.md with Hub metadata
(:mod:`vis_embed.model.files.model_card`): the adapter's training facts and last evaluation when it
is a training run's ``final/``, or the evaluation of ``--results``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vis_embed.data.results_file import ResultsFile
from vis_embed.model.embedding_config import INSTRUCTIONS, LOADING, add_embedding_config_arguments, given_settings
from vis_embed.model.files.export import DEFAULT_DOCUMENT_INSTRUCTION, DEFAULT_QUERY_INSTRUCTION, EXPORT_FORMATS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", default=None,
                        help="base model: hub id or checkpoint directory (default: the adapter's recorded base)")
    parser.add_argument("--adapter", type=Path, default=None,
                        help="LoRA adapter directory folded into the weights, or a projection-head "
                        "directory (adaptation: head) added as a Dense module")
    parser.add_argument("--format", choices=EXPORT_FORMATS, default="sentence-transformers",
                        help="output layout (sentence-transformers: also what `vllm serve` reads)")
    parser.add_argument("--out", required=True, type=Path, help="directory to write")
    # --query-instruction, --document-instruction, --min-pixels, --max-pixels, --dtype, ...: generated
    # from EmbeddingConfig; not given = the adapter's / model's recorded value, else the default.
    add_embedding_config_arguments(parser, groups=(LOADING, INSTRUCTIONS), help_overrides={
        "query_instruction": f"prompt 'query' (encode_query); '' for none (default: the recorded one; "
                             f"needed when it is recorded as null; else {DEFAULT_QUERY_INSTRUCTION!r})",
        "document_instruction": f"prompt 'document' (encode_document); '' for none (default: the recorded "
                                f"one; needed when it is recorded as null; else {DEFAULT_DOCUMENT_INSTRUCTION!r})",
        "max_length": "refused: sentence-transformers cuts a long item's tokens at the end (template and "
                      "image tokens too), not its text as vis_embed does; a recorded one is not exported",
        "dtype": "dtype of the written weights (default: checkpoint, the base checkpoint's own; auto: by "
                 "device, bfloat16 on CUDA and float32 elsewhere)"})
    parser.add_argument("--results", type=Path, default=None,
                        help="a `vis-embed eval` results.json whose metrics go on the model card "
                             "(default: the adapter's last recorded evaluation, if any)")


def run(args: argparse.Namespace) -> int:
    from vis_embed.errors import ConfigError
    from vis_embed.model.files.export import export_sentence_transformers
    from vis_embed.model.files.model_card import export_facts, write_model_card
    from vis_embed.model.references import local_model_dir

    if args.model is None and args.adapter is None:
        raise ConfigError("give MODEL, --adapter, or both")
    results = _read_results(args.results) if args.results is not None else None  # checked before the export
    adapter = None if args.adapter is None else local_model_dir(args.adapter)  # a Hub id: its cached snapshot

    def write_card(built: Path) -> None:  # in the folder being built: the card lands with the model
        base = _card_base(args.model, adapter)  # once the export checked its inputs (their errors first)
        facts = export_facts(adapter, base, results, model=args.model)
        if results is None and facts.evaluation and _embeds_otherwise(built, base, adapter):
            print("note: the model's last evaluation is not put on the card: the export embeds with other settings "
                  "(pixels, token cap, ...); `vis-embed export --results` puts an evaluation of the export there")
            facts = facts.model_copy(update={"evaluation": None})
        write_model_card(built, facts, merged=True)

    out = export_sentence_transformers(args.model, args.out, adapter=adapter, finish=write_card,
                                       **given_settings(args))
    print(f"sentence-transformers model written to {out} "
          f"(SentenceTransformer({str(out)!r}); vllm serve {out} --runner pooling --convert embed)")
    return 0


def _read_results(path: Path) -> ResultsFile:
    from vis_embed.errors import ConfigError, DataError
    from vis_embed.io import read_json_value

    try:
        results = read_json_value(path)
    except (OSError, DataError) as exc:
        raise ConfigError(f"--results {path}: not a readable results.json ({exc})") from None
    if not isinstance(results, dict) or not isinstance(results.get("datasets"), dict):
        raise ConfigError(f"--results {path}: no 'datasets' (expected a `vis-embed eval` results.json)")
    try:
        return ResultsFile.of(results, path)
    except DataError as exc:
        raise ConfigError(f"--results {exc}") from None


# Settings that do not change the evaluated vectors: the machine's, and the export's prompts (an
# evaluation takes its instructions from the benchmark), and the kind recorded.
_NOT_EVALUATED = ("dtype", "attn_implementation", "query_instruction", "document_instruction", "adaptation")


def _embeds_otherwise(out: Path, base: str, adapter: Path | None) -> bool:
    """Whether the export at ``out`` embeds with other settings than ``base`` (+ ``adapter``) it was
    made from (a given --max-pixels, a recorded max_length left out): its evaluation is not the export's."""
    from vis_embed.model.embedding_config import resolve_embedding_config

    exported = resolve_embedding_config(str(out), None).model_dump(exclude=set(_NOT_EVALUATED))
    source = resolve_embedding_config(base, adapter).model_dump(exclude=set(_NOT_EVALUATED))
    return exported != source


def _card_base(model: str | None, adapter: Path | None) -> str:
    """The base model named on the card: MODEL, else the adapter's recorded base (a LoRA's or a
    projection head's: its adaptation object reads it)."""
    from vis_embed.model.references import absolute_model_reference
    from vis_embed.model.network.adaptation import saved_adapter

    if model is not None:
        return absolute_model_reference(model)
    return saved_adapter(adapter).base_model(Path(adapter).expanduser())
