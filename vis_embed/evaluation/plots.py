"""Pictures of an evaluation: a bar chart per meta-task and retrieval grids.

A retrieval grid shows the dataset and the instruction its queries were encoded with, then,
for a few queries, the query (blue border) followed by its top-5 results, with a green border
for a positive and red for a negative and the cosine score underneath -- the fastest way to see *what* a model confuses.
Grids are drawn with PIL only (no font or backend dependencies); bar charts use
matplotlib's Agg backend at a fixed size of ``BAR_FIGSIZE x BAR_DPI`` pixels.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageOps

from vis_embed.data.image_guards import open_image
from vis_embed.data.images import is_url
from vis_embed.evaluation.layout_base import Example
from vis_embed.evaluation.metrics import RANKING_PRIMARIES
from vis_embed.evaluation.report import model_label
from vis_embed.io import atomic_path, safe_name

TILE = 128          # pixels of one image tile
GAP = 6             # border width around a tile (the colour carries the verdict)
CAPTION = 16        # text line under each tile
HEADER = 34         # two lines on top of a grid: the title, then the query instruction
HEADER_LINE = 15    # pixels per header line
HEADER_CHARS = 130  # characters that fit a header line of the default bitmap font
TOP_K = 5
QUERY_COLOUR, POSITIVE_COLOUR, NEGATIVE_COLOUR = (40, 90, 220), (20, 170, 60), (215, 40, 40)
BAR_FIGSIZE, BAR_DPI = (8.0, 4.0), 100


def grid_size(n_rows: int, tile: int = TILE, top_k: int = TOP_K) -> tuple[int, int]:
    """(width, height) in pixels of a grid with ``n_rows`` queries."""
    return (1 + top_k) * (tile + 2 * GAP), HEADER + n_rows * (tile + 2 * GAP + CAPTION)


def _tile(item: dict[str, Any], tile: int) -> Image.Image:
    """The item's image fitted into a square tile, or its text written on grey."""
    canvas = Image.new("RGB", (tile, tile), (235, 235, 235))
    image_path = item.get("image")
    if isinstance(image_path, str) and not is_url(image_path):
        try:
            with open_image(image_path) as image:  # the input allow-list (data/image_guards)
                fitted = ImageOps.contain(image.convert("RGB"), (tile, tile))
            canvas.paste(fitted, ((tile - fitted.width) // 2, (tile - fitted.height) // 2))
            return canvas
        except OSError:
            pass  # unreadable image: fall back to showing its text / path
    text = str(item.get("text") or image_path or "")
    lines = textwrap.wrap(text, width=max(8, tile // 7))[: max(1, tile // 12)]
    ImageDraw.Draw(canvas).multiline_text((4, 4), "\n".join(lines), fill=(20, 20, 20), spacing=1)
    return canvas


def retrieval_grid(examples: Sequence[Example], path: str | Path, title: str = "",
                   tile: int = TILE, top_k: int = TOP_K, instruction: str | None = None) -> Path:
    """Write a PNG: the title and the query ``instruction``, then one row per example: the query
    and its top-``top_k`` results.  The instruction is shown because it decides what "the same"
    means for the model (the same object, the same colour, ...)."""
    width, height = grid_size(len(examples), tile, top_k)
    grid = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(grid)
    draw.text((4, 3), textwrap.shorten(title, HEADER_CHARS, placeholder="..."), fill=(0, 0, 0))
    shown = textwrap.shorten(f"query instruction: {instruction or '(none)'}", HEADER_CHARS, placeholder="...")
    draw.text((4, 3 + HEADER_LINE), shown, fill=(70, 70, 70))
    cell_w, cell_h = tile + 2 * GAP, tile + 2 * GAP + CAPTION
    for row, example in enumerate(examples):
        top = HEADER + row * cell_h
        cells = [(example.query, QUERY_COLOUR, "query")]
        cells += [(item, POSITIVE_COLOUR if positive else NEGATIVE_COLOUR, f"{rank}: {score:.3f}")
                  for rank, (item, score, positive) in enumerate(example.results[:top_k], start=1)]
        for column, (item, colour, caption) in enumerate(cells):
            left = column * cell_w
            draw.rectangle([left, top, left + cell_w - 1, top + cell_w - 1], fill=colour)
            grid.paste(_tile(item, tile), (left + GAP, top + GAP))
            draw.text((left + GAP, top + cell_w), caption, fill=(0, 0, 0))
    path = Path(path)
    with atomic_path(path) as tmp:
        grid.save(tmp, format="PNG")
    return path


def meta_task_bars(results: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """One PNG per meta-task: the primary score (P@1; ndcg_linear@5 for qrels) of each of its
    datasets, with the meta-task mean as a line.

    The title names the model *and* the adapter, so the charts of a base model and of its
    trained adapter (e.g. the quickstart's before/after) cannot be mistaken for each other."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_task: dict[str, list[tuple[str, float]]] = {}
    primaries: dict[str, set[str]] = {}
    for name, entry in results["datasets"].items():
        primary = entry.get("primary", "P@1")
        if primary in RANKING_PRIMARIES:  # the scores the meta-task means are made of
            by_task.setdefault(entry["meta_task"], []).append((name, entry["metrics"][primary]))
            primaries.setdefault(entry["meta_task"], set()).add(primary)
    written = []
    for task, rows in by_task.items():
        figure, axes = plt.subplots(figsize=BAR_FIGSIZE, dpi=BAR_DPI)
        names, scores = zip(*rows, strict=True)
        colours = ["#2a9d8f" if results["datasets"][n].get("split") != "OOD" else "#e76f51" for n in names]
        axes.bar(range(len(names)), scores, color=colours)
        mean = results["groups"].get(task, sum(scores) / len(scores))
        axes.axhline(mean, color="black", linestyle="--", linewidth=1, label=f"{task} mean {mean:.1f}")
        axes.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
        axes.set_ylim(0, 100)
        metric = "Precision@1" if primaries[task] == {"P@1"} else " / ".join(sorted(primaries[task]))
        axes.set_ylabel(f"{metric} (%)")
        axes.set_title(f"{task}: {model_label(results.get('model', {}))} (teal IND, orange OOD)", fontsize=9)
        axes.legend(loc="upper right", fontsize=7)
        figure.tight_layout()
        path = Path(out_dir) / f"{safe_name(task)}.png"
        with atomic_path(path) as tmp:
            figure.savefig(tmp, format="png", dpi=BAR_DPI)
        plt.close(figure)
        written.append(path)
    return written
