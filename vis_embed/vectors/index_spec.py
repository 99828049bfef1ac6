"""The one index vocabulary: :class:`IndexSpec` (what to build) and the rules every index obeys.

``vis-embed eval --index``, ``vis-embed index --kind``, ``vis-embed search`` and ``serve --index``
name their index from one set of kinds:

- ``flat``: exact inner products over the float vectors (faiss ``IndexFlatIP``; ``precision``
  ``bfloat16``: the same top-k via a bf16 shortlist re-ranked exactly; ``device`` ``gpu``: torch);
- ``binary`` / ``int8``: quantized codes (1 bit / 1 byte a dimension), approximate;
- ``ivf-flat``: inverted lists of float vectors, ``nprobe`` of ``nlist`` lists visited;
- ``ivf-pq``: inverted lists of product-quantized codes (``pq_bytes`` a vector);
- ``auto``: chosen by :func:`vis_embed.gallery.index_choice.resolve_index` (a memory budget
  for a stored index, else this machine's fastest exact search).

The flat kind's variants have names of their own (:data:`FLAT_VARIANTS`): ``flat-bf16`` (flat at
bfloat16) and ``flat-gpu`` (flat on the GPU).  Eval's earlier names stay as aliases with the same
meaning (:data:`ALIASES`): ``exact`` = flat, ``exact-bf16`` = flat-bf16, ``exact-gpu`` =
flat-gpu, ``ivf`` = ivf-flat.  A name
(``--index``, a manifest's ``options.index``, ``index --kind``) is checked here only
(:func:`check_index_name`) and parsed into a spec (:meth:`IndexSpec.named`) where it enters;
past that the spec travels whole, and what is recorded is its canonical kind.

The rules written once here: bytes per vector (:func:`bytes_per_vector`, :attr:`IndexSpec.bytes_per_vector`),
which kinds re-rank a shortlist (:func:`check_rescore`), the IVF list count and probe count
(:func:`ivf_lists`, :func:`default_nprobe`) and the product quantizer's code size
(:func:`pq_bytes_for`).  No numpy, torch or faiss: ``--help`` reads it.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from vis_embed.config import Settings
from vis_embed.errors import ConfigError

AUTO = "auto"
KINDS: tuple[str, ...] = (AUTO, "flat", "binary", "int8", "ivf-flat", "ivf-pq")
# kinds `vis-embed index` writes to disk (gallery/store.py; index.json's kind) and --kind offers
STORED_KINDS: tuple[str, ...] = ("flat", "binary", "int8", "ivf-pq")
STORE_KINDS: tuple[str, ...] = (AUTO, *STORED_KINDS)
# the flat kind's named variants: its products at bf16 (a certified shortlist), or on the GPU
FLAT_VARIANTS: dict[str, dict[str, str]] = {
    "flat-bf16": {"kind": "flat", "precision": "bfloat16"},
    "flat-gpu": {"kind": "flat", "device": "gpu"},
}
# eval's earlier --index names (a contract: still read, same meaning): each is one spec above
ALIASES: dict[str, dict[str, str]] = {
    "exact": {"kind": "flat"},
    "exact-bf16": FLAT_VARIANTS["flat-bf16"],
    "exact-gpu": FLAT_VARIANTS["flat-gpu"],
    "ivf": {"kind": "ivf-flat"},
}
_SPELLED: dict[str, dict[str, str]] = {**FLAT_VARIANTS, **ALIASES}
# every name an index may be given (eval's --index and a manifest's options.index)
INDEX_NAMES: tuple[str, ...] = KINDS + tuple(FLAT_VARIANTS) + tuple(ALIASES)
RESCORED_KINDS: tuple[str, ...] = ("binary", "int8", "ivf-pq")  # codes whose shortlist floats re-rank
DEFAULT_RESCORE = 4            # a stored code index's shortlist factor: 4 x k, re-ranked with floats
IVF_ID_BYTES = 8               # an inverted list stores an int64 id beside each code
IVF_MIN_POINTS = 39            # faiss warns below 39 training points per list
# bits one coordinate takes at each precision (encode's --precision and the index kinds' codes)
BITS: dict[str, int] = {"float32": 32, "float16": 16, "bfloat16": 16, "int8": 8, "uint8": 8,
                        "binary": 1, "ubinary": 1}
_KIND_PRECISION = {"flat": "float32", "ivf-flat": "float32", "int8": "int8", "binary": "ubinary"}


def bytes_per_vector(precision: str, dim: int) -> int:
    """Bytes one vector of width ``dim`` takes at ``precision`` (codes only; bits packed 8 to a byte)."""
    if precision not in BITS:
        raise ConfigError(f"unknown precision {precision!r} (known: {', '.join(BITS)})")
    return -(-dim * BITS[precision] // 8)


def ivf_lists(rows: int) -> int:
    """Inverted lists for ``rows`` vectors: ~4 sqrt(N) (faiss' guidance), at least
    :data:`IVF_MIN_POINTS` training points a list."""
    return max(1, min(int(4 * math.sqrt(rows)), rows // IVF_MIN_POINTS))


def default_nprobe(kind: str, nlist: int) -> int:
    """Lists a query visits when none is given.  ivf-flat scans floats: nlist / 8.  ivf-pq scores
    cheap codes and re-ranks a shortlist: nlist / 16 but at least 8 (the rates each was measured at)."""
    if kind == "ivf-pq":
        return min(nlist, max(8, nlist // 16))
    return max(1, nlist // 8)


def pq_bytes_for(dim: int, budget_per_vector: float) -> int | None:
    """The most product-quantizer bytes per vector (a divisor of ``dim``, at most 64) within
    ``budget_per_vector`` (codes + id); None when not even one byte fits."""
    fitting = [m for m in range(1, min(64, dim) + 1) if dim % m == 0 and m + IVF_ID_BYTES <= budget_per_vector]
    return max(fitting) if fitting else None


def check_index_name(name: Any, known: tuple[str, ...] = INDEX_NAMES, flag: str = "") -> str:
    """``name`` when it is one of ``known`` (every index name by default; ``vis-embed index``:
    :data:`STORE_KINDS`), else a ConfigError listing them: the one check of the vocabulary."""
    if not isinstance(name, str) or name not in known:
        raise ConfigError(f"{flag}{': ' if flag else ''}unknown index kind {name!r} (known: {', '.join(known)})")
    return name


def spec_kind(name: str) -> str:
    """The kind an index name stands for (an alias's kind, else the name)."""
    return _SPELLED.get(name, {}).get("kind", name)


def check_rescore(rescore: Any, index: str, flag: str = "--rescore") -> int:
    """``rescore`` (an int >= 0) when it fits the index: only a code kind's shortlist is re-ranked
    (the one rescore rule of eval, ``vis-embed search`` and the server)."""
    if isinstance(rescore, bool) or not isinstance(rescore, int) or rescore < 0:
        raise ConfigError(f"{flag} must be an integer >= 0, got {rescore!r}")
    if rescore and spec_kind(index) not in RESCORED_KINDS:
        raise ConfigError(f"{flag} re-ranks a binary or int8 (or ivf-pq) index's shortlist; a {index} index is "
                          f"searched exactly or with floats already")
    return rescore


class IndexSpec(Settings):
    """What to build: the kind and how it searches.  ``dims`` is the vectors' width (filled when
    the index is chosen for a gallery); None fields take their rule's default when built."""

    model_config = ConfigDict(frozen=True)

    kind: Literal[KINDS] = AUTO  # type: ignore[valid-type]  (Literal of the one tuple)
    precision: Literal["float32", "bfloat16"] = Field("float32", description="flat: the products' precision")
    device: Literal["cpu", "gpu"] = "cpu"
    dims: int | None = Field(None, gt=0)
    rescore: int = Field(0, ge=0)
    nlist: int | None = Field(None, gt=0)
    nprobe: int | None = Field(None, gt=0)
    pq_bytes: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> IndexSpec:
        if (self.precision != "float32" or self.device != "cpu") and self.kind != "flat":
            raise ValueError(f"precision {self.precision} / device {self.device}: only a flat index has them")
        check_rescore(self.rescore, self.kind, "rescore")
        if (self.nlist or self.nprobe) and not self.kind.startswith("ivf"):
            raise ValueError("nlist / nprobe: only an ivf index has lists")
        return self

    @classmethod
    def named(cls, name: str, **fields: Any) -> IndexSpec:
        """The spec an index name stands for (a kind, a flat variant or an alias), with ``fields`` added."""
        return cls(**{"kind": check_index_name(name), **_SPELLED.get(name, {}), **fields})

    @property
    def takes_rescore(self) -> bool:
        """Whether this kind's shortlist can be re-ranked with the floats (``rescore`` > 0)."""
        return self.kind in RESCORED_KINDS

    def recorded(self) -> dict[str, Any]:
        """The spec as results.json records it (``index_spec``): the fields that were set."""
        return self.model_dump(exclude_none=True)

    @property
    def bytes_per_vector(self) -> int:
        """Bytes in memory per indexed vector of what is searched: the codes (flat: the floats,
        which a bf16 shortlist re-ranks exactly), plus the id an inverted list stores beside each.
        The rescoring floats are not counted: they can stay on disk, memory-mapped."""
        if self.dims is None or self.kind == AUTO:
            raise ValueError("bytes_per_vector: the index's kind and width are not known yet")
        if self.kind == "ivf-pq":
            return (self.pq_bytes or 0) + IVF_ID_BYTES
        codes = bytes_per_vector(_KIND_PRECISION[self.kind], self.dims)
        return codes + (IVF_ID_BYTES if self.kind == "ivf-flat" else 0)
