"""Frame-extraction rate of `vis-embed prep mmeb-v2` (vis_embed/prep/mmeb_v2_media.extract_wanted).

Builds a gzip tar shaped like MMEB-V2's frame archives (``<Task>/<clip>/frame_NNNN.jpg``;
incompressible 8 KiB members stand in for JPEGs), then times one pass that extracts every
``--every``-th clip -- the converter reads a task's archive once, as a stream.

    .venv/bin/python benchmarks/mmeb_v2_extract.py                   # 400 clips x 16 frames (~53 MB)
    .venv/bin/python benchmarks/mmeb_v2_extract.py --clips 4000      # ~530 MB
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

from vis_embed.prep.mmeb_v2_media import Target, extract_wanted


def build_archive(path: Path, clips: int, frames: int, frame_bytes: int) -> None:
    with tarfile.open(path, "w:gz", compresslevel=1) as archive:
        for clip in range(clips):
            for frame in range(frames):
                info = tarfile.TarInfo(f"K700/clip{clip:05d}/frame_{frame:04d}.jpg")
                info.size = frame_bytes
                archive.addfile(info, io.BytesIO(os.urandom(frame_bytes)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=400)
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--frame-bytes", type=int, default=8192)
    parser.add_argument("--every", type=int, default=4, help="extract every N-th clip")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mmeb_v2_extract-"))
    try:
        archive = tmp / "video_cls.tar.gz"
        build_archive(archive, args.clips, args.frames, args.frame_bytes)
        wanted = {f"clip{clip:05d}" for clip in range(0, args.clips, args.every)}
        start = time.perf_counter()
        target = Target("K700", wanted, tmp / "media")
        extract_wanted([archive], [target])
        found = target.found
        seconds = time.perf_counter() - start
        size = archive.stat().st_size / 1e6
        print(f"archive {size:.1f} MB, {args.clips * args.frames} members: {sum(found.values())} frames of "
              f"{len(found)} clips extracted in {seconds:.2f} s ({size / seconds:.0f} MB/s of archive read)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
