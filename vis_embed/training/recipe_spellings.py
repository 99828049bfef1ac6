"""The older recipe spellings, read with their meaning kept.

These spellings are contracts: recipes written before the ``adaptation:`` section (and before
``two_tier`` became NearID's loss) are files users have, and they keep loading.  Nothing here
is the current schema (:mod:`vis_embed.training.recipe` is); this module only maps the older
spellings onto it, or refuses a moved key with a pointer to where it went:

* ``adaptation: KIND`` -> ``adaptation.kind: KIND``;
* top-level ``lora:`` / ``head:`` -> ``adaptation.lora`` / ``adaptation.head`` (their keys over
  the section's);
* ``lora.enabled: false`` -> ``adaptation.kind: full`` (``true``: no change);
* ``--set adaptation=KIND`` -> ``--set adaptation.kind=KIND`` (the section's other keys kept);
* ``loss.two_tier.weight`` / ``loss.two_tier.margin`` (the margin variant's keys, from when
  ``two_tier`` was that variant): refused, naming ``loss.kind: two_tier_margin``.

Moved sections stay line-aware, so an error in one still names its line in the recipe file.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from vis_embed.config import Settings, invalid
from vis_embed.data.yaml_lines import LineDict


class MovedTwoTierKeys(Settings):
    """The base of ``loss.two_tier``: the margin variant's keys (two_tier was that variant before
    it became NearID's loss), refused with a pointer to where they went; never written back
    (``recipe_to_dict``)."""

    weight: float | None = Field(None, exclude=True)
    margin: float | None = Field(None, exclude=True)

    @model_validator(mode="after")
    def _margin_keys_moved(self) -> "MovedTwoTierKeys":
        for key in ("weight", "margin"):
            if getattr(self, key) is not None:
                raise invalid(f"{key!r} belongs to the margin variant, now `loss.kind: two_tier_margin` "
                              f"with `loss.two_tier_margin.{key}`; NearID's two_tier takes alpha and temperature", key)
        return self


def _lines(mapping: Any) -> dict[Any, int | None]:
    return dict(getattr(mapping, "key_lines", {}))


def _mapping(values: dict[str, Any], lines: dict[Any, int | None], start: int | None,
             line_aware: bool) -> dict[str, Any]:
    """``values``, as a line-aware mapping when the recipe was read from YAML: an error in a
    moved section still names its line (``start`` None: a section ``--set`` made, on no line)."""
    if not line_aware:
        return dict(values)
    moved = LineDict(values)
    moved.line, moved.key_lines = start, {key: line for key, line in lines.items() if key in values}
    return moved


def upgrade_recipe_spellings(document: Any) -> Any:
    """A recipe document with the older adaptation spellings moved into ``adaptation:``, their
    meaning kept (the top level changed in place, sections copied; idempotent):
    ``adaptation: KIND`` -> ``adaptation.kind``; top-level ``lora:`` / ``head:`` ->
    ``adaptation.lora`` / ``adaptation.head`` (their keys over the section's);
    ``lora.enabled: false`` -> ``kind: full`` (``true``: no change)."""
    if not isinstance(document, dict):
        return document
    aware = isinstance(document, LineDict)
    top = _lines(document)
    older = {name: document.pop(name) for name in ("lora", "head") if name in document}
    section: Any = document.get("adaptation", {})
    if isinstance(section, str):  # `adaptation: head`
        section, lines = {"kind": section}, {"kind": top.get("adaptation")}
    elif isinstance(section, dict):
        lines = _lines(section)
    else:
        return document  # not a mapping: the section's validation names it
    section = dict(section)
    for name, value in older.items():
        inner = section.get(name)
        if isinstance(value, dict):
            merged = {**inner, **value} if isinstance(inner, dict) else value
            # a key of the older section is on its own line, or on none (a --set value): never the one it overrides
            value = _mapping(merged, {**_lines(inner), **{key: _lines(value).get(key) for key in value}},
                             getattr(value, "line", None), aware)
        section[name], lines[name] = value, top.get(name)
    lora = section.get("lora")
    if isinstance(lora, dict) and "enabled" in lora and isinstance(lora["enabled"], bool):
        if not lora["enabled"] and section.get("kind", "lora") == "lora":
            section["kind"], lines["kind"] = "full", _lines(lora).get("enabled")
        section["lora"] = _mapping({key: v for key, v in lora.items() if key != "enabled"}, _lines(lora),
                                   getattr(lora, "line", None), aware)
    if section or "adaptation" in document:
        start = top.get("adaptation") or next((top[name] for name in older if top.get(name)), 0)
        document["adaptation"] = _mapping(section, lines, start or 0, aware)
        if aware and "adaptation" not in top:
            document.key_lines["adaptation"] = start or None
    return document


def upgrade_override_path(path: list[str], value: Any) -> list[str]:
    """The key a ``--set`` writes: the older ``--set adaptation=KIND`` sets the kind only (the
    section's other keys kept); any other key as given."""
    if path == ["adaptation"] and isinstance(value, str):
        return ["adaptation", "kind"]
    return path
