"""What a faiss index file claims, checked before faiss reads it.

faiss reads a vector by its stored length and allocates that much before reading the bytes:
a 30 KB ``index.faiss`` claiming a 2 GiB vector grew the loader by 2.1 GB before faiss failed.
:func:`check_faiss_file` walks the layout faiss 1.x writes for the kinds ``vis-embed index``
builds (``IndexFlatIP``, ``IndexBinaryFlat``, ``IndexScalarQuantizer``, ``IndexIVFPQ`` over an
``IndexFlatIP`` quantizer with array inverted lists), seeking over the data, and checks every
length against the bytes left in the file and against the index's recorded rows and width.
Only a file that passes is handed to faiss, so faiss allocates no more than the file holds.

Fields faiss trusts without a length are checked too: the metric must be inner product (an L2
file searches fine and returns distances as "scores", smallest best), and each kind's code size
the one its quantizer implies (an ivf-pq file whose lists claim 4-byte codes for a 32 x 8-bit
quantizer loaded, and faiss then read each code's 28 missing bytes past the list: garbage hits
from a heap over-read).
"""

from __future__ import annotations

import struct
from typing import BinaryIO

import faiss

from vis_embed.errors import DataError

FOURCC = {"flat": b"IxFI", "binary": b"IBxF", "int8": b"IxSQ", "ivf-pq": b"IwPQ"}
# what IndexBinaryFlat writes in its metric field (unused: it searches by Hamming distance)
BINARY_METRIC = faiss.METRIC_L2


class _Walker:
    """Reads a faiss file's fields in order; every length is checked before it is skipped."""

    def __init__(self, handle: BinaryIO, size: int, path: str) -> None:
        self.handle, self.size, self.path = handle, size, path

    def fail(self, reason: str) -> DataError:
        return DataError(f"{reason}: a damaged or foreign index file; build the index again", path=self.path)

    def left(self) -> int:
        return self.size - self.handle.tell()

    def read(self, fmt: str) -> tuple:
        width = struct.calcsize(fmt)
        if width > self.left():
            raise self.fail("the file ends inside its header")
        return struct.unpack(fmt, self.handle.read(width))

    def one(self, fmt: str) -> int:
        return self.read("<" + fmt)[0]

    def skip(self, count: int, item: int, expected: int | None = None, what: str = "vector") -> None:
        if count < 0 or count * item > self.left():
            raise self.fail(f"its {what} claims {count * item} bytes, {self.left()} are left in the file")
        if expected is not None and count != expected:
            raise self.fail(f"its {what} holds {count} values, {expected} expected")
        self.handle.seek(count * item, 1)

    def vector(self, item: int, expected: int | None = None, what: str = "vector") -> int:
        count = self.one("Q")
        self.skip(count, item, expected, what)
        return count

    def fourcc(self, expected: bytes) -> None:
        found = self.read("4s")[0]
        if found != expected:
            raise self.fail(f"a {found!r} index where {expected!r} was expected")

    def index_header(self, dim: int, rows: int) -> None:
        d, ntotal, _dummy1, _dummy2, _trained, metric = self.read("<iqqq?i")
        if metric > 1:
            self.one("f")
        if d != dim or ntotal != rows:
            raise self.fail(f"the index is {ntotal} x {d}, index.json records {rows} x {dim}")
        self.metric(metric, faiss.METRIC_INNER_PRODUCT)

    def metric(self, found: int, expected: int) -> None:
        """The stored metric is the one vis-embed index writes (scores are inner products)."""
        if found != expected:
            raise self.fail(f"its metric is faiss metric {found}, {expected} expected (inner product scores)")

    def code_size(self, found: int, expected: int, what: str) -> None:
        """faiss reads ``found`` bytes a code and decodes ``expected``: any other size over-reads."""
        if found != expected:
            raise self.fail(f"its {what} codes are {found} bytes, {expected} expected")


def check_faiss_file(handle: BinaryIO, size: int, kind: str, rows: int, dim: int, path: str) -> None:
    """DataError unless ``handle`` (at offset 0, ``size`` bytes) is a ``kind`` index of
    ``rows`` x ``dim`` whose every stored length fits the file; leaves the handle at 0."""
    walker = _Walker(handle, size, path)
    walker.fourcc(FOURCC[kind])
    if kind == "binary":
        d, code_size, ntotal, _trained, metric = walker.read("<iiq?i")
        if d != dim + (-dim) % 8 or ntotal != rows or code_size * 8 != d:
            raise walker.fail(f"the index is {ntotal} x {d} bits, index.json records {rows} x {dim}")
        walker.metric(metric, BINARY_METRIC)
        walker.vector(1, rows * code_size, "codes")
    elif kind == "flat":
        walker.index_header(dim, rows)
        walker.vector(4, rows * dim, "vectors")
    elif kind == "int8":
        walker.index_header(dim, rows)
        qtype, _rangestat, _arg, d, code_size = walker.read("<iifQQ")
        if d != dim or qtype != faiss.ScalarQuantizer.QT_8bit:
            raise walker.fail(f"its quantizer is type {qtype}, {d} wide; index.json records 8-bit, {dim} wide")
        walker.code_size(code_size, dim, "8-bit")
        walker.vector(4, None, "quantizer ranges")
        walker.vector(1, rows * code_size, "codes")
    else:
        _check_ivf_pq(walker, rows, dim)
    if walker.left() != 0:
        raise walker.fail(f"{walker.left()} bytes follow the index")
    handle.seek(0)


def _check_ivf_pq(walker: _Walker, rows: int, dim: int) -> None:
    walker.index_header(dim, rows)
    nlist, _nprobe = walker.read("<QQ")
    walker.fourcc(FOURCC["flat"])  # the coarse quantizer: nlist centroids
    walker.index_header(dim, nlist)
    walker.vector(4, nlist * dim, "centroids")
    walker.one("b")  # direct map type
    walker.vector(8, None, "direct map")
    _by_residual, code_size = walker.read("<?Q")
    d, m, nbits = walker.read("<QQQ")
    if d != dim or m < 1 or dim % m or not 1 <= nbits <= 16:
        raise walker.fail(f"its product quantizer ({m} x {nbits} bits over {d}) does not fit width {dim}")
    walker.code_size(code_size, (m * nbits + 7) // 8, f"{m} x {nbits}-bit product-quantizer")
    walker.vector(4, (1 << nbits) * dim, "product-quantizer centroids")
    walker.fourcc(b"ilar")
    list_count, list_code_size = walker.read("<QQ")
    if list_count != nlist or list_code_size != code_size:
        raise walker.fail(f"its inverted lists ({list_count} of {list_code_size} B codes) do not fit the index")
    layout = walker.read("4s")[0]
    sizes: list[int] = []
    if layout == b"full":
        count = walker.one("Q")
        if count != nlist or 8 * count > walker.left():
            raise walker.fail("its list sizes do not fit the file")
        sizes = list(walker.read(f"<{count}Q"))
    elif layout == b"sprs":
        count = walker.one("Q")
        if count % 2 or 8 * count > walker.left():
            raise walker.fail("its list sizes do not fit the file")
        sizes = list(walker.read(f"<{count}Q"))[1::2]
    else:
        raise walker.fail(f"unknown inverted-list layout {layout!r}")
    if sum(sizes) != rows:
        raise walker.fail(f"its inverted lists hold {sum(sizes)} codes, {rows} expected")
    for size in sizes:
        walker.skip(size, code_size + 8, what="inverted list")
