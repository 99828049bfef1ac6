"""The evaluation harness: encode a benchmark once, score every dataset, aggregate, report.

The harness only needs an *encoder*: any object with ``encode(items, instruction=None,
batch_size=..., show_progress=..., base_dir=None) -> np.ndarray`` (L2-normalised rows) and
``fingerprint() -> str``.  ``vis_embed.model.Embedder`` is one; tests use fakes.

Per dataset it (1) parses the rows (:mod:`layouts`), (2) pools the distinct items of each
instruction so every distinct query/candidate is encoded exactly once, (3) encodes through
the :class:`~vis_embed.embedding_cache.EmbeddingCache` (content-keyed, sharded), (4)
scores, (5) renders a retrieval grid and (6) atomically writes ``datasets/<name>.json``.
A dataset whose result file carries the current key is skipped, so an interrupted run
resumes at the first unfinished dataset (and, inside it, at the first unfinished shard).

Under ``torchrun`` every rank runs the harness: the shards of each pool are dealt out across
the ranks, and rank 0 alone scores, renders and writes (the other ranks' ``run`` returns
None); which datasets are finished is rank 0's call, so every rank skips the same ones.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from vis_embed.data.benchmark import EvalDatasetSpec, check_file_stems
from vis_embed.data.items import ResolvedItem
from vis_embed.data.manifest import FILE_ROLES
from vis_embed.data.results_file import ResultsFile
from vis_embed.data.taxonomy import group_counts, group_means
from vis_embed.distributed import broadcast_object, is_main_process
from vis_embed.embedding_cache import CacheStats, ContentHasher, EmbeddingCache
from vis_embed.errors import ConfigError, DataError
from vis_embed.evaluation import layouts
from vis_embed.evaluation.layout_base import PreparedDataset, ScoringOptions
from vis_embed.evaluation.metrics import RANKING_PRIMARIES
from vis_embed.evaluation.mmeb_scores import write_mmeb_score_files
from vis_embed.evaluation.mmeb_v2_scores import prepared_data_version
from vis_embed.evaluation.plots import meta_task_bars, retrieval_grid
from vis_embed.evaluation.protocol_runs import apply_protocol, protocol_record
from vis_embed.evaluation.trec_runs import write_run_files
from vis_embed.evaluation.report import write_markdown
from vis_embed.evaluation.settings import EvalSettings
from vis_embed.vectors.stored_form import warn_if_not_matryoshka
from vis_embed.vectors.transforms import check_dim, truncate
from vis_embed.io import atomic_write_json, fingerprint_json, read_json_value, safe_name
from vis_embed.model.runtime.encoder import Encoder

log = logging.getLogger(__name__)

# Bump when a metric's definition changes so old per-dataset results are recomputed.
# 2: zero NearID margins are exactly 0; gallery cut-offs no longer miss the item at rank depth.
# 3: embeddings L2-normalised at the scoring boundary; a duplicate of the positive is a hit; AP
#    ties at their expectation (AP_pessimistic beside it); constant groups detected by range.
# 4: ndcg_linear@k beside NDCG@k; qrels datasets (primary ndcg_linear@5) join the group means.
# 5: asym_recall also reports R@3 (k 1, 3, 5 of the public code that defines the metric on TLL).
METRICS_VERSION = 5
PRIMARY_METRIC = "P@1"


def describe_encoder(encoder: Encoder, name: str | None = None, adapter: str | None = None) -> dict[str, Any]:
    """The ``model`` block of results.json: name, adapter, prompt format, pixels, fingerprints,
    and ``embedding_config``: every effective setting (EmbeddingConfig) when the encoder has one."""
    inner = getattr(encoder, "model", None)
    config = getattr(encoder, "embedding_config", None)
    settings = config.to_json() if hasattr(config, "to_json") else {}  # the encoder's settings, when it has them

    def lookup(attribute: str) -> Any:
        if settings.get(attribute) is not None:
            return settings[attribute]
        for owner in (encoder, inner):  # an Encoder without an EmbeddingConfig (tests' fakes, peers)
            if owner is not None and getattr(owner, attribute, None) is not None:
                value = getattr(owner, attribute)
                return value if isinstance(value, (str, int, float, bool)) else str(value)
        return None

    return {
        "name": name if name is not None else lookup("name_or_path"),
        "adapter": adapter if adapter is not None else lookup("adapter"),
        "prompt_format": lookup("prompt_format"),
        "pixels": {"min_pixels": lookup("min_pixels"), "max_pixels": lookup("max_pixels")},
        "fingerprints": {"model": encoder.fingerprint()},
        "embedding_config": config.to_json() if hasattr(config, "to_json") else None,
    }


class _ItemSigner:
    """An item's content signature (:meth:`ResolvedItem.signature`, image files by SHA-256)."""

    def __init__(self, hasher: ContentHasher) -> None:
        self.hasher = hasher

    def __call__(self, item: dict[str, Any]) -> str:
        return ResolvedItem.unchecked(item).signature(self.hasher.file)


@dataclass
class _Pool:
    instruction: str | None
    items: list[dict[str, Any]]
    key: str


def _build_pools(prepared: PreparedDataset, sign: _ItemSigner, encoder_fingerprint: str
                 ) -> tuple[list[_Pool], dict[str, tuple[int, np.ndarray]]]:
    """Distinct items per instruction, and for each side (pool number, row of each item)."""
    pools: dict[str | None, tuple[list[dict[str, Any]], dict[str, int]]] = {}
    side_rows: dict[str, tuple[str | None, np.ndarray]] = {}
    for side, (instruction, items) in prepared.sides.items():
        pool_items, positions = pools.setdefault(instruction, ([], {}))
        rows = []
        for item in items:
            signature = sign(item)
            if signature not in positions:
                positions[signature] = len(pool_items)
                pool_items.append(item)
            rows.append(positions[signature])
        side_rows[side] = (instruction, np.asarray(rows, dtype=np.int64))
    built, number = [], {}
    for pool_number, (instruction, (items, positions)) in enumerate(pools.items()):
        key = EmbeddingCache.key(encoder=encoder_fingerprint, instruction=instruction, items=list(positions))
        built.append(_Pool(instruction, items, key))
        number[instruction] = pool_number
    return built, {side: (number[instr], rows) for side, (instr, rows) in side_rows.items()}


class Harness:
    """Runs a list of :class:`EvalDatasetSpec` against one encoder into ``out_dir``."""

    def __init__(self, encoder: Encoder, out_dir: str | Path, settings: EvalSettings | None = None,
                 model_info: dict[str, Any] | None = None, cache_stats: CacheStats | None = None) -> None:
        self.encoder = encoder
        self.out_dir = Path(out_dir)
        self.settings = settings or EvalSettings()
        self.encoder_fingerprint = encoder.fingerprint()
        self.model_info = model_info or describe_encoder(encoder)
        self.cache = EmbeddingCache(self.settings.cache_dir or self.out_dir / "cache", self.settings.shard_size,
                                    cache_stats)
        self.hasher = ContentHasher()
        self.sign = _ItemSigner(self.hasher)

    def select(self, specs: Sequence[EvalDatasetSpec]) -> list[EvalDatasetSpec]:
        wanted = self.settings.datasets
        if not wanted:
            return list(specs)
        names = {spec.name for spec in specs}
        unknown = [name for name in wanted if name not in names]
        if unknown:
            raise ConfigError(f"unknown dataset(s) {unknown}; the manifest has {sorted(names)}")
        return [spec for spec in specs if spec.name in set(wanted)]

    def run(self, specs: Sequence[EvalDatasetSpec], benchmark_fingerprint: str | None = None) -> dict[str, Any] | None:
        """Results (also written to OUT); None on the ranks other than 0 of a torchrun launch."""
        width = getattr(self.encoder, "embedding_dim", None)
        if self.settings.dim is not None and isinstance(width, int):
            try:  # a setting whose bound is the model's width, known only now
                check_dim(self.settings.dim, width, field="--dim")
            except DataError as exc:
                raise ConfigError(str(exc)) from None
        if isinstance(width, int):
            warn_if_not_matryoshka(self.settings.dim, width,
                                   getattr(getattr(self.encoder, "embedding_config", None), "matryoshka_dims", None))
        selected = apply_protocol(self.select(specs), self.settings.protocol)
        check_file_stems(selected)  # specs built in code, too
        datasets: dict[str, dict[str, Any]] = {}
        progress = tqdm(selected, desc="datasets", unit="ds", disable=not self._show_progress())
        for spec in progress:
            progress.set_postfix_str(spec.name)
            datasets[spec.name] = self.run_dataset(spec)
        if not is_main_process():
            return None
        results = {"model": dict(self.model_info), "tie_policy": self.settings.tie_policy,
                   "dim": self.settings.dim or getattr(self.encoder, "embedding_dim", None),
                   **({"protocol": protocol_record(self.settings.protocol, self.model_info.get("embedding_config"))}
                      if self.settings.protocol else {}),
                   "datasets": datasets, "groups": aggregate(datasets), "counts": aggregate_counts(datasets)}
        if (data_version := prepared_data_version(selected)) is not None:  # which visdoc release was scored
            results["data_version"] = data_version
        if benchmark_fingerprint:
            results["model"].setdefault("fingerprints", {})["benchmark"] = benchmark_fingerprint
        self.write_outputs(results)
        return results

    def _dataset_key(self, spec: EvalDatasetSpec, prepared: PreparedDataset, pools: list[_Pool]) -> str:
        # where the manifest and files live is not what the result depends on (their content is)
        spec_fields = {key: value for key, value in asdict(spec).items()
                       if key not in (*FILE_ROLES, "manifest_path", "line", "benchmark_version")}
        spec_fields["options"] = spec.options.as_dict()
        spec_fields["files"] = {role: self.hasher.file(path) for role, path in spec.files.items()}
        spec_fields["image_root"] = None  # content matters, not where it lives
        return fingerprint_json({
            "encoder": self.encoder_fingerprint, "spec": spec_fields,
            "data": [self.hasher.file(path) for path in prepared.data_files],
            "pools": [pool.key for pool in pools], "max_queries": self.settings.max_queries,
            "index": self.settings.index, "depth": self.settings.depth,
            **({"dim": self.settings.dim} if self.settings.dim else {}),
            **({"rescore": self.settings.rescore} if self.settings.rescore else {}),
            # an unversioned manifest keeps the keys its results were saved under
            **({"benchmark_version": spec.benchmark_version} if spec.benchmark_version is not None else {}),
            "n_examples": self.settings.n_examples, "pictures": self.settings.pictures,
            "tie_policy": self.settings.tie_policy,
            **({"save_runs": True} if self.settings.save_runs else {}),  # a run written later is recomputed
            "metrics_version": METRICS_VERSION,
        })

    def _show_progress(self) -> bool:
        return self.settings.show_progress and is_main_process()  # one set of bars, not one per rank

    def _result_path(self, spec: EvalDatasetSpec) -> Path:
        return self.out_dir / "datasets" / f"{safe_name(spec.name)}.json"

    def _finished_result(self, spec: EvalDatasetSpec, key: str) -> dict[str, Any] | None:
        """The saved result of ``spec`` when its file carries ``key`` (rank 0 reads, every rank gets it)."""
        saved = None
        if is_main_process() and self._result_path(spec).exists():
            saved = read_json_value(self._result_path(spec))
        saved = broadcast_object(saved)
        if saved is None or saved.get("key") != key:
            return None
        log.info("%s: finished in a previous run (same fingerprint), skipped", spec.name)
        return saved["result"]

    def run_dataset(self, spec: EvalDatasetSpec) -> dict[str, Any] | None:
        """The dataset's result (rank 0; None on the other ranks of a torchrun launch)."""
        options = ScoringOptions(index=self.settings.index_spec, index_requested=self.settings.index,
                                         depth=self.settings.depth,
                                         n_examples=self.settings.n_examples, tie_policy=self.settings.tie_policy,
                                         save_runs=self.settings.save_runs)
        prepared = layouts.load_for_scoring(spec, self.settings.max_queries, options)
        pools, side_rows = _build_pools(prepared, self.sign, self.encoder_fingerprint)
        key = self._dataset_key(spec, prepared, pools)
        finished = self._finished_result(spec, key)
        if finished is not None:
            return finished
        pool_embeddings = [self._encode_pool(spec, pool) for pool in pools]
        if not is_main_process():
            return None
        # the cache holds full-width vectors: one cache serves every --dim
        embeddings = {side: truncate(pool_embeddings[number][rows], self.settings.dim)
                      for side, (number, rows) in side_rows.items()}
        outcome = prepared.score(embeddings)
        result = {
            "meta_task": spec.meta_task, "split": spec.split, "benchmark": spec.benchmark,
            **({"modality": spec.modality} if spec.modality else {}),
            "layout": spec.layout, "n_queries": outcome.n_queries, "primary": outcome.primary,
            "metrics": outcome.metrics, **outcome.extra, "fingerprint": key,
            **({"benchmark_version": spec.benchmark_version} if spec.benchmark_version is not None else {}),
        }
        if outcome.run is not None:  # before the result file: a finished dataset has its runs
            run_path, qrels_path = write_run_files(outcome.run, self.out_dir, spec.name)
            result["runs"] = {"run": str(run_path.relative_to(self.out_dir)),
                              "qrels": str(qrels_path.relative_to(self.out_dir))}
        if self.settings.pictures and outcome.examples:
            grid_path = self.out_dir / "grids" / f"{safe_name(spec.name)}.png"
            retrieval_grid(outcome.examples, grid_path, title=f"{spec.name} ({spec.meta_task})",
                           instruction=spec.query_instruction)
            result["grid"] = str(grid_path.relative_to(self.out_dir))
        atomic_write_json(self._result_path(spec), {"key": key, "result": result})
        return result

    def _encode_pool(self, spec: EvalDatasetSpec, pool: _Pool) -> np.ndarray | None:
        def encode(chunk: Sequence[dict[str, Any]]) -> np.ndarray:
            return self.encoder.encode(list(chunk), instruction=pool.instruction,
                                       batch_size=self.settings.batch_size,
                                       show_progress=self._show_progress())

        try:
            return self.cache.get_or_encode(pool.key, pool.items, encode)
        except DataError as exc:
            if exc.path is None or str(exc.path).startswith("items["):  # nothing that names the dataset
                raise DataError(f"dataset {spec.name!r}: {exc}", path=spec.manifest_path, line=spec.line,
                                field=exc.field) from None
            raise

    def write_outputs(self, results: dict[str, Any]) -> None:
        path = self.out_dir / "results.json"
        # what is written must read back as the readers' record (data/results_file.ResultsFile):
        # a writer that drifts from it fails here, not in a reader later
        ResultsFile.of_file(results, path)
        atomic_write_json(path, results)
        write_mmeb_score_files(results, self.out_dir)  # VLM2Vec / MMEB leaderboard format
        write_markdown(results, self.out_dir / "results.md", self.settings.reference)
        if self.settings.pictures:
            meta_task_bars(results, self.out_dir / "plots")


def _group_rows(datasets: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per dataset scored by a ranking primary (RANKING_PRIMARIES), with its primary score.

    Peer-protocol datasets (2AFC, SSR, AP, ...) report other quantities and are not mixed
    into the meta-task / IND / OOD / overall means."""
    return [{"meta_task": d["meta_task"], "split": d.get("split"), "benchmark": d.get("benchmark"),
             "modality": d.get("modality"), "score": d["metrics"][d.get("primary", PRIMARY_METRIC)]}
            for d in datasets.values() if d.get("primary", PRIMARY_METRIC) in RANKING_PRIMARIES]


def aggregate(datasets: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Group means (percent) of the datasets' primary scores (P@1; ndcg_linear@5 for qrels)."""
    return group_means(_group_rows(datasets))


def aggregate_counts(datasets: dict[str, dict[str, Any]]) -> dict[str, int]:
    """How many datasets each group of :func:`aggregate` covers."""
    return group_counts(_group_rows(datasets))
