"""One formatter from pydantic's ``ValidationError`` to messages naming file, line and field.

Every YAML configuration (recipes; data configs and manifests as they move to pydantic)
reports a bad key the same way: ``FILE[:LINE]: field 'dotted.key': reason``.  The line is
known when the document was read with :func:`vis_embed.data.yaml_lines.load_yaml_with_lines`
(its mappings remember where each key is); without it the message names file and field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vis_embed.errors import DataError


def dotted_field(loc: tuple[Any, ...]) -> str:
    """``("datasets", 0, "kind")`` -> ``"datasets[0].kind"``; ``()`` -> ``"(root)"``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(root)"


def line_of(document: Any, loc: tuple[Any, ...]) -> int | None:
    """Line of the deepest key of ``loc`` found in a line-aware YAML document (None if unknown)."""
    line, node = None, document
    for part in loc:
        if hasattr(node, "line_of") and isinstance(node, dict) and part in node:
            line, node = node.line_of(part), node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
            line = getattr(node, "line", line)
        else:
            line = getattr(node, "line", line)
            break
    return line


def _reason(item: Any) -> str:
    if item["type"] == "extra_forbidden":
        return "unknown key"
    if item["type"] == "missing":
        return "required key missing"
    return f"{item['msg']} (got {item.get('input')!r})"


def format_validation_error(error: ValidationError, source: str | Path, document: Any = None,
                            dotted: Any = None) -> list[DataError]:
    """One ``DataError(path=source, line=, field=)`` per problem pydantic found.

    ``dotted`` turns a ``loc`` into the field name (default :func:`dotted_field`).
    """
    name = dotted or dotted_field
    return [DataError(_reason(item), path=source, line=None if document is None else line_of(document, item["loc"]),
                      field=name(item["loc"])) for item in error.errors()]
