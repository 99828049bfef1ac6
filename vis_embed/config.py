"""One formatter from pydantic's ``ValidationError`` to messages naming file, line and field.

Every YAML configuration (recipes, training-data configs, benchmark manifests) is a pydantic
model and reports a bad key the same way: ``FILE[:LINE]: field 'dotted.key': reason``.  The
line is known when the document was read with
:func:`vis_embed.data.yaml_lines.load_yaml_with_lines` (its mappings remember where each key
is); without it the message names file and field.

Validators raise :func:`invalid` for checks pydantic cannot express (vocabularies, files that
must exist, keys that depend on another key): its message is shown as written, and it may
name the field it is about, so a check on a whole entry still points at the offending key.
A validator that raises a plain ``ValueError`` (or fails an ``assert``) is shown as written
too (no pydantic "Value error, " prefix, no echo of the input), at the field it validates;
a model validator's problem on the model itself names no field (there is none to name).

The error type is one rule, whatever the entry point: a bad settings value is a
:class:`~vis_embed.errors.SettingsError` -- built directly (``Settings(...)``: names the field),
from a document (:func:`validated`, :func:`validate_document`: names file, line and dotted
key), from flags (:func:`from_arguments`: names the flag; the CLI exits 2).  It is both a
DataError (it names where the problem is) and a ConfigError (it is a setting), so callers that
catch either catch it; further problems of the same validation are listed under the first
(``  also: ...``).  Only a caller that passes its own ``as_error`` to :func:`reported` raises
something else (a manifest entry's options reported through the manifest's own validator).
"""

from __future__ import annotations

import argparse
import math
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

from vis_embed.errors import DataError, SettingsError

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo

Model = TypeVar("Model", bound=BaseModel)
Record = TypeVar("Record", bound="FileRecord")
Entry = TypeVar("Entry", bound=BaseModel)


class Settings(BaseModel):
    """The base of every settings class (recipe and its sections, data configs, manifests,
    EmbeddingConfig, command settings), so they all behave alike:

    * unknown keys are errors, assignment is validated, and ``allow_inf_nan=False``: pydantic
      floats otherwise take ``inf`` and ``nan`` (``"inf"``, ``.nan``), and ``optimizer.lr=inf``
      or ``max_wait_ms=inf`` would only show up as a diverged run or a server that never answers;
    * a bad value is a :class:`~vis_embed.errors.SettingsError` from every entry point (the
      module's docstring): built directly (``ServerSettings(max_wait_ms=-1)``) it names the
      field, from a document (:func:`validated`, :func:`validate_document`) file, line and
      dotted key, from flags (:func:`from_arguments`) the flag; further problems listed under it;
    * command-line flags are generated from the fields that name one (:func:`flag`,
      :func:`add_model_arguments`).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    def __init__(self, **values: Any) -> None:
        with reported(as_error=settings_error):
            super().__init__(**values)

    # pydantic routes the validation of a nested model through a custom __init__ unless it is
    # marked as the base one: a recipe section must raise pydantic's errors, so that the
    # recipe's formatter names 'section.key' and its line.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]


class FileRecord(BaseModel):
    """The base of every record of a JSON file vis_embed writes and reads back (results.json,
    index.json, an encode's ``.ids.json``, model_card.json, trainer_state.json): a file, not a
    setting, so unlike :class:`Settings`:

    * unknown keys are kept (``extra="allow"``: what a newer writer adds; ``model_extra``), and
      a subclass makes optional every key an older file may lack;
    * nothing a writer wrote is refused for being a float (``inf`` / ``nan`` load);
    * a bad value is a :class:`~vis_embed.errors.DataError` through the one formatter
      (:func:`reported`): read with :meth:`of_file` it names the file and the key, built
      directly (a writer's bug) the key.
    """

    model_config = ConfigDict(extra="allow", validate_assignment=True, protected_namespaces=())

    def __init__(self, **values: Any) -> None:
        with reported(as_error=_first_problem):
            super().__init__(**values)

    # nested records report their problems to the outer one (see Settings.__init__)
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def of_file(cls: type[Record], values: Any, source: str | Path | None) -> Record:
        """The record of a parsed JSON file (see :mod:`vis_embed.io`'s readers); not an object,
        or a key of the wrong type: a DataError naming ``source`` (and the key)."""
        if not isinstance(values, Mapping):
            raise DataError(f"expected a JSON object, got {type(values).__name__}", path=source)
        with reported(source, as_error=_first_problem):
            return cls.model_validate(values)
        raise AssertionError("unreachable: reported() re-raises")

    def as_json(self) -> dict[str, Any]:
        """The keys as written (those given when it was made or read), JSON types."""
        return self.model_dump(mode="json", exclude_unset=True)


class ModelRecord(FileRecord):
    """Which model made a file's vectors: an encode's ``.ids.json`` and ``index.json`` record it
    as ``model`` (``{"name", "adapter", "fingerprint"}``), and a gallery refuses queries of
    another model by its fingerprint.  (results.json's ``model`` block keeps its own shape,
    ``fingerprints: {"model", "benchmark"}``: data/results_file.ResultsModel.)"""

    model_config = ConfigDict(strict=True)
    name: str | None = None
    adapter: str | None = None
    fingerprint: str | None = None


def _first_problem(problems: list[DataError]) -> DataError:
    return problems[0]


def settings_error(problems: list[DataError]) -> SettingsError:
    """The one error of a settings validation: the first problem, the others listed under it."""
    first, *others = problems
    reason = "\n".join([first.reason, *(f"  also: {other}" for other in others)])
    return SettingsError(reason, path=first.path, line=first.line, field=first.field)


def flag(spelling: str, **extra: Any) -> dict[str, Any]:
    """A field's ``json_schema_extra`` making it the command-line flag ``spelling`` (the one flag
    declaration; the keys :func:`add_model_arguments` reads: ``group``, ``metavar``, ``choices``,
    ``parse``, ``negate``)."""
    return {"flag": spelling, **extra}


def get_dotted(document: Any, dotted: str) -> Any:
    """``document["a"]["b"]`` for ``"a.b"`` (the key form of ``--set`` and of record fields), or
    None where a part is missing or a level is not a mapping."""
    value: Any = document
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def dotted_leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c": (2,)}`` -> ``{"a.b": 1, "c": [2]}``: every leaf of nested mappings by
    its dotted key (what a recipe comparison names)."""
    if not isinstance(tree, Mapping):
        return {prefix: list(tree) if isinstance(tree, tuple) else tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(dotted_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


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


_INVALID = "vis_embed_invalid"


def invalid(message: str, *field: str | int) -> PydanticCustomError:
    """A validation error shown as ``message``; ``field`` extends the location it points at.

    ``raise invalid("unknown kind 'x'")`` in a field validator names that field;
    ``raise invalid("duplicate name", "datasets", 1, "name")`` in a model validator names
    ``datasets[1].name`` (relative to the model the validator belongs to).
    """
    # The message travels in the context: a template with braces in user text would break.
    return PydanticCustomError(_INVALID, "{reason}", {"reason": message, "field": list(field)})


def _unknown(value: Any, choices: tuple[str, ...], what: str) -> str:
    return f"unknown {what} {value!r} (known: {', '.join(choices)})"


def one_of(value: Any, choices: tuple[str, ...], what: str, *field: str | int) -> Any:
    """``value`` if it is one of ``choices``, else ``invalid("unknown WHAT 'x' (known: ...)")``
    (in a pydantic validator)."""
    if value not in choices:
        raise invalid(_unknown(value, choices, what), *field)
    return value


def member_of(value: Any, choices: tuple[str, ...], what: str, field: str) -> Any:
    """:func:`one_of` for plain Python callers: a DataError naming ``field``."""
    if value not in choices:
        raise DataError(_unknown(value, choices, what), field=field)
    return value


def uniquely_named(entries: list[Entry], what: str = "dataset") -> list[Entry]:
    """A field validator's body for ``datasets:`` lists: non-empty, and no two entries share a ``name``."""
    if not entries:
        raise invalid(f"'{what}s' must be a non-empty list")
    seen: set[str] = set()
    for position, entry in enumerate(entries):
        if entry.name in seen:  # type: ignore[attr-defined]
            raise invalid(f"duplicate {what} name {entry.name!r}", position, "name")  # type: ignore[attr-defined]
        seen.add(entry.name)  # type: ignore[attr-defined]
    return entries


def _location(item: Any) -> tuple[Any, ...]:
    extra = item.get("ctx", {}).get("field", []) if item["type"] == _INVALID else []
    return (*item["loc"], *extra)


def _reason(item: Any) -> str:
    if item["type"] == _INVALID:
        return item["ctx"]["reason"]
    if item["type"] in ("value_error", "assertion_error") and "error" in item.get("ctx", {}):
        return str(item["ctx"]["error"])  # a validator's own message, as written
    if item["type"] == "extra_forbidden":
        return "unknown key"
    if item["type"] == "missing":
        return "required key missing"
    return f"{item['msg']} (got {item.get('input')!r})"


def format_validation_error(error: ValidationError, source: str | Path | None, document: Any = None,
                            dotted: Any = None) -> list[DataError]:
    """One ``DataError(path=source, line=, field=)`` per problem pydantic found: the package's
    one ValidationError formatter (YAML configs, recipes, schedule settings, dataset options).

    ``document``: the line-aware YAML (data/yaml_lines) the model was validated from, for line
    numbers; ``source`` None: settings that come from no file.  ``dotted`` turns a ``loc`` into
    the field name (default :func:`dotted_field`).
    """
    name = dotted or dotted_field
    return [DataError(_reason(item), path=source, line=None if document is None else line_of(document, _location(item)),
                      field=_field(name, _location(item))) for item in error.errors()]


def _field(name: Callable[[tuple[Any, ...]], str], loc: tuple[Any, ...]) -> str | None:
    """The field a problem names; None for the model itself (a model validator's check on a
    settings object built directly, or a document that is no mapping)."""
    field = name(loc)
    return None if field == dotted_field(()) else field


@contextmanager
def reported(source: str | Path | None = None, document: Any = None, dotted: Any = None,
             as_error: Callable[[list[DataError]], Exception] | None = None) -> Iterator[None]:
    """Validation inside the block reports like every settings class of the package: a pydantic
    ``ValidationError`` becomes the one :func:`settings_error` (a SettingsError), or
    ``as_error(problems)`` (the DataErrors of :func:`format_validation_error`).  With it,
    ``except ValidationError`` is written here only (tests/test_one_rule.py)."""
    try:
        yield
    except ValidationError as exc:
        problems = format_validation_error(exc, source, document, dotted)
        raise (as_error or settings_error)(problems) from None


def validated(model: type[Model], values: Any, source: str | Path | None = None, document: Any = None,
              dotted: Any = None, as_error: Callable[[list[DataError]], Exception] | None = None) -> Model:
    """``model.model_validate(values)``; problems reported by :func:`reported` (a SettingsError
    naming ``source`` and each key, unless ``as_error`` says otherwise)."""
    with reported(source, document, dotted, as_error):
        return model.model_validate(values)
    raise AssertionError("unreachable: reported() re-raises")


def validate_document(model: type[Model], document: Any, source: str | Path,
                      context: dict[str, Any] | None = None) -> Model:
    """``model`` validated from a line-aware YAML ``document`` (with a validation ``context``);
    a SettingsError naming the first problem's file, line and key, the others listed under it,
    so one run shows them all."""
    if not isinstance(document, dict):  # pydantic's words name our class: "instance of Manifest (got None)"
        shown = {type(None): "an empty file", list: "a list", str: "a string"}.get(type(document),
                                                                               type(document).__name__)
        raise SettingsError(f"expected a YAML mapping (keys such as 'datasets:'), got {shown}", path=source)
    with reported(source, document):
        return model.model_validate(document, context=context)
    raise AssertionError("unreachable: reported() re-raises")


# ------------------------------------------------------------------ command-line flags from a model
def argument_type(annotation: Any) -> tuple[Any, tuple[Any, ...] | None]:
    """argparse ``type`` and ``choices`` of a field annotation (``int | None``, ``Literal[...]``)."""
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    if typing.get_origin(annotation) is Literal:
        return type(args[0]), tuple(args)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return argument_type(args[0])
    return annotation, None


def finite_float(text: str) -> float:
    """argparse ``type`` of a float flag that is no settings field: ``inf`` and ``nan`` are refused
    (argparse exits 2 naming the flag), as :class:`Settings` refuses them."""
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def comma_list(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]`` (a ``--datasets A,B`` flag)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def add_model_arguments(parser: argparse.ArgumentParser, model: type[BaseModel],
                        groups: Mapping[str, Any] | None = None, only: Iterable[str] | None = None) -> list[str]:
    """A flag for every field of ``model`` whose ``json_schema_extra`` names one (``flag``): its
    help is the field's description with its default, its type and choices the annotation's;
    a boolean field is a switch: ``--x`` sets it True, or with ``negate`` an ``--no-x`` style
    switch sets it False; ``parse`` names a parser (``"comma_list"``); ``choices`` lists a
    vocabulary a validator checks; ``group`` names the entry of ``groups`` (argument groups of
    ``parser``) the flag is listed under.  Defaults are the model's, so a flag and the Python
    API default alike (a field that defaults to None says in its description what unset
    means); a field without a default is a required flag.  ``only``: these fields, in this
    order (default: every flag field in declaration order).  Returns the field names added."""
    added = []
    for name in (model.model_fields if only is None else only):
        field = model.model_fields[name]
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if "flag" not in extra:
            continue
        options: dict[str, Any] = {"dest": name}
        options.update({"required": True} if field.is_required() else {"default": field.default})
        if extra.get("negate") or field.annotation is bool:
            options.update(action="store_false" if extra.get("negate") else "store_true",
                           help=str(field.description).replace("%", "%%"))
        else:
            text = str(field.description) + ("" if field.default is None or field.is_required()
                                             else f" (default: {field.default})")
            options.update(value_options(field, text))
        target = (groups or {})[extra["group"]] if "group" in extra else parser
        target.add_argument(str(extra["flag"]), **options)
        added.append(name)
    return added


def value_options(field: FieldInfo, help_text: str) -> dict[str, Any]:
    """The argparse options of a settings field that takes a value -- every generated flag's one
    rule (:func:`add_model_arguments`, embedding_config.add_embedding_config_arguments): type and
    choices from the annotation, unless ``json_schema_extra`` names ``choices`` (a vocabulary a
    validator checks) or a ``parse`` function; its ``metavar``; the help with ``%`` escaped."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    kind, choices = argument_type(field.annotation)
    choices = tuple(extra["choices"]) if "choices" in extra else choices
    kind = {"comma_list": comma_list}.get(str(extra.get("parse")), kind)
    return {"type": kind, "choices": choices, "metavar": extra.get("metavar"), "help": help_text.replace("%", "%%")}


def from_arguments(model: type[Model], args: argparse.Namespace, **values: Any) -> Model:
    """``model`` from the flags :func:`add_model_arguments` added (plus ``values``); a bad value
    is a SettingsError naming the flag (each problem's)."""
    flags = {name: field.json_schema_extra["flag"] for name, field in model.model_fields.items()
             if isinstance(field.json_schema_extra, dict) and "flag" in field.json_schema_extra}
    given = {name: getattr(args, name) for name in flags if hasattr(args, name)}

    def flag_of(loc: tuple[Any, ...]) -> str:
        name = str(loc[0]) if loc else "(root)"
        return f"{flags[name]}" if name in flags else dotted_field(loc)

    with reported(dotted=flag_of, as_error=settings_error):
        return model.model_validate({**given, **values})
    raise AssertionError("unreachable: reported() re-raises")
