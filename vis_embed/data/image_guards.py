"""What an input image may be before PIL decodes it: the one format allow-list, a bound on a
progressive JPEG's scans, a decode deadline, and error texts that leak nothing.

* :data:`INPUT_FORMATS` is the one allow-list every input image is opened with
  (``Image.open(..., formats=INPUT_FORMATS)``, :func:`open_image`).  PIL otherwise sniffs any
  format it has a plugin for: an EPS inside ``data:image/png;base64,...`` is handed to
  Ghostscript (a separate program, sandbox escapes have existed, no timeout), and ICO/ICNS
  decode their embedded PNGs while the header is read, before any pixel budget is checked.
  None of EPS/PS/PDF/ICO/ICNS is here; a caller that needs another format passes its own list.
* A progressive JPEG is decoded once per scan: 700 refinement scans in 257 KB cost ~14 s of
  CPU at 7999 x 7999.  Real encoders write about 10 (mozjpeg's scan optimisation: ~20);
  :data:`MAX_JPEG_SCANS` refuses absurd counts from the bytes, before decoding.
* :class:`DeadlineBytes`: PIL feeds its decoders from the file object in blocks, in Python;
  a reader that raises once its deadline passed stops a decode between two blocks, in the
  thread that runs it (a thread cannot be killed; this stops the work itself).
* :func:`safe_reason`: PIL's messages name the file object (``<_io.BytesIO object at
  0x7f...>``, a heap address) and plugins' helpers their command lines and temp paths; what
  reaches a client is the message with those removed.
"""

from __future__ import annotations

import io
import re
import time
import warnings
from typing import IO, Any

import numpy as np
from PIL import Image

# Formats an input image may be (PIL's format names).  MPO: phones' JPEGs with a second frame.
INPUT_FORMATS = ("JPEG", "MPO", "PNG", "GIF", "WEBP", "BMP", "TIFF", "PPM")
MAX_JPEG_SCANS = 100
_SOS = b"\xff\xda"  # start-of-scan; entropy-coded data stuffs every 0xFF with 0x00, so it is only a marker
_SCAN_CHUNK = 1 << 20
DECODE_BLOCK = 1 << 14  # bytes PIL feeds a decoder between two deadline checks (PIL's default: 64 KiB)
_ADDRESS = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")
_PATH = re.compile(r"(?<![\w.])(?:/[\w.@%+=:,-]+){2,}")


class DecodeTimeout(Exception):
    """A decode ran past its deadline (raised by :class:`DeadlineBytes` between two blocks)."""


class DeadlineBytes(io.BytesIO):
    """An in-memory image whose reads fail once ``deadline`` (``time.monotonic()``) passed."""

    def __init__(self, data: bytes, deadline: float | None) -> None:
        super().__init__(data)
        self.deadline = deadline

    def read(self, size: int | None = -1) -> bytes:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DecodeTimeout
        return super().read(size)


def open_image(source: IO[bytes] | str | Any, formats: tuple[str, ...] = INPUT_FORMATS) -> Image.Image:
    """``Image.open`` restricted to ``formats`` (UnidentifiedImageError for any other), without
    PIL's decompression-bomb *warning* (callers refuse explicitly from the header)."""
    Image.init()  # registers every plugin once (open() would only preload five): "MPO" must be known
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        return Image.open(source, formats=[name for name in formats if name in Image.OPEN])


def check_jpeg_scans(image: Image.Image, max_scans: int = MAX_JPEG_SCANS) -> None:
    """ValueError if the JPEG ``image`` (opened, not loaded) holds more than ``max_scans`` scans."""
    if image.format not in ("JPEG", "MPO"):
        return
    fp = image.fp
    position = fp.tell()
    try:
        fp.seek(0)
        scans, previous = 0, b""
        while chunk := fp.read(_SCAN_CHUNK):
            scans += count_markers(previous[-1:] + chunk, _SOS)
            previous = chunk
            if scans > max_scans:
                raise ValueError(f"a JPEG of more than {max_scans} scans (progressive refinements); "
                                 f"re-encode it")
    finally:
        fp.seek(position)


def count_markers(data: bytes, marker: bytes) -> int:
    """How often the two-byte ``marker`` (0xFF, code) occurs in ``data``.  Not ``bytes.count``: its
    search stops at every 0xFF of the entropy-coded data (one byte in ~250 of a photo) and ran at
    ~1.3 GB/s, 3.8 ms of a 5 MB photo's ~50 ms fast decode; comparing the byte after each 0xFF
    with numpy takes 1.4 ms (benchmarks/prepare_throughput.py).  A marker cannot overlap itself
    (its second byte is never 0xFF), so the counts agree."""
    array = np.frombuffer(data, dtype=np.uint8)
    after_prefix = np.flatnonzero(array[:-1] == marker[0]) + 1
    return int(np.count_nonzero(array[after_prefix] == marker[1]))


def safe_reason(exc: BaseException) -> str:
    """``exc``'s message without heap addresses or file-system paths (shown to clients)."""
    message = _PATH.sub("<path>", _ADDRESS.sub("the image", str(exc)))
    return (message[:200] + "...") if len(message) > 200 else message or type(exc).__name__
