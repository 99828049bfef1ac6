"""The model card (``final/README.md``): base model, recipe, data, steps, evaluation.

A Hugging Face model card (YAML front matter + Markdown) so that ``final/`` can be pushed to
the hub as is and a reader knows what the adapter is without the training directory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vis_embed.config import get_dotted

# Recipe keys shown in the card's training table (dotted paths into the recipe dict).
CARD_RECIPE_KEYS = ("max_steps", "global_batch_size", "seed", "optimizer.lr", "optimizer.decay",
                    "adaptation", "loss.kind", "loss.identity_mask", "lora.r", "lora.alpha", "temperature.init",
                    "temperature.learnable", "schedule")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join("" if cell is None else str(cell) for cell in row) + " |" for row in rows]
    return lines


def model_card(base_model: str, recipe: Mapping[str, Any], steps: int,
               datasets: Sequence[Mapping[str, Any]],
               evaluation: Mapping[str, float] | None = None, adapter: bool = True) -> str:
    """Markdown of the card.  ``datasets``: ``{name, kind, path, weight}`` per training dataset;
    ``evaluation``: ``{group or dataset: score}`` (percent) when the model has been evaluated."""
    front = ["---", f"base_model: {base_model}", "library_name: " + ("vis_embed" if recipe.get("adaptation") == "head"
                                                      else "peft" if adapter else "transformers"),
             "tags:", "- vis_embed", "- embeddings", "- multimodal", "- sentence-similarity"]
    if adapter and recipe.get("adaptation") != "head":
        front.append("- lora")
    kind = "Projection head" if recipe.get("adaptation") == "head" else "LoRA adapter" if adapter else "Model"
    lines = front + ["---", "", f"# {kind} for `{base_model}` (vis_embed)", "",
                     "Instruction-conditioned multimodal embedding model trained with vis_embed "
                     "(last-token pooling, L2-normalised vectors, `chat` prompt format).", "",
                     "## Training", ""]
    lines += _table(["key", "value"], [("base model", base_model), ("steps completed", steps)]
                    + [(key, value) for key in CARD_RECIPE_KEYS if (value := get_dotted(recipe, key)) is not None])
    lines += ["", "## Data", ""]
    lines += _table(["dataset", "kind", "file", "weight"],
                    [(d.get("name"), d.get("kind"), d.get("path"), d.get("weight")) for d in datasets])
    lines += ["", "## Evaluation", ""]
    if evaluation:
        lines += _table(["benchmark group", "score"], [(name, f"{score:.2f}") for name, score in evaluation.items()])
    else:
        lines.append("Not evaluated when this card was written: `vis-embed eval --model BASE "
                     "--adapter THIS_DIR ...` (docs/evaluation.md).")
    lines += ["", "## Use", "", "```bash",
              f"vis-embed encode --model {base_model} --adapter THIS_DIR --input items.jsonl --output emb.npy",
              "vis-embed export --adapter THIS_DIR --out st_model   # sentence-transformers / vLLM",
              "```", ""]
    return "\n".join(lines)
