"""The model card (``README.md``): the one card writer of training runs and ``vis-embed export``.

A Hugging Face model card built with huggingface_hub (``ModelCard``, ``ModelCardData``,
``EvalResult``): YAML front matter with Hub metadata (``library_name``, ``base_model`` when the
base is a Hub id, ``pipeline_tag``, ``tags``, ``datasets`` and a ``model-index`` with the last
evaluation's results) + Markdown (training settings, data, evaluation, use), so a directory can
be pushed to the Hub as is and ``huggingface_hub.ModelCard`` / ``metadata_load`` read it.

What a card is written from, its *facts* (:class:`CardFacts`), is stored beside it in
``model_card.json``: ``{base_model, recipe, steps, datasets, adaptation, evaluation, name}``.
That is how a card is kept current after the fact:

* a training run's ``final/`` gets its card when training ends (``evaluation``: none yet);
* ``vis-embed eval --adapter RUN/final`` (:func:`record_evaluation`) stores the evaluation
  summary in the facts and rewrites the card: the run's *last* evaluation is on the card;
* ``vis-embed export --adapter RUN/final`` writes a card into the exported directory from the
  adapter's facts (an export: ``library_name: sentence-transformers``, titled by what was exported).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from vis_embed.config import FileRecord, get_dotted
from vis_embed.data.results_file import ResultsFile
from vis_embed.io import atomic_write_json, atomic_write_text, is_hub_id, read_json_object
from vis_embed.model.embedding_config import AdaptationKind, read_embedding_config
from vis_embed.model.network.adaptation import ADAPTATIONS, Adaptation, saved_adaptation, saved_adapter

if TYPE_CHECKING:
    from huggingface_hub import ModelCardData

FACTS_FILE = "model_card.json"
CARD_FILE = "README.md"
PIPELINE_TAG = "feature-extraction"

# Recipe keys shown in the card's training table (dotted paths into the recipe dict).
CARD_RECIPE_KEYS = ("max_steps", "global_batch_size", "seed", "optimizer.lr", "optimizer.decay",
                    "adaptation.kind", "loss.kind", "loss.identity_mask", "loss.matryoshka_dims",
                    "adaptation.lora.r", "adaptation.lora.alpha",
                    "temperature.init", "temperature.learnable", "schedule")


class CardFacts(FileRecord):
    """What a card is written from (``model_card.json``): typed, so no reader guesses at keys.
    Newer or older files may carry more (kept in ``model_extra``; a rewritten file holds the
    declared keys, as it always did)."""

    base_model: str
    recipe: dict[str, Any] = Field(default_factory=dict)  # the recipe as trained (recipe_to_dict)
    steps: int | None = None
    datasets: list[dict[str, Any]] = Field(default_factory=list)
    # what the directory holds: written from its embedding_config.json's record (write_model_card);
    # None: a plain model
    adaptation: AdaptationKind | None = None
    evaluation: dict[str, Any] | None = None  # evaluation_summary of the last evaluation
    name: str | None = None  # the model-index's name

    @model_validator(mode="before")
    @classmethod
    def _older_files(cls, values: Any) -> Any:
        """Facts written before ``adaptation`` was recorded said ``adapter: bool`` and left the
        kind to the recipe's ``adaptation`` key: read them as the kind they meant (kept: the
        model_card.json files earlier versions wrote are model directories users have)."""
        if isinstance(values, Mapping) and "adaptation" not in values and "adapter" in values:
            recipe = values.get("recipe") or {}
            kind = ("head" if recipe.get("adaptation") == "head" else "lora") if values["adapter"] else None
            values = {**values, "adaptation": kind}
        return values

    @property
    def kind(self) -> type[Adaptation] | None:
        """The adaptation class of the recorded kind (what the card says of it); None: a plain model."""
        return None if self.adaptation is None else ADAPTATIONS[self.adaptation]

    @property
    def adapter(self) -> bool:
        """Whether the directory holds an adapter over its base (LoRA or head), not a model."""
        return self.kind is not None and self.kind.is_adapter


def _facts(facts: CardFacts | Mapping[str, Any]) -> CardFacts:
    return facts if isinstance(facts, CardFacts) else CardFacts.of_file(facts, FACTS_FILE)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join("" if cell is None else str(cell) for cell in row) + " |" for row in rows]
    return lines


def evaluation_summary(results: ResultsFile | Mapping[str, Any]) -> dict[str, Any]:
    """What a card keeps of a ``results.json`` (read once, :class:`ResultsFile`): each dataset's
    primary metric (percent) with its meta-task / split / benchmark, the group means, and the
    model fingerprint evaluated."""
    results = ResultsFile.of(results)
    datasets = {}
    for name, entry in results.datasets.items():
        value = None if entry.primary is None else entry.metrics.get(entry.primary)
        if value is None:
            continue
        datasets[name] = {"metric": entry.primary, "value": float(value), "meta_task": entry.meta_task,
                          "split": entry.split, "benchmark": entry.benchmark}
    return {"datasets": datasets, "groups": {k: float(v) for k, v in results.groups.items()},
            "model_fingerprint": results.model.fingerprint}


def _library_name(facts: CardFacts, merged: bool) -> str:
    if merged:
        return "sentence-transformers"
    return facts.kind.card_library if facts.kind is not None else "transformers"


def _eval_results(evaluation: Mapping[str, Any] | None) -> list[Any] | None:
    """The Hub's ``model-index`` entries (huggingface_hub ``EvalResult``) of an evaluation summary."""
    from huggingface_hub import EvalResult

    if not evaluation or not evaluation.get("datasets"):
        return None
    return [EvalResult(task_type=PIPELINE_TAG, task_name=entry.get("meta_task") or "retrieval",
                       dataset_type=dataset, dataset_name=dataset, dataset_split=entry.get("split") or None,
                       metric_type=entry["metric"], metric_name=entry["metric"],
                       metric_value=round(entry["value"], 4))
            for dataset, entry in evaluation["datasets"].items()]


def card_data(facts: CardFacts | Mapping[str, Any], merged: bool = False) -> ModelCardData:
    """The card's Hub metadata as huggingface_hub's ``ModelCardData`` (its YAML, its
    ``model-index``).  ``base_model`` only when the base is a Hub id: the Hub accepts nothing
    else there (a local base is named in the card's text)."""
    from huggingface_hub import ModelCardData

    facts = _facts(facts)
    base = facts.base_model
    tags = ["vis_embed", "embeddings", "multimodal", "sentence-similarity"]
    if facts.kind is not None and not merged:
        tags += facts.kind.card_tags
    datasets = [d["name"] for d in facts.datasets if d.get("name")]
    results = _eval_results(facts.evaluation)
    return ModelCardData(base_model=base if is_hub_id(base) else None,
                         library_name=_library_name(facts, merged), pipeline_tag=PIPELINE_TAG,
                         tags=tags, datasets=datasets or None, eval_results=results,
                         # the model-index's name (it has none without results)
                         model_name=(facts.name or f"{Path(base).name}-vis_embed") if results else None)


def model_card(facts: CardFacts | Mapping[str, Any], merged: bool = False, prompt_format: str = "chat") -> str:
    """Markdown of the card (front matter + body) of ``facts`` (see the module docstring).
    ``merged``: a ``vis-embed export`` of ``facts.kind`` (what was exported); ``prompt_format``:
    the directory's recorded one (:func:`write_model_card` reads it)."""
    facts = _facts(facts)
    base_model, recipe = facts.base_model, facts.recipe
    adapter = facts.adapter and not merged
    lines = ["---", card_data(facts, merged).to_yaml(), "---", "",
             f"# {_title(facts, merged)} for `{base_model}` (vis_embed)", "",
             ("Instruction-conditioned multimodal embedding model trained with vis_embed "
              f"(last-token pooling, L2-normalised vectors, `{prompt_format}` prompt format)."), "",
             "## Training", ""]
    lines += _table(["key", "value"], [("base model", base_model), ("steps completed", facts.steps)]
                    + [(key, value) for key in CARD_RECIPE_KEYS if (value := get_dotted(recipe, key)) is not None])
    lines += ["", "## Data", ""]
    lines += _table(["dataset", "kind", "file", "weight"],
                    [(d.get("name"), d.get("kind"), d.get("path"), d.get("weight"))
                     for d in facts.datasets])
    lines += ["", "## Evaluation", ""] + _evaluation_lines(facts.evaluation, adapter, merged)
    use = ("vis-embed encode --model THIS_DIR --input items.jsonl --output emb.npy" if not adapter
           else f"vis-embed encode --model {base_model} --adapter THIS_DIR --input items.jsonl --output emb.npy")
    lines += ["", "## Use", "", "```bash", use]
    if adapter:
        lines.append("vis-embed export --adapter THIS_DIR --out st_model   # sentence-transformers / vLLM")
    if merged:
        lines.append("vllm serve THIS_DIR --runner pooling --convert embed")
    lines += ["```", ""]
    if merged:
        lines += ["```python", "from sentence_transformers import SentenceTransformer",
                  'model = SentenceTransformer("THIS_DIR")   # encode_query / encode_document: the trained prompts',
                  "```", ""]
    return "\n".join(lines + _matryoshka_lines(get_dotted(recipe, "loss.matryoshka_dims")))


def _title(facts: CardFacts, merged: bool) -> str:
    """What the card calls the directory: the kind's own title, or its export's (a LoRA merged,
    a head beside the base); "Model" for a plain model."""
    if facts.kind is None:
        return "Model"
    return facts.kind.export_title if merged else facts.kind.card_title


def _matryoshka_lines(dims: Sequence[int] | None) -> list[str]:
    if not dims:
        return []
    return ["## Matryoshka dimensions", "",
            (f"Trained with `loss.matryoshka_dims: {list(dims)}`: the first *d* coordinates, renormalised, "
             "are an embedding themselves. `vis-embed encode --dim D`, the server's `dimensions` field, "
             "vLLM's `dimensions` and sentence-transformers' `SentenceTransformer(path, truncate_dim=D)` "
             "cut the vectors (docs/galleries.md)."), ""]


def _evaluation_lines(evaluation: Mapping[str, Any] | None, adapter: bool, merged: bool) -> list[str]:
    if not evaluation or not (evaluation.get("datasets") or evaluation.get("groups")):
        # eval records its results on an adapter's card only (evaluation/api.py)
        if adapter:
            return [("Not evaluated when this card was written: `vis-embed eval --model BASE "
                     "--adapter THIS_DIR ...` (docs/evaluation.md) adds the results here.")]
        return [("Not evaluated when this card was written: `vis-embed eval --model THIS_DIR ...` "
                 "(docs/evaluation.md) evaluates it" + ("; `vis-embed export --results OUT/results.json` "
                                                         "writes an export's card with them." if merged else "."))]
    lines = _table(["dataset", "meta-task", "split", "metric", "score"],
                   [(name, e.get("meta_task"), e.get("split"), e["metric"], f"{e['value']:.2f}")
                    for name, e in evaluation.get("datasets", {}).items()])
    if evaluation.get("groups"):
        lines += [""] + _table(["benchmark group", "mean"],
                               [(name, f"{score:.2f}") for name, score in evaluation["groups"].items()])
    return lines


def write_model_card(directory: Path, facts: CardFacts | Mapping[str, Any], merged: bool = False) -> Path:
    """Write ``directory/README.md`` (a huggingface_hub ``ModelCard``: parsed back before it is
    written, so a card the Hub cannot read never lands) and the facts it was written from
    (``model_card.json``)."""
    from huggingface_hub import ModelCard

    directory = Path(directory)
    given = _facts(facts)
    facts = _held_kind(directory, given)
    prompt_format = read_embedding_config(directory).get("prompt_format", "chat")  # the one record
    # an export's title says what was exported (the given kind); the stored facts, what it holds
    card = ModelCard(model_card(given if merged else facts, merged, prompt_format))
    atomic_write_json(directory / FACTS_FILE, facts.model_dump(mode="json", include=set(CardFacts.model_fields)))
    return atomic_write_text(directory / CARD_FILE, str(card))


def _held_kind(directory: Path, facts: CardFacts) -> CardFacts:
    """``facts`` with the kind the directory's own record holds (its embedding_config.json, read
    by :func:`~vis_embed.model.network.adaptation.saved_adaptation`): the card says what
    the one record says; ``facts.adaptation`` counts only for a directory without a kind."""
    held = saved_adaptation(directory)
    return facts if held is None else facts.model_copy(update={"adaptation": held.kind})


def read_facts(directory: Path) -> CardFacts | None:
    """The card facts stored in ``directory`` (None: no vis_embed card there)."""
    facts = read_json_object(Path(directory) / FACTS_FILE)
    if facts is None or not facts.get("base_model"):
        return None
    return CardFacts.of_file(facts, Path(directory) / FACTS_FILE)


def record_evaluation(directory: Path, results: ResultsFile | Mapping[str, Any]) -> bool:
    """Put an evaluation's results on the card of ``directory`` (a run's ``final/``, or any
    directory with a vis_embed card); returns False when there is no card to update."""
    facts = read_facts(directory)
    if facts is None:
        return False
    write_model_card(directory, facts.model_copy(update={"evaluation": evaluation_summary(results)}))
    return True


def export_facts(adapter: str | Path | None, base_model: str,
                 results: ResultsFile | Mapping[str, Any] | None = None, model: str | None = None) -> CardFacts:
    """Card facts of an exported model built on ``base_model``: the adapter's own facts when it
    has a card (training settings, data, last evaluation); with no adapter, those of the local
    ``model`` folder when it has a card (a fully fine-tuned run's final/: its facts name the base it
    was trained from); ``results`` (a results.json) replaces the evaluation."""
    if adapter is None:
        own = read_facts(Path(model)) if model is not None and Path(model).is_dir() else None
        facts = own or CardFacts(base_model=base_model)
    else:
        own = read_facts(adapter)
        exported = saved_adapter(adapter).kind  # what the card's title names
        facts = (own or CardFacts(base_model=base_model)).model_copy(update={"base_model": base_model,
                                                                             "adaptation": exported})
    if results is not None:
        facts = facts.model_copy(update={"evaluation": evaluation_summary(results)})
    return facts
