"""YAML loading that remembers line numbers, so config errors can point at the offending key.

``load_yaml_with_lines`` returns plain Python objects, except that every mapping is a
``LineDict``: a ``dict`` that also knows the line it starts on and the line of each key.
Duplicate keys are an error (PyYAML silently keeps the last one, hiding typos).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vis_embed.errors import DataError
from vis_embed.io import without_bom


class LineDict(dict):
    """A dict parsed from YAML; ``line`` is where it starts, ``key_lines[key]`` where a key is
    (None: not from the file, e.g. a ``--set`` value)."""

    line: int | None = None
    key_lines: dict[Any, int | None]

    def line_of(self, key: Any) -> int | None:
        return self.key_lines.get(key, self.line) if hasattr(self, "key_lines") else self.line


class _LineLoader(yaml.SafeLoader):
    """SafeLoader whose mappings are ``LineDict``s (set up by ``_construct_mapping``)."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    mapping = LineDict()
    mapping.line = node.start_mark.line + 1
    mapping.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if isinstance(key, (list, dict)):  # `? [a, b]`: no dict can hold it
            raise DataError(f"a key must be a single value, not a {type(key).__name__}",
                            path=getattr(loader, "source_path", None), line=line)
        if key in mapping:
            raise DataError(f"duplicate key {key!r}", path=getattr(loader, "source_path", None),
                            line=line, field=str(key))
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.key_lines[key] = line
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml_with_lines(path: str | Path) -> Any:
    """Parse a YAML file; syntax errors become ``DataError`` naming file and line."""
    path = Path(path)
    if not path.is_file():
        raise DataError("file not found", path=path)
    data = without_bom(path.read_bytes())  # a BOM is an encoding mark, not YAML
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text (invalid byte 0x{data[exc.start]:02x})", path=path,
                        line=data.count(b"\n", 0, exc.start) + 1) from None
    loader = None
    try:
        loader = _LineLoader(text)  # checks every character: a ReaderError here
        loader.source_path = str(path)  # type: ignore[attr-defined]
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = None if mark is None else mark.line + 1
        raise DataError(f"invalid YAML: {exc.problem or exc}", path=path, line=line) from None
    except yaml.reader.ReaderError as exc:  # a control character (NUL, ESC, ...): no mark, a position
        raise DataError(f"invalid YAML: character 0x{exc.character:02x} is not allowed", path=path,
                        line=text.count("\n", 0, exc.position) + 1) from None
    except RecursionError:  # a hostile file nested past the interpreter's limit: bounded, named
        raise DataError("invalid YAML: nested too deeply", path=path) from None
    finally:
        if loader is not None:
            loader.dispose()
