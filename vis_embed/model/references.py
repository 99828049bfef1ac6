"""What a model reference names: a Hub id or a local directory, and what an adapter directory is.

The one rule for each (every loader, export, checkpoint, the model card and the mteb
integration ask here, so ``a/b/c`` gets one answer everywhere):

* a reference is a **Hub id** when it is ``owner/name`` and no such path exists
  (:func:`vis_embed.io.is_hub_id`, shared with the dataset converters); anything else
  (``a/b/c``, ``./x``, ``~/x``, an absolute path, a bare name) is a **local path**;
* a directory is a **peft adapter** when peft can read its ``adapter_config.json``
  (:func:`peft_adapter_config`); its base is that config's ``base_model_name_or_path``;
* a file a model records beside its weights (``embedding_config.json``, an export's
  ``modules.json`` and Dense module) is read from a local directory or, for a Hub id, through
  the Hub's cache like the weights themselves (:func:`model_file`).

No torch here (the model card and ``--help`` paths import it).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from vis_embed.errors import ConfigError
from vis_embed.io import atomic_write_json, is_hub_id, read_json_value

if TYPE_CHECKING:
    from peft import PeftConfig

logger = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"
HEAD_CONFIG = "head_config.json"  # a projection head's config (model/network/projection_head.HeadFile)


def looks_like_path(name: str) -> bool:
    """The complement of :func:`is_hub_id` (kept: the loaders read better asking this)."""
    return not is_hub_id(name)


def model_file(reference: str | Path, filename: str) -> Path | None:
    """``filename`` of the model ``reference`` names, or None when it has none: a local
    directory's file, or a Hub repo's (downloaded into the Hub cache, as transformers fetches the
    weights; offline, the cached copy).  A Hub file that cannot be checked (offline and never
    cached) is None with a warning: the model then loads without what that file records."""
    if not is_hub_id(reference):
        path = Path(reference).expanduser() / filename
        return path if path.is_file() else None
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    try:
        return Path(hf_hub_download(str(reference), filename))
    except LocalEntryNotFoundError:
        # not reachable and not in the cache; the cache also remembers files the Hub said are absent
        if try_to_load_from_cache(str(reference), filename) is None:
            logger.warning("%s: cannot check for %s (the Hub is not reachable and the file is not in the "
                           "cache); loading without it", reference, filename)
        return None
    except EntryNotFoundError:
        return None  # the repo has no such file: a plain checkpoint
    except OSError:
        return None  # no such repo, or no access: transformers' loading of the weights says which


def local_model_dir(reference: str | Path) -> Path:
    """``reference`` as a local directory: a path as it is, a Hub id (an adapter published on the
    Hub) as its snapshot in the Hub cache, downloaded as transformers downloads a model (offline:
    the cached snapshot).  Everything that reads an adapter's files then reads a directory, and
    a loaded model records the snapshot's path, whose content its fingerprint hashes."""
    if not is_hub_id(reference):
        return Path(reference).expanduser()
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(reference)))
    except (OSError, ValueError) as exc:  # no such repo, no access, offline and not cached
        raise ConfigError(f"cannot fetch {reference!r} from the Hub: {exc}") from None


def hub_repo_of(path: str | Path) -> str | None:
    """``owner/name`` when ``path`` is a snapshot in the Hub cache
    (``.../models--owner--name/snapshots/<commit>``, what :func:`local_model_dir` returns for a Hub
    id), else None: a name for people, where the path's own name would be a commit hash."""
    parts = Path(path).parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        owner, _, name = parts[-3].removeprefix("models--").partition("--")
        return f"{owner}/{name}" if name else None
    return None


def absolute_model_reference(name: str) -> str:
    """A hub id unchanged; a local path made absolute (so it resolves from any directory)."""
    if looks_like_path(name) and Path(name).expanduser().exists():
        return str(Path(name).expanduser().resolve())
    return name


def is_peft_adapter(directory: str | Path) -> bool:
    """Whether ``directory`` holds a peft adapter (an ``adapter_config.json``)."""
    return (Path(directory).expanduser() / ADAPTER_CONFIG).is_file()


def peft_adapter_config(directory: str | Path) -> PeftConfig:
    """``directory``'s adapter config as peft reads it (``peft.PeftConfig``); ConfigError naming
    the directory when there is none or peft cannot read it."""
    from peft import PeftConfig

    path = Path(directory).expanduser()
    if not is_peft_adapter(path):
        raise ConfigError(f"not a peft adapter directory (no {ADAPTER_CONFIG}): {path}")
    try:
        return PeftConfig.from_pretrained(str(path))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"{path / ADAPTER_CONFIG}: not a peft adapter config: {exc}") from None


def base_model_of(adapter_dir: str | Path) -> str:
    """The base model recorded in the adapter's config (a hub id or a path)."""
    base = peft_adapter_config(adapter_dir).base_model_name_or_path
    if not base:
        raise ConfigError(f"{Path(adapter_dir) / ADAPTER_CONFIG}: no base_model_name_or_path; pass --base")
    return str(base)


def record_absolute_base(adapter_dir: Path) -> None:
    """Rewrite ``base_model_name_or_path`` as a hub id or an ABSOLUTE path, so that
    ``AutoPeftModel.from_pretrained(adapter)`` and ``vis-embed merge`` work from any directory
    (peft records the name the model was loaded with, often relative to the training cwd).
    The file is edited as JSON, not through peft.PeftConfig: saving that would rewrite every
    field with this peft version's defaults, and only the base's name must change."""
    config_path = adapter_dir / ADAPTER_CONFIG
    config = read_json_value(config_path)
    base = config.get("base_model_name_or_path")
    if base and absolute_model_reference(base) != base:
        config["base_model_name_or_path"] = absolute_model_reference(base)
        atomic_write_json(config_path, config)


def unreadable_weights(path: str | Path, error: Exception) -> ConfigError:
    """The one message for a weights file safetensors cannot read (truncated, not safetensors)."""
    return ConfigError(f"{path}: not a readable safetensors file, truncated or damaged ({error})")
