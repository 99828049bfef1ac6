"""Settings of an evaluation run and the vocabulary they draw on.

EvalSettings is a pydantic model like every validated config of the package: its bounds and
vocabularies are checked on construction (a SettingsError naming the field, or, from the command
line, the flag: :class:`vis_embed.config.Settings`), and ``vis-embed eval`` generates its flags from the fields
(:func:`vis_embed.config.add_model_arguments`: each field's ``json_schema_extra`` names its flag),
so a default or help text is written once.

Kept free of heavy imports (no torch, numpy or faiss) because the command line builds its
``--help`` from them before anything is loaded.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from vis_embed.config import Settings, flag, one_of

# The index vocabulary (and its one check) is vectors/index_spec's; the tie policies live beside
# the manifest's schema, which uses them too.
from vis_embed.vectors.index_spec import INDEX_NAMES, IndexSpec, check_rescore
from vis_embed.vectors.options import DIM_HELP
from vis_embed.data.eval_protocols import PROTOCOL_NAMES
from vis_embed.data.eval_options import DEFAULT_INDEX, DEFAULT_TIE_POLICY, TIE_POLICIES, index_name


MAX_EXAMPLES = 100  # queries in one retrieval grid


class EvalSettings(Settings):
    """How ``vis-embed eval`` (and :func:`vis_embed.evaluation.api.evaluate_encoder`) runs."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    batch_size: int = Field(16, gt=0, description="items per forward pass", json_schema_extra=flag("--batch-size"))
    max_queries: int | None = Field(None, gt=0, description="evaluate only the first N queries/rows",
                                    json_schema_extra=flag("--max-queries", metavar="N"))
    datasets: list[str] | None = Field(None, description="comma-separated dataset names (default: all)",
                                       json_schema_extra=flag("--datasets", parse="comma_list", metavar="A,B"))
    index: str = Field(
        DEFAULT_INDEX, description="gallery search, the kinds of vis-embed index: auto (the fastest exact kind for "
        "this machine, recorded in results.json), flat (exact, faiss float32; alias exact), exact-bf16 (flat at "
        "bf16: same exact result, bf16 shortlist + exact re-rank; several times faster on CPUs with AMX, slower "
        "without native bf16), exact-gpu (flat on the GPU), ivf-flat (alias ivf) or ivf-pq (approximate), binary "
        "(sign bits, Hamming) or int8 (8-bit codes); binary, int8 and ivf-pq take --rescore",
        json_schema_extra=flag("--index", choices=INDEX_NAMES))
    rescore: int = Field(0, ge=0, description="binary / int8 / ivf-pq index: shortlist K x depth hits from the "
                         "codes and re-rank them with the float vectors (0: the codes' own scores)",
                         json_schema_extra=flag("--rescore", metavar="K"))
    dim: int | None = Field(None, gt=0, description=DIM_HELP, json_schema_extra=flag("--dim", metavar="N"))
    depth: int | None = Field(None, gt=0, description="gallery ranking depth (unset: whole gallery up to 10k, "
                              "else 1000)", json_schema_extra=flag("--depth"))
    # at most MAX_EXAMPLES: a grid is a picture to look at (100 rows is ~16,000 pixels tall), and
    # its examples are held in memory while the dataset is ranked
    n_examples: int = Field(3, ge=0, le=MAX_EXAMPLES, description=f"queries per retrieval grid (0: no grids; at "
                            f"most {MAX_EXAMPLES})", json_schema_extra=flag("--examples"))
    tie_policy: str = Field(
        DEFAULT_TIE_POLICY, description="order of tied scores in candidate and gallery rankings: pessimistic (a "
        "negative tied with a positive ranks first, so a collapsed model scores 0) or first (listed order, as "
        "argmax in VLM2Vec's scorer: reproduces published MMEB numbers)",
        json_schema_extra=flag("--tie-policy", choices=TIE_POLICIES))
    save_runs: bool = Field(False, description="write each retrieval dataset's rankings as a TREC run "
                            "(OUT/runs/DATASET.trec) and its judgements (OUT/runs/DATASET.qrels), the files "
                            "ir_measures / pytrec_eval / ranx read", json_schema_extra=flag("--save-runs"))
    protocol: str | None = Field(None, description="evaluation protocol: vlm2vec (the manifest's instructions, 8 "
                                 "frames) or qwen3-vl-embedding (instruction in the system turn, none on "
                                 "candidates, 64 frames); unset: the manifest's `protocol`, else none (the "
                                 "manifest and the model as they are); recorded in results.json",
                                 json_schema_extra=flag("--protocol", choices=PROTOCOL_NAMES))
    cache_dir: Path | None = Field(None, description="embedding cache (unset: OUT/cache)",
                                   json_schema_extra=flag("--cache-dir"))
    shard_size: int = Field(1024, gt=0)  # items per embedding-cache shard (no flag)
    show_progress: bool = Field(True, description="no progress bars", json_schema_extra=flag("--quiet", negate=True))
    pictures: bool = Field(True, description="skip bar charts and retrieval grids",
                           json_schema_extra=flag("--no-pictures", negate=True))
    reference: Path | None = Field(None, description="published table CSV for results.md (unset: the paper's "
                                   "Table 1, shipped with vis_embed)", json_schema_extra=flag("--reference"))

    @field_validator("index")
    @classmethod
    def _known_index(cls, kind: str) -> str:
        return index_name(kind)

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, protocol: str | None) -> str | None:
        return protocol if protocol is None else one_of(protocol, PROTOCOL_NAMES, "protocol")

    @field_validator("tie_policy")
    @classmethod
    def _known_tie_policy(cls, policy: str) -> str:
        return one_of(policy, TIE_POLICIES, "tie policy")

    @field_validator("rescore")
    @classmethod
    def _rescore_fits_index(cls, rescore: int, info: ValidationInfo) -> int:
        # index is declared before rescore, so it is validated (or missing, when it failed) here
        return check_rescore(rescore, info.data.get("index", DEFAULT_INDEX))

    @property
    def index_spec(self) -> IndexSpec:
        """``--index`` and ``--rescore`` as one :class:`IndexSpec` (both checked when the settings
        were made): what the harness hands the layouts whole."""
        return IndexSpec.named(self.index, rescore=self.rescore)
