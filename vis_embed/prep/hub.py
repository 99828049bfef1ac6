"""Hugging Face Hub datasets as converter inputs (``vis-embed prep mmeb-* TIGER-Lab/MMEB-eval``).

A source that is a hub dataset id (``owner/name`` that is not a local path), or any source
when ``hub=True`` (e.g. a local dataset folder in the hub layout, with its README configs), is
read through ``datasets.load_dataset`` one config (MMEB: one dataset per config) and split at a
time, and written as ``OUT/hub/<config>/<split>-00000-of-00001.parquet`` -- the layout the
file converters already read, which also keeps a record of exactly what was converted.  The
hub tables hold image *paths*; the images themselves (MMEB's image archives) are downloaded
separately and named with ``--image-root``.
"""

from __future__ import annotations

from pathlib import Path

from vis_embed.errors import DataError
from vis_embed.io import is_hub_id  # the one hub-id rule

HUB_FOLDER = "hub"


def _choose_split(source: str, config: str, split: str | None) -> str:
    from datasets import get_dataset_split_names

    names = get_dataset_split_names(source, config)
    if split is not None:
        if split not in names:
            raise DataError(f"config {config!r} has no split {split!r} (found: {', '.join(names)})", path=source)
        return split
    if len(names) > 1:
        raise DataError(f"config {config!r} has several splits ({', '.join(names)}); choose one with --split",
                        path=source)
    return names[0]


def export_hub_dataset(source: str, out_dir: Path, split: str | None = None,
                       subsets: list[str] | None = None) -> list[Path]:
    """Write each config (``subsets``, default: all) of ``source`` as a parquet shard; the folders."""
    from datasets import get_dataset_config_names, load_dataset

    try:
        configs = subsets or get_dataset_config_names(source)
    except (FileNotFoundError, ValueError, ConnectionError) as exc:
        raise DataError(f"cannot read the dataset's configs: {exc}", path=source) from None
    folders = []
    for config in configs:
        chosen = _choose_split(source, config, split)
        try:
            table = load_dataset(source, config, split=chosen)
        except (FileNotFoundError, ValueError, ConnectionError) as exc:
            raise DataError(f"cannot load config {config!r} split {chosen!r}: {exc}", path=source) from None
        folder = out_dir / HUB_FOLDER / config
        folder.mkdir(parents=True, exist_ok=True)
        table.to_parquet(str(folder / f"{chosen}-00000-of-00001.parquet"))
        folders.append(folder)
    return folders


def resolve_inputs(inputs: list[str | Path], out_dir: str | Path, split: str | None = None,
                   hub: bool = False, subsets: list[str] | None = None,
                   image_root: str | Path | None = None) -> list[str | Path]:
    """``inputs`` with every hub source replaced by its exported config folders."""
    resolved: list[str | Path] = []
    for source in inputs:
        if not (hub or is_hub_id(source)):
            resolved.append(source)
            continue
        if image_root is None:
            raise DataError("a hub dataset holds image paths only: download its images and pass "
                            "--image-root (the folder those paths are relative to)", path=str(source))
        resolved.extend(export_hub_dataset(str(source), Path(out_dir), split, subsets))
    return resolved


# ------------------------------------------------------------------ pinned sources (vis-embed prep mmeb-v2)

def source_location(repo: str, source_root: Path | None) -> str:
    """Where ``repo`` is read from: the hub id, or ``source_root/<owner>/<name>`` (a local copy in
    the hub layout, e.g. a ``git clone`` of the dataset repo, or a test's fake)."""
    return repo if source_root is None else str(Path(source_root) / repo)


def load_pinned_split(repo: str, config: str | None, split: str, revision: str,
                      source_root: Path | None = None, cache_dir: Path | None = None,
                      decode_images: bool = False):  # -> datasets.Dataset
    """One config/split of ``repo`` through ``datasets.load_dataset`` at ``revision`` (hub) or from
    the local copy under ``source_root`` (same code path, a path instead of an id).  Image columns
    and video columns are left undecoded (``{"bytes", "path"}``): the converter writes the bytes
as they are, or reads the path.
    ``cache_dir``: datasets' cache (default: the user's); give a local copy a fresh one: datasets
    keys its cache of local files on their modification times only, which two copies (or an edit
    within the same tick) can share, and would then serve the other copy's rows."""
    from datasets import Image, Video, load_dataset
    from datasets.exceptions import DatasetsError

    location = source_location(repo, source_root)
    pinned = {"revision": revision} if source_root is None else {}
    failures = (FileNotFoundError, ValueError, ConnectionError, KeyError, DatasetsError)  # e.g. shards that disagree
    try:
        table = load_dataset(location, config, split=split, cache_dir=cache_dir and str(cache_dir), **pinned)
    except failures as exc:
        what = f"config {config!r} split {split!r}" if config else f"split {split!r}"
        raise DataError(f"cannot load {what}: {exc}", path=location) from None
    if not decode_images:  # and never decode a video column: converters want its path
        for name, feature in table.features.items():
            if isinstance(feature, (Image, Video)):
                table = table.cast_column(name, type(feature)(decode=False))
    return table


def pinned_config_names(repo: str, revision: str, source_root: Path | None = None) -> list[str]:
    from datasets import get_dataset_config_names

    location = source_location(repo, source_root)
    pinned = {"revision": revision} if source_root is None else {}
    try:
        return list(get_dataset_config_names(location, **pinned))
    except (FileNotFoundError, ValueError, ConnectionError) as exc:
        raise DataError(f"cannot read the dataset's configs: {exc}", path=location) from None


def pinned_file(repo: str, filename: str, revision: str, source_root: Path | None = None) -> Path:
    """A file of dataset repo ``repo`` (e.g. a frame tarball): downloaded into the hub cache at
    ``revision``, or read from the local copy under ``source_root``."""
    if source_root is not None:
        path = Path(source_location(repo, source_root)) / filename
        if not path.is_file():
            raise DataError("source file not found", path=path)
        return path
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo, filename, repo_type="dataset", revision=revision))
    except (OSError, ValueError) as exc:  # network errors, missing entries (EntryNotFoundError is an OSError)
        raise DataError(f"cannot download {filename!r}: {exc}", path=repo) from None
