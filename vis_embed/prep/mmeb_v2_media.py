"""Frames and images out of MMEB-V2's tarballs, and page images out of hub tables.

The archives are read as one stream (``tar`` ``r|*``; a multi-part archive such as
``video_qa.tar.gz-00 .. -04`` is the concatenation of its parts), and only the members under a
wanted folder (a clip's frame folder) or equal to a wanted file are written, under the same
relative path below ``dest``.  Hostile members are never written: links, devices, names with
``..`` or an absolute path, non-image files, and members over :data:`MAX_MEMBER_BYTES`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from vis_embed.prep.identities import IMAGE_EXTENSIONS
from vis_embed.errors import DataError
from vis_embed.io import safe_name

MAX_MEMBER_BYTES = 64 << 20  # one frame or page; anything larger is not a frame


class _Concatenated(io.RawIOBase):
    """The bytes of several files, one after the other (a split archive read as one)."""

    def __init__(self, paths: Iterable[Path], progress: Any = None) -> None:
        self._paths = list(paths)
        self._current: Any = None
        self._progress = progress  # a tqdm bar counting bytes read, or None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while True:
            if self._current is None:
                if not self._paths:
                    return 0
                self._current = open(self._paths.pop(0), "rb")  # noqa: SIM115  # closed below
            count = self._current.readinto(buffer)
            if count:
                if self._progress is not None:
                    self._progress.update(count)
                return count
            self._current.close()
            self._current = None

    def close(self) -> None:
        if self._current is not None:
            self._current.close()
        super().close()


def _relative_member(name: str, prefix: str) -> list[str] | None:
    """The member's path below ``prefix`` as parts, or None when outside it or unsafe."""
    name = name.removeprefix("./")
    if not prefix or not name.startswith(prefix.rstrip("/") + "/"):
        return None
    parts = name[len(prefix.rstrip("/")) + 1:].split("/")
    if any(part in ("", ".", "..") for part in parts) or name.startswith("/"):
        return None
    return parts


@dataclass
class Target:
    """What one task takes from an archive: the entries ``wanted`` below ``prefix`` (clip folders,
    or files), written to ``dest/<same relative path>``; ``found`` counts files per entry."""

    prefix: str
    wanted: set[str]
    dest: Path
    found: Counter[str] = field(default_factory=Counter)

    def root_of(self, name: str) -> tuple[str, list[str]] | None:
        """The wanted entry holding member ``name``, and its path parts below the prefix."""
        parts = _relative_member(name, self.prefix)
        if parts is None or Path(parts[-1]).suffix.lower() not in IMAGE_EXTENSIONS:
            return None
        root = next((r for r in ("/".join(parts[:k]) for k in range(1, len(parts) + 1)) if r in self.wanted), None)
        return None if root is None else (root, parts)

    def require_all(self, archives: list[Path]) -> None:
        """Every wanted clip must have frames (the reference fails on a missing clip, so do we)."""
        missing = sorted(w for w in self.wanted if not self.found[w])
        if missing:
            raise DataError(f"{len(missing)} clip(s)/image(s) not in the archive under {self.prefix!r}, e.g. "
                            f"{', '.join(missing[:3])}", path=archives[0])


def extract_wanted(archives: list[Path], targets: list[Target]) -> None:
    """One streamed pass over ``archives`` (a split archive's parts in order) serving every target:
    the tasks that share an archive read it once.  Each target's ``found`` is updated."""
    targets = [t for t in targets if t.wanted]
    if not targets:
        return
    total = sum(path.stat().st_size for path in archives)
    with tqdm(total=total, unit="B", unit_scale=True, desc=f"extract {archives[0].name}", leave=False,
              disable=None) as bar, _Concatenated(archives, bar) as raw, io.BufferedReader(raw, 1 << 20) as buffered:
        try:
            # inflate with gzip's reader (tarfile's own stream inflater copies its buffer per member)
            stream = gzip.GzipFile(fileobj=buffered) if buffered.peek(2)[:2] == b"\x1f\x8b" else buffered
            with tarfile.open(fileobj=stream, mode="r|") as archive:
                for member in archive:
                    if not member.isfile() or member.size > MAX_MEMBER_BYTES:
                        continue
                    hits = [(t, hit) for t in targets if (hit := t.root_of(member.name)) is not None]
                    handle = archive.extractfile(member) if hits else None
                    if handle is None:
                        continue
                    data = handle.read()
                    for target, (root, parts) in hits:
                        path = target.dest.joinpath(*parts)  # dest is a task's temporary folder
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.write_bytes(data)
                        target.found[root] += 1
        except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
            raise DataError(f"unreadable archive: {exc}", path=archives[0]) from None


def page_file_name(corpus_id: str, data: bytes, where: str) -> str:
    """A short, unique, file-system-safe name for a page image: ids may be long file names."""
    from PIL import UnidentifiedImageError

    from vis_embed.data.image_guards import open_image

    try:
        with open_image(io.BytesIO(data)) as image:  # the header only: the one input-format allow-list
            suffix = "." + (image.format or "png").lower().replace("jpeg", "jpg")
    except (UnidentifiedImageError, OSError):
        raise DataError(f"corpus item {corpus_id!r} is not a readable image", path=where, field="image") from None
    digest = hashlib.md5(corpus_id.encode("utf-8"), usedforsecurity=False).hexdigest()[:8]
    return f"{safe_name(corpus_id)[:50]}_{digest}{suffix}"


def image_bytes(value: Any, corpus_id: str, where: str) -> bytes:
    """The bytes of an undecoded ``datasets.Image`` value ``{"bytes", "path"}``."""
    data = value.get("bytes") if isinstance(value, dict) else None
    if not data:
        raise DataError(f"corpus item {corpus_id!r} has no image bytes", path=where, field="image")
    if len(data) > MAX_MEMBER_BYTES:
        raise DataError(f"corpus item {corpus_id!r}: image over {MAX_MEMBER_BYTES >> 20} MiB", path=where,
                        field="image")
    return data
