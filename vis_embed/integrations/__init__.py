"""Bridges to other tools' ecosystems: mteb / MIEB evaluation (:mod:`.mteb`, :mod:`.mteb_tasks`).

Each bridge needs an optional extra (``pip install 'vis_embed[mteb]'``); :func:`require`
turns a missing one into a one-line :class:`~vis_embed.errors.ConfigError` naming the extra.
"""

from __future__ import annotations

from importlib.util import find_spec

from vis_embed.errors import ConfigError


def require(module: str, extra: str, needed_for: str, package: str | None = None, because: str | None = None) -> None:
    """Raise ConfigError naming ``vis_embed[extra]`` when ``module`` is not installed -- the one
    missing-extra rule (the integrations, and the recipe's deepspeed / flash-attn / wandb).
    Checked with ``find_spec``: nothing is imported (DeepSpeed's import alone takes seconds)."""
    if find_spec(module) is None:
        reason = f" ({because})" if because else ""
        raise ConfigError(f"{needed_for} needs {package or module}{reason}: pip install 'vis_embed[{extra}]'")
