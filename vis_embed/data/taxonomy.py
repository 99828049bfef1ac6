"""Benchmark taxonomy: which meta-task and split (IND/OOD) each dataset belongs to.

Group keys are spelled exactly as in the VisME paper's Table 1 and in ``results.json``.
Aggregation rule (how MMEB's published scores are computed): a meta-task score is the
unweighted mean of its datasets; IND, OOD, per-benchmark and overall scores are unweighted
means over *datasets*, not over meta-tasks.  IND / OOD are reported per benchmark
(``MMEB-IND``, ``MVEB-OOD``, ...), as the papers do; the bare ``IND`` / ``OOD`` keys appear only
when one benchmark's datasets hold that split (they then equal its per-benchmark key), and a
mean over the datasets of several benchmarks is labelled ``IND_pooled`` / ``OOD_pooled``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

MMEB_META_TASKS: tuple[str, ...] = ("Cls", "VQA", "Ret", "Grd")
MVEB_META_TASKS: tuple[str, ...] = ("ID-Rec", "Re-ID", "ID-Grd", "ID-Edit")
SPLITS: tuple[str, ...] = ("IND", "OOD")
BENCHMARKS: tuple[str, ...] = ("MMEB", "MVEB")
BENCHMARK_SPLIT_KEYS: tuple[str, ...] = tuple(f"{b}-{s}" for b in BENCHMARKS for s in SPLITS)
POOLED_SPLIT_KEYS: tuple[str, ...] = tuple(f"{s}_pooled" for s in SPLITS)
# The order group keys are reported in.
GROUP_KEYS: tuple[str, ...] = (*MMEB_META_TASKS, *MVEB_META_TASKS, *BENCHMARK_SPLIT_KEYS, *SPLITS,
                               *POOLED_SPLIT_KEYS, "MMEB", "MVEB", "overall")

# MMEB (VLM2Vec, Jiang et al. 2024): 36 datasets; 20 in-distribution (used for training),
# 16 out-of-distribution.  Names as in the released MMEB-eval files and VLM2Vec score files.
MMEB_DATASETS: dict[str, tuple[str, str]] = {
    # Classification
    "ImageNet-1K": ("Cls", "IND"), "N24News": ("Cls", "IND"), "HatefulMemes": ("Cls", "IND"),
    "VOC2007": ("Cls", "IND"), "SUN397": ("Cls", "IND"),
    "Place365": ("Cls", "OOD"), "ImageNet-A": ("Cls", "OOD"), "ImageNet-R": ("Cls", "OOD"),
    "ObjectNet": ("Cls", "OOD"), "Country211": ("Cls", "OOD"),
    # Visual question answering
    "OK-VQA": ("VQA", "IND"), "A-OKVQA": ("VQA", "IND"), "DocVQA": ("VQA", "IND"),
    "InfographicsVQA": ("VQA", "IND"), "ChartQA": ("VQA", "IND"), "Visual7W": ("VQA", "IND"),
    "ScienceQA": ("VQA", "OOD"), "VizWiz": ("VQA", "OOD"), "GQA": ("VQA", "OOD"),
    "TextVQA": ("VQA", "OOD"),
    # Retrieval
    "VisDial": ("Ret", "IND"), "CIRR": ("Ret", "IND"), "VisualNews_t2i": ("Ret", "IND"),
    "VisualNews_i2t": ("Ret", "IND"), "MSCOCO_t2i": ("Ret", "IND"), "MSCOCO_i2t": ("Ret", "IND"),
    "NIGHTS": ("Ret", "IND"), "WebQA": ("Ret", "IND"),
    "OVEN": ("Ret", "OOD"), "FashionIQ": ("Ret", "OOD"), "EDIS": ("Ret", "OOD"),
    "Wiki-SS-NQ": ("Ret", "OOD"),
    # Visual grounding
    "MSCOCO": ("Grd", "IND"),
    "RefCOCO": ("Grd", "OOD"), "RefCOCO-Matching": ("Grd", "OOD"), "Visual7W-Pointing": ("Grd", "OOD"),
}


def benchmark_of_meta_task(meta_task: str) -> str | None:
    """``"MMEB"`` / ``"MVEB"`` for a known meta-task, else None."""
    if meta_task in MMEB_META_TASKS:
        return "MMEB"
    if meta_task in MVEB_META_TASKS:
        return "MVEB"
    return None


def mmeb_entry(dataset: str) -> dict[str, str]:
    """``{"meta_task", "split", "benchmark"}`` of an MMEB dataset name (KeyError if unknown)."""
    meta_task, split = MMEB_DATASETS[dataset]
    return {"meta_task": meta_task, "split": split, "benchmark": "MMEB"}


def group_means(rows: Iterable[Mapping[str, object]]) -> dict[str, float]:
    """Group scores from per-dataset rows ``{"meta_task", "split", "benchmark"?, "score"}``.

    Every group is the unweighted mean of the scores of its *datasets*: a meta-task over
    its datasets, and ``MMEB-IND`` / ``MVEB-OOD`` / ... / ``MMEB`` / ``MVEB`` / ``overall``
    directly over the datasets they contain (not over meta-task means).  ``IND`` / ``OOD``
    are kept when every dataset of the split has one benchmark; a split whose datasets come
    from several benchmarks is reported as ``IND_pooled`` / ``OOD_pooled`` instead, so a
    pooled figure is never mistaken for the papers' per-benchmark one.  ``benchmark``
    defaults to the one implied by the meta-task.  Groups with no dataset are omitted; keys
    come out in :data:`GROUP_KEYS` order, followed by free-text meta-tasks in first-seen order.
    """
    members: dict[str, list[float]] = {}
    split_benchmarks: dict[str, set[object]] = {}
    for row in rows:
        score = float(row["score"])  # type: ignore[arg-type]
        meta_task = str(row["meta_task"])
        benchmark = row.get("benchmark") or benchmark_of_meta_task(meta_task)
        keys = [meta_task, "overall"]
        split = row.get("split")
        if split in SPLITS:
            keys.append(str(split))
            split_benchmarks.setdefault(str(split), set()).add(benchmark)
            if benchmark in BENCHMARKS:
                keys.append(f"{benchmark}-{split}")
        if benchmark in BENCHMARKS:
            keys.append(str(benchmark))
        for key in keys:
            members.setdefault(key, []).append(score)
    for split, benchmarks in split_benchmarks.items():
        if len(benchmarks) > 1:
            members[f"{split}_pooled"] = members.pop(split)
    ordered = [k for k in GROUP_KEYS if k in members] + [k for k in members if k not in GROUP_KEYS]
    return {key: sum(members[key]) / len(members[key]) for key in ordered}
