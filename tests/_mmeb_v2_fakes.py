"""Tiny stand-ins for MMEB-V2's released sources, in the hub layout ``ROOT/<owner>/<name>``.

Annotation sets are parquet shards under ``<config>/<split>-00000-of-00001.parquet`` (``data/``
for a repo's default config) with the README ``configs:`` block the hub writes, so
``datasets.load_dataset(ROOT/owner/name, config, split=...)`` reads them exactly as it reads the
hub ids; page images are ``datasets.Image`` columns (bytes in the parquet, as pushed to the hub);
frames are ``.tar.gz`` archives of JPEG folders as in ``TIGER-Lab/MMEB-V2``.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import yaml
from PIL import Image


def jpeg(color: tuple[int, int, int] = (10, 20, 30), fmt: str = "JPEG") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), color).save(buffer, fmt)
    return buffer.getvalue()


def hub_dataset(root: Path, repo: str, configs: dict[str | None, dict[str, list[dict[str, Any]]]],
                image_columns: tuple[str, ...] = ()) -> Path:
    """Write ``configs`` ({config or None: {split: rows}}) as the hub lays them out."""
    import datasets

    folder = root / repo
    entries = []
    for config, splits in configs.items():
        name = config or "default"
        directory = "data" if config is None else config
        for split, rows in splits.items():
            table = datasets.Dataset.from_list(rows)
            for column in image_columns:
                if column in table.column_names:
                    table = table.cast_column(column, datasets.Image())
            (folder / directory).mkdir(parents=True, exist_ok=True)
            table.to_parquet(str(folder / directory / f"{split}-00000-of-00001.parquet"))
        entries.append({"config_name": name, "data_files": [{"split": s, "path": f"{directory}/{s}-*"}
                                                            for s in splits]})
    (folder / "README.md").write_text("---\n" + yaml.safe_dump({"configs": entries}) + "---\n")
    return folder


def tarball(path: Path, members: dict[str, bytes], parts: int = 1) -> list[Path]:
    """A gzip tar of ``members`` (name -> bytes); split into ``parts`` files ``<path>-00`` ... when > 1."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    if parts == 1:
        path.write_bytes(data)
        return [path]
    size = -(-len(data) // parts)
    written = []
    for k in range(parts):
        part = path.with_name(f"{path.name}-{k:02d}")
        part.write_bytes(data[k * size:(k + 1) * size])
        written.append(part)
    return written


def frames(folder: str, count: int = 3) -> dict[str, bytes]:
    """``count`` JPEG frames in ``folder`` (names as MMEB-V2's extractor writes them)."""
    return {f"{folder}/frame_{k:04d}.jpg": jpeg((k * 40, 0, 0)) for k in range(1, count + 1)}


FRAMES = "TIGER-Lab/MMEB-V2"


def frames_archive(root: Path, name: str, members: dict[str, bytes], parts: int = 1) -> list[Path]:
    return tarball(root / FRAMES / "video-tasks" / "frames" / name, members, parts)
