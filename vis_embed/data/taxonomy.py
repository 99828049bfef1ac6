"""Benchmark taxonomy: which meta-task and split (IND/OOD) each dataset belongs to.

Group keys are spelled exactly as in the VisME paper's Table 1 and in ``results.json``.
Aggregation rule (how MMEB's published scores are computed): a meta-task score is the
unweighted mean of its datasets; IND, OOD, per-benchmark and overall scores are unweighted
means over *datasets*, not over meta-tasks.  MMEB-V2 (VLM2Vec-V2, Meng et al. 2025) adds 42 tasks
to MMEB's 36 image datasets: 18 video and 24 visual-document tasks; its rows (``benchmark:
MMEB-V2``) are grouped by meta-task, by modality (``Image`` / ``Video`` / ``VisDoc``) and into
``MMEB-V2``, the mean over every task present (VLM2Vec's report_score_v2: a modality is the mean
of its tasks, the overall the mean over all 78), each with the number of tasks it covers
(:func:`group_counts`); MMEB-V2 rows have no IND / OOD split.  IND / OOD are reported per benchmark
(``MMEB-IND``, ``MVEB-OOD``, ...), as the papers do; the bare ``IND`` / ``OOD`` keys appear only
when one benchmark's datasets hold that split (they then equal its per-benchmark key), and a
mean over the datasets of several benchmarks is labelled ``IND_pooled`` / ``OOD_pooled``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

MMEB_META_TASKS: tuple[str, ...] = ("Cls", "VQA", "Ret", "Grd")
MVEB_META_TASKS: tuple[str, ...] = ("ID-Rec", "Re-ID", "ID-Grd", "ID-Edit")
SPLITS: tuple[str, ...] = ("IND", "OOD")
BENCHMARKS: tuple[str, ...] = ("MMEB", "MVEB")  # the ones with an IND / OOD split
MMEB_V2 = "MMEB-V2"
VIDEO_META_TASKS: tuple[str, ...] = ("V-CLS", "V-QA", "V-RET", "V-MRET")
VISDOC_META_TASKS: tuple[str, ...] = ("VDRv1", "VDRv2", "VR", "VD-OOD")
MMEB_V2_META_TASKS: tuple[str, ...] = (*MMEB_META_TASKS, *VIDEO_META_TASKS, *VISDOC_META_TASKS)
MODALITIES: tuple[str, ...] = ("image", "video", "visdoc")
# the group key of each modality, as the VLM2Vec-V2 paper's table spells its columns
MODALITY_GROUPS: dict[str, str] = {"image": "Image", "video": "Video", "visdoc": "VisDoc"}
BENCHMARK_SPLIT_KEYS: tuple[str, ...] = tuple(f"{b}-{s}" for b in BENCHMARKS for s in SPLITS)
POOLED_SPLIT_KEYS: tuple[str, ...] = tuple(f"{s}_pooled" for s in SPLITS)
# The order group keys are reported in.
GROUP_KEYS: tuple[str, ...] = (*MMEB_META_TASKS, *MVEB_META_TASKS, *BENCHMARK_SPLIT_KEYS, *SPLITS,
                               *POOLED_SPLIT_KEYS, "MMEB", "MVEB", *VIDEO_META_TASKS, *VISDOC_META_TASKS,
                               *MODALITY_GROUPS.values(), MMEB_V2, "overall")

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


# MMEB-V2's 42 video and visual-document tasks (names as in VLM2Vec's report_score_v2.py and its
# score files) -> meta-task.  Its 36 image tasks are MMEB_DATASETS.
MMEB_V2_VIDEO_TASKS: dict[str, str] = {
    **dict.fromkeys(("K700", "SmthSmthV2", "HMDB51", "UCF101", "Breakfast"), "V-CLS"),
    **dict.fromkeys(("MVBench", "Video-MME", "NExTQA", "EgoSchema", "ActivityNetQA"), "V-QA"),
    **dict.fromkeys(("DiDeMo", "MSR-VTT", "MSVD", "VATEX", "YouCook2"), "V-RET"),
    **dict.fromkeys(("QVHighlight", "Charades-STA", "MomentSeeker"), "V-MRET"),
}
MMEB_V2_VISDOC_TASKS: dict[str, str] = {
    **dict.fromkeys(("ViDoRe_arxivqa", "ViDoRe_docvqa", "ViDoRe_infovqa", "ViDoRe_tabfquad", "ViDoRe_tatdqa",
                     "ViDoRe_shiftproject", "ViDoRe_syntheticDocQA_artificial_intelligence",
                     "ViDoRe_syntheticDocQA_energy", "ViDoRe_syntheticDocQA_government_reports",
                     "ViDoRe_syntheticDocQA_healthcare_industry"), "VDRv1"),
    **dict.fromkeys(("ViDoRe_esg_reports_human_labeled_v2", "ViDoRe_biomedical_lectures_v2_multilingual",
                     "ViDoRe_economics_reports_v2_multilingual", "ViDoRe_esg_reports_v2_multilingual"), "VDRv2"),
    **dict.fromkeys(("VisRAG_ArxivQA", "VisRAG_ChartQA", "VisRAG_MP-DocVQA", "VisRAG_SlideVQA", "VisRAG_InfoVQA",
                     "VisRAG_PlotQA"), "VR"),
    **dict.fromkeys(("ViDoSeek-page", "ViDoSeek-doc", "MMLongBench-page", "MMLongBench-doc"), "VD-OOD"),
}
# modality -> {task: meta-task}: the 78 tasks (36 + 18 + 24)
MMEB_V2_TASKS: dict[str, dict[str, str]] = {
    "image": {name: meta_task for name, (meta_task, _split) in MMEB_DATASETS.items()},
    "video": MMEB_V2_VIDEO_TASKS,
    "visdoc": MMEB_V2_VISDOC_TASKS,
}


def benchmark_of_meta_task(meta_task: str) -> str | None:
    """``"MMEB"`` / ``"MVEB"`` / ``"MMEB-V2"`` (video, visdoc meta-tasks) for a known meta-task, else None.

    MMEB's image meta-tasks are MMEB's: an MMEB-V2 image task says ``benchmark: MMEB-V2``."""
    if meta_task in MMEB_META_TASKS:
        return "MMEB"
    if meta_task in MVEB_META_TASKS:
        return "MVEB"
    if meta_task in VIDEO_META_TASKS or meta_task in VISDOC_META_TASKS:
        return MMEB_V2
    return None


def modality_of_meta_task(meta_task: str) -> str | None:
    """The MMEB-V2 modality a meta-task belongs to (image for MMEB's four), else None."""
    for modality, meta_tasks in (("image", MMEB_META_TASKS), ("video", VIDEO_META_TASKS),
                                 ("visdoc", VISDOC_META_TASKS)):
        if meta_task in meta_tasks:
            return modality
    return None


def mmeb_v2_entry(task: str) -> dict[str, str]:
    """``{"meta_task", "modality", "benchmark"}`` of an MMEB-V2 task name (KeyError if unknown)."""
    for modality, tasks in MMEB_V2_TASKS.items():
        if task in tasks:
            return {"meta_task": tasks[task], "modality": modality, "benchmark": MMEB_V2}
    raise KeyError(task)


def mmeb_entry(dataset: str) -> dict[str, str]:
    """``{"meta_task", "split", "benchmark"}`` of an MMEB dataset name (KeyError if unknown)."""
    meta_task, split = MMEB_DATASETS[dataset]
    return {"meta_task": meta_task, "split": split, "benchmark": "MMEB"}


def group_means(rows: Iterable[Mapping[str, object]]) -> dict[str, float]:
    """Group scores from per-dataset rows ``{"meta_task", "split", "benchmark"?, "modality"?, "score"}``.

    Every group is the unweighted mean of the scores of its *datasets*: a meta-task over
    its datasets, and ``MMEB-IND`` / ``MVEB-OOD`` / ... / ``MMEB`` / ``MVEB`` / ``overall``
    directly over the datasets they contain (not over meta-task means).  ``IND`` / ``OOD``
    are kept when every dataset of the split has one benchmark; a split whose datasets come
    from several benchmarks is reported as ``IND_pooled`` / ``OOD_pooled`` instead, so a
    pooled figure is never mistaken for the papers' per-benchmark one.  ``benchmark``
    defaults to the one implied by the meta-task.  An ``MMEB-V2`` row joins its meta-task, its
    modality's group (``Image`` / ``Video`` / ``VisDoc``; ``modality`` defaults to the
    meta-task's) and ``MMEB-V2``.  Groups with no dataset are omitted; keys come out in
    :data:`GROUP_KEYS` order, followed by free-text meta-tasks in first-seen order.
    """
    members = _group_members(rows)
    return {key: sum(values) / len(values) for key, values in members.items()}


def group_counts(rows: Iterable[Mapping[str, object]]) -> dict[str, int]:
    """How many datasets each group of :func:`group_means` (same rows) averages over."""
    return {key: len(values) for key, values in _group_members(rows).items()}


def _group_keys(row: Mapping[str, object], split_benchmarks: dict[str, set[object]]) -> list[str]:
    """The groups one row belongs to (the one membership rule of group_means and group_counts)."""
    meta_task = str(row["meta_task"])
    benchmark = row.get("benchmark") or benchmark_of_meta_task(meta_task)
    keys = [meta_task, "overall"]
    if benchmark == MMEB_V2:
        modality = row.get("modality") or modality_of_meta_task(meta_task)
        if modality in MODALITY_GROUPS:
            keys.append(MODALITY_GROUPS[str(modality)])
        return [*keys, MMEB_V2]
    split = row.get("split")
    if split in SPLITS:
        keys.append(str(split))
        split_benchmarks.setdefault(str(split), set()).add(benchmark)
        if benchmark in BENCHMARKS:
            keys.append(f"{benchmark}-{split}")
    if benchmark in BENCHMARKS:
        keys.append(str(benchmark))
    return keys


def _group_members(rows: Iterable[Mapping[str, object]]) -> dict[str, list[float]]:
    members: dict[str, list[float]] = {}
    split_benchmarks: dict[str, set[object]] = {}
    for row in rows:
        score = float(row["score"])  # type: ignore[arg-type]
        for key in _group_keys(row, split_benchmarks):
            members.setdefault(key, []).append(score)
    for split, benchmarks in split_benchmarks.items():
        if len(benchmarks) > 1:
            members[f"{split}_pooled"] = members.pop(split)
    ordered = [k for k in GROUP_KEYS if k in members] + [k for k in members if k not in GROUP_KEYS]
    return {key: members[key] for key in ordered}
