"""Exceptions with messages a user can act on.

Every error raised for bad input names *where* the problem is (file, line, field) so the
user can fix it without reading our source.  The CLI prints these without a traceback.
"""

from __future__ import annotations

from pathlib import Path


class VisEmbedError(Exception):
    """Base class: an error the CLI reports as ``error: <message>`` and exit code 2."""


class DataError(VisEmbedError, ValueError):
    """Malformed or inconsistent input data.

    ``DataError("msg", path="a.jsonl", line=3, field="image")`` renders as
    ``a.jsonl:3: field 'image': msg``.
    """

    def __init__(self, message: str, *, path: str | Path | None = None,
                 line: int | None = None, field: str | None = None) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        self.reason = message
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.line is None else f"{self.path}:{self.line}"
        parts = [p for p in (where, f"field '{self.field}'" if self.field else "") if p]
        prefix = ": ".join(parts)
        return f"{prefix}: {self.reason}" if prefix else self.reason


class ConfigError(VisEmbedError, ValueError):
    """Invalid recipe, data config or manifest (unknown or ill-typed key)."""


class SettingsError(DataError, ConfigError):
    """A settings object built with a bad value (``EvalSettings(batch_size=0)``,
    ``ServerSettings(max_wait_ms=inf)``): the one validation error of every settings class
    (:class:`vis_embed.config.Settings`), naming the field, or the flag when the value came from
    the command line.  Both a DataError (it names a field) and a ConfigError (a setting)."""


class FingerprintMismatchError(VisEmbedError):
    """An artefact (schedule, cache, checkpoint) was built from different inputs."""
