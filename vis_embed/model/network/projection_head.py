"""A small trainable projection on the pooled embedding: the linear-probe adaptation (TLL style).

``adaptation: head`` in a training recipe freezes the whole backbone and trains only this
head: ``v = normalise(W · normalise(pool(h)) + b)``.  ``W`` starts as the identity (the
truncated identity when ``out_dim < in_dim``) and ``b`` at zero, so before training the head
reproduces the backbone's vectors and training starts from the base model, as LoRA does.

Saved like an adapter: a directory holding ``head_config.json`` (its type, dimensions and
base model) and ``head.safetensors``.  ``EmbeddingModel.from_pretrained(base, adapter=DIR)``
(hence ``Embedder``, ``vis-embed encode/eval --adapter DIR``) recognises such a directory and
applies the head; ``vis-embed export`` turns it into a sentence-transformers ``Dense`` module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field
from torch import Tensor, nn

from vis_embed.config import FileRecord
from vis_embed.errors import ConfigError, DataError
from vis_embed.io import atomic_write_bytes, atomic_write_json, read_json_value
from vis_embed.model.references import HEAD_CONFIG, model_file, unreadable_weights

HEAD_WEIGHTS = "head.safetensors"
HEAD_TYPE = "projection_head"


class HeadFile(FileRecord):
    """``head_config.json``: what a saved head is (its type, dimensions and base model); read
    with :func:`read_head_file` (a bad value: a ConfigError naming file and field)."""

    adapter_type: Literal["projection_head"] = HEAD_TYPE
    in_dim: int = Field(gt=0, strict=True)
    out_dim: int = Field(gt=0, strict=True)
    base_model_name_or_path: str | None = None


class ProjectionHead(nn.Module):
    """``Linear(in_dim, out_dim)`` initialised to the identity; float32 whatever the backbone."""

    def __init__(self, in_dim: int, out_dim: int | None = None) -> None:
        super().__init__()
        out_dim = in_dim if out_dim is None else out_dim
        if in_dim <= 0 or out_dim <= 0:
            raise ConfigError(f"projection head dimensions must be > 0, got {in_dim} -> {out_dim}")
        self.linear = nn.Linear(in_dim, out_dim)  # "linear.*": sentence-transformers Dense's names
        with torch.no_grad():
            self.linear.weight.copy_(torch.eye(out_dim, in_dim))
            self.linear.bias.zero_()

    @property
    def in_dim(self) -> int:
        return int(self.linear.in_features)

    @property
    def out_dim(self) -> int:
        return int(self.linear.out_features)

    def forward(self, pooled: Tensor) -> Tensor:
        return self.linear(pooled.float())


def save_head(directory: str | Path, head: ProjectionHead, base_model: str | None,
              state: dict[str, Tensor] | None = None) -> Path:
    """Write ``head_config.json`` + ``head.safetensors`` into ``directory`` (each file atomically).

    ``state``: the head's weights if not taken from ``head`` (e.g. gathered by a backend).
    """
    from safetensors.torch import save

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = {name: tensor.detach().float().cpu().contiguous()
               for name, tensor in (state if state is not None else head.state_dict()).items()}
    atomic_write_bytes(directory / HEAD_WEIGHTS, save(weights))
    record = HeadFile(in_dim=head.in_dim, out_dim=head.out_dim, base_model_name_or_path=base_model)
    atomic_write_json(directory / HEAD_CONFIG, record.model_dump(mode="json"))  # every key, adapter_type included
    return directory


def read_head_file(directory: str | Path) -> HeadFile:
    """The checked ``head_config.json`` of a head directory (ConfigError naming file and field)."""
    path = Path(directory).expanduser() / HEAD_CONFIG
    if not path.exists():
        raise ConfigError(f"{path.parent}: not a projection-head directory (no {HEAD_CONFIG})")
    try:
        return HeadFile.of_file(read_json_value(path), path)
    except DataError as exc:  # not JSON, not a regular file, or a bad value: named, as a model's config
        raise ConfigError(str(exc)) from None


def load_head(directory: str | Path) -> ProjectionHead:
    """The head saved in ``directory`` (weights checked against the config's dimensions)."""
    config = read_head_file(directory)
    return _head_with_weights(config.in_dim, config.out_dim, Path(directory).expanduser() / HEAD_WEIGHTS,
                              HEAD_CONFIG)


def _head_with_weights(in_dim: int, out_dim: int, weights_path: Path, config_name: str) -> ProjectionHead:
    """A head of these dimensions holding the weights of ``weights_path`` (any problem with the
    file -- missing, truncated, other keys or shapes -- a ConfigError naming it)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    head = ProjectionHead(in_dim, out_dim)
    if not weights_path.is_file():
        raise ConfigError(f"{weights_path.parent}: {weights_path.name} missing")
    try:
        head.load_state_dict(load_file(str(weights_path)))
    except SafetensorError as exc:  # truncated or not a safetensors file
        raise unreadable_weights(weights_path, exc) from None
    except RuntimeError as exc:  # missing/unexpected keys or shapes other than the config's
        raise ConfigError(f"{weights_path}: does not match {config_name}: {exc}") from None
    return head


def head_base_model(directory: str | Path) -> str:
    """The base model a head was trained on (``base_model_name_or_path``)."""
    base = read_head_file(directory).base_model_name_or_path
    if not base:
        raise ConfigError(f"{Path(directory) / HEAD_CONFIG}: no base_model_name_or_path; pass the base model")
    return str(base)


def sentence_transformers_head_files(head: ProjectionHead, first_index: int) -> tuple[list[dict[str, Any]],
                                                                                     dict[str, Any], dict[str, Tensor]]:
    """The head as sentence-transformers modules after the base's ``Normalize``: ``Dense``
    (identity activation) then ``Normalize``.  Returns (modules.json entries, config files,
    the Dense weights to write as ``<index>_Dense/model.safetensors``)."""
    dense, normalize = first_index, first_index + 1
    entries = [
        {"idx": dense, "name": str(dense), "path": f"{dense}_Dense",
         "type": "sentence_transformers.base.modules.dense.Dense"},
        {"idx": normalize, "name": str(normalize), "path": f"{normalize}_Normalize",
         "type": "sentence_transformers.base.modules.normalize.Normalize"},
    ]
    configs = {
        f"{dense}_Dense/config.json": {"in_features": head.in_dim, "out_features": head.out_dim, "bias": True,
                                       "activation_function": "torch.nn.modules.linear.Identity",
                                       "module_input_name": "sentence_embedding",
                                       "module_output_name": "sentence_embedding"},
        f"{normalize}_Normalize/config.json": {"module_input_name": "sentence_embedding",
                                               "module_output_name": "sentence_embedding"},
    }
    weights = {name: tensor.detach().float().cpu().contiguous() for name, tensor in head.state_dict().items()}
    return entries, configs, weights


# sentence-transformers module classes by the last part of their type name (``...dense.Dense``,
# or ``sentence_transformers.models.Dense`` as older versions wrote it): the modules an export
# writes.  Any other module computes something vis_embed would not, so such a directory is refused.
ST_BASE_MODULES = ("Transformer", "Pooling", "Normalize")
ST_DENSE = "Dense"


def load_exported_head(directory: str | Path) -> ProjectionHead | None:
    """The projection head a ``vis-embed export`` of a head wrote into ``directory`` as a
    sentence-transformers ``Dense`` module (listed in ``modules.json``), so that loading the
    export gives the vectors sentence-transformers gives; None for a directory without one
    (no ``modules.json``); ``directory`` a local folder or a Hub id (:func:`model_file`).
    Modules this code does not reproduce (another kind, a second Dense, an activation) are a
    ConfigError saying how to load the directory."""
    modules_path = model_file(directory, "modules.json")
    if modules_path is None:
        return None
    dense = _dense_modules(modules_path)
    if not dense:
        return None
    config_path = _dense_file(directory, f"{dense[0]}/config.json")
    try:
        config = read_json_value(config_path)
    except DataError as exc:
        raise ConfigError(str(exc)) from None
    _check_identity_dense(config, config_path)
    return _head_with_weights(int(config["in_features"]), int(config["out_features"]),
                              _dense_file(directory, f"{dense[0]}/model.safetensors"), str(config_path))


def _dense_file(directory: str | Path, filename: str) -> Path:
    """A file of the Dense module ``modules.json`` lists; its absence is the export's damage."""
    path = model_file(directory, filename)
    if path is None:
        raise ConfigError(f"{directory}: modules.json lists a Dense module, but {filename} is missing")
    return path


def _dense_modules(modules_path: Path) -> list[str]:
    """The folders of the ``Dense`` modules ``modules.json`` lists (at most one is applied)."""
    try:
        modules = read_json_value(modules_path)
    except DataError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ConfigError(f"{modules_path}: not a list of sentence-transformers modules")
    kinds = [(str(m.get("type", "")).rsplit(".", 1)[-1], str(m.get("path", ""))) for m in modules]
    unknown = [kind for kind, _ in kinds if kind not in (*ST_BASE_MODULES, ST_DENSE)]
    dense = [folder for kind, folder in kinds if kind == ST_DENSE]
    if unknown or len(dense) > 1:
        what = f"module {unknown[0]!r}" if unknown else f"{len(dense)} Dense modules"
        raise ConfigError(f"{modules_path}: lists {what}, which vis_embed does not apply; load this "
                          "directory with sentence-transformers (SentenceTransformer(path))")
    return dense


def _check_identity_dense(config: Any, config_path: Path) -> None:
    """A Dense module as the export writes a head: dimensions, a bias, no activation."""
    if not isinstance(config, dict):
        raise ConfigError(f"{config_path}: not a JSON object")
    for name in ("in_features", "out_features"):
        if isinstance(config.get(name), bool) or not isinstance(config.get(name), int) or config[name] <= 0:
            raise ConfigError(f"{config_path}: field '{name}' must be a positive integer, got {config.get(name)!r}")
    activation = str(config.get("activation_function", "")).rsplit(".", 1)[-1]
    if config.get("bias") is not True or activation != "Identity":
        raise ConfigError(f"{config_path}: a Dense module with bias {config.get('bias')!r} and activation "
                          f"{activation!r} is not a vis_embed projection head; load this directory with "
                          "sentence-transformers (SentenceTransformer(path))")
