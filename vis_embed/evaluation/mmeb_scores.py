"""MMEB result files in VLM2Vec's format, so results drop into the MMEB leaderboard tooling.

``vis-embed eval`` writes, next to results.json, for every MMEB image dataset it scored::

    OUT/mmeb_scores/image/<DATASET>_score.json
        {"acc": 0.62, "hit@1": 0.62, "num_correct": 620, "num_pred": 1000}
    OUT/mmeb_scores/<MODEL>.json
        {"metadata": {"model_name": ..., "data_version": ...}, "metrics": {"image": {<DATASET>: <the same dict>}}}

The per-dataset files are what VLM2Vec's ``eval.py`` writes (``acc`` / ``num_correct`` /
``num_pred``; fractions, not percent) with ``hit@1`` added, the key its MMEB-V2 report script
(``experiments/report_score_v2.py``) reads from ``<path>/image/*_score.json``.  MMEB-V2's video
and visdoc tasks (benchmark ``MMEB-V2``, names of ``MMEB_V2_TASKS``) go to
``OUT/mmeb_scores/{video,visdoc}/<TASK>_score.json`` with ``hit@1``, ``ndcg_linear@5`` /
``@10``, ``recall@k``, ``mrr`` (fractions; report_score_v2 reads hit@1 for video and
ndcg_linear@5 for visdoc) and ``num_pred``; the combined
file is that script's output, the leaderboard's submission format, and what ``vis-embed
report`` and the peer files in :mod:`vis_embed.resources` use.  ``hit@1`` is our P@1 (under
the run's tie policy; ``first`` reproduces VLM2Vec's argmax).  Datasets that are not among
MMEB's 36 (MVEB, custom) and peer-protocol datasets stay in results.json only.

``metadata.data_version`` (with visdoc tasks only) is results.json's: which release of the
re-released visdoc sets the run scored (``page-fixed``, else ``unknown``; see
:mod:`vis_embed.evaluation.mmeb_v2_scores`), stated because the task names cannot say it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vis_embed.data.results_file import DatasetResult, ResultsFile
from vis_embed.data.taxonomy import MMEB_DATASETS, MMEB_V2, MMEB_V2_TASKS
from vis_embed.errors import DataError
from vis_embed.evaluation.mmeb_v2_scores import UNKNOWN, data_version
from vis_embed.io import atomic_write_json, read_json_value, safe_name

SCORE_DIR = "mmeb_scores"
SCORE_SUFFIX = "_score.json"


def dataset_score(entry: DatasetResult) -> dict[str, Any]:
    """One results.json dataset entry as a VLM2Vec score dict (fractions)."""
    hit_at_1 = float(entry.metrics["P@1"]) / 100.0
    n_queries = int(entry.n_queries)
    return {"acc": hit_at_1, "hit@1": hit_at_1, "num_correct": int(round(hit_at_1 * n_queries)),
            "num_pred": n_queries}


def mmeb_scores(results: ResultsFile | dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{MMEB dataset: score dict}`` of the MMEB datasets scored by P@1 in ``results``."""
    return {name: dataset_score(entry) for name, entry in ResultsFile.of(results).datasets.items()
            if name in MMEB_DATASETS and entry.primary_metric == "P@1"}


def ranking_score(entry: DatasetResult) -> dict[str, Any]:
    """A video / visdoc task's results.json entry as VLM2Vec's score dict (fractions)."""
    ours = entry.metrics
    names = {"hit@1": "hit@1", "hit@5": "hit@5", "hit@10": "hit@10", "ndcg_linear@5": "ndcg_linear@5",
             "ndcg_linear@10": "ndcg_linear@10", "recall@1": "recall@1", "recall@5": "recall@5",
             "recall@10": "recall@10", "mrr": "MRR"}
    return {**{theirs: float(ours[key]) / 100.0 for theirs, key in names.items() if key in ours},
            "num_pred": int(entry.n_queries)}


def mmeb_v2_scores(results: ResultsFile | dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{"video" | "visdoc": {task: score dict}}`` of the MMEB-V2 video and visdoc tasks in ``results``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, entry in ResultsFile.of(results).datasets.items():
        modality = entry.modality
        if entry.benchmark == MMEB_V2 and modality in ("video", "visdoc") and name in MMEB_V2_TASKS[modality]:
            out.setdefault(modality, {})[name] = ranking_score(entry)
    return out


def write_mmeb_score_files(results: ResultsFile | dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Write the per-dataset and combined files under ``OUT/mmeb_scores``; [] if no MMEB dataset."""
    results = ResultsFile.of(results)
    by_modality = {"image": mmeb_scores(results), **mmeb_v2_scores(results)}
    by_modality = {modality: scores for modality, scores in by_modality.items() if scores}
    if not by_modality:
        return []
    folder = Path(out_dir) / SCORE_DIR
    written = [atomic_write_json(folder / modality / f"{name}{SCORE_SUFFIX}", score)
               for modality, scores in by_modality.items() for name, score in scores.items()]
    model_name = results.model.name_with_adapter("model")
    metadata = {"model_name": model_name, "data_source": "Self-Reported", "tie_policy": results.tie_policy}
    if "visdoc" in by_modality:  # stated: a visdoc file that says nothing is read as the first release
        metadata["data_version"] = results.data_version or UNKNOWN
    combined = {"metadata": metadata, "metrics": by_modality}
    written.append(atomic_write_json(folder / f"{safe_name(Path(str(model_name)).name)}.json", combined))
    return written


def _read_folder(folder: Path) -> dict[str, Any]:
    per_dataset: dict[str, Any] = {}
    for path in sorted(folder.glob(f"*{SCORE_SUFFIX}")):
        per_dataset[path.name.removesuffix(SCORE_SUFFIX)] = read_json_value(path)
    return per_dataset


def read_score_folder(folder: str | Path) -> dict[str, Any]:
    """A folder of per-dataset ``<DATASET>_score.json`` files (``folder`` or ``folder/image``, and
    MMEB-V2's ``folder/video``, ``folder/visdoc``) as the combined ``{"metrics": {...}}`` form."""
    folder = Path(folder)
    image = folder / "image" if (folder / "image").is_dir() else folder
    metrics = {"image": _read_folder(image),
               **{modality: _read_folder(folder / modality) for modality in ("video", "visdoc")
                  if (folder / modality).is_dir()}}
    metrics = {modality: scores for modality, scores in metrics.items() if scores}
    if not metrics:
        raise DataError(f"no *{SCORE_SUFFIX} files (VLM2Vec per-dataset scores)", path=image)
    for values in metrics.get("image", {}).values():
        if isinstance(values, dict) and "hit@1" not in values and "acc" in values:
            values["hit@1"] = values["acc"]  # VLM2Vec v1 files name the same quantity acc
    # per-task files state no data release: unknown, unless their names say page-fixed
    version = data_version({"metrics": metrics}, unstated=UNKNOWN)
    return {**({"metadata": {"data_version": version}} if version else {}), "metrics": metrics}
