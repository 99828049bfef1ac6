"""The package root's public API: every name in ``vis_embed.__all__`` resolves to the object its
defining module holds (no copy, no stale re-export), and ``import vis_embed`` stays light.

And the rule of docs/architecture.md for every ``__all__``: a module lists only what it defines
(a re-export is a package's deliberate API, in its ``__init__``), and a package ``__init__``
lists names of its own package that resolve."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import vis_embed

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "vis_embed").rglob("*.py"))


@pytest.mark.parametrize("name", sorted(set(vis_embed.__all__) - {"__version__"}))
def test_each_public_name_is_its_defining_modules_object(name: str) -> None:
    value = getattr(vis_embed, name)
    defining = importlib.import_module(vis_embed._PUBLIC[name])
    assert value is getattr(defining, name)
    assert getattr(value, "__module__", defining.__name__) == defining.__name__  # defined there, not re-exported


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Embeder'"):
        vis_embed.Embeder  # noqa: B018


def test_importing_the_package_imports_no_torch() -> None:
    code = "import sys, vis_embed; print(sorted(m for m in ('torch', 'transformers', 'faiss') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# ------------------------------------------------------------------ every __all__ in vis_embed/
def _all_of(tree: ast.Module) -> list[str] | None:
    """The names of a module's literal ``__all__`` (None where it has none)."""
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == "__all__":
            return list(ast.literal_eval(node.value))
    return None


def _top_level(body: list[ast.stmt]) -> tuple[set[str], dict[str, str]]:
    """The names a module body defines (def, class, assignment; under top-level if/try/with too)
    and those it imports, each with the module it comes from."""
    defined: set[str] = set()
    imported: dict[str, str] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                defined |= {name.id for name in ast.walk(target) if isinstance(name, ast.Name)}
        elif isinstance(node, ast.ImportFrom):
            imported |= {alias.asname or alias.name: "." * node.level + (node.module or "") for alias in node.names}
        elif isinstance(node, ast.Import):
            imported |= {alias.asname or alias.name.partition(".")[0]: alias.name for alias in node.names}
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in (getattr(node, "body", []), getattr(node, "orelse", []), getattr(node, "finalbody", []),
                          *(handler.body for handler in getattr(node, "handlers", []))):
                inner_defined, inner_imported = _top_level(block)
                defined |= inner_defined
                imported |= inner_imported
    return defined, imported


def _re_exports(path: str, tree: ast.Module) -> list[str]:
    """The ``__all__`` names of a non-``__init__`` module that it does not define itself."""
    defined, _ = _top_level(tree.body)
    return [name for name in _all_of(tree) or [] if name not in defined]


def _module_name(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


@pytest.mark.parametrize("path", [path for path in MODULES if not path.endswith("__init__.py")])
def test_a_module_lists_only_what_it_defines(path: str) -> None:
    """``__all__`` outside a package ``__init__`` is no place for a re-export: each name listed
    is defined there (docs/architecture.md: each name in one module, imported from there)."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    passed_on = _re_exports(path, tree)
    assert passed_on == [], f"{path}'s __all__ re-exports {passed_on}; import each from its defining module"


def _defines(module: str, name: str) -> bool:
    """Whether the vis_embed module ``module`` (dotted) defines ``name`` at its top level."""
    path = ROOT / (module.replace(".", "/") + ".py")
    path = path if path.is_file() else path.with_suffix("") / "__init__.py"
    return name in _top_level(ast.parse(path.read_text(encoding="utf-8")).body)[0]


@pytest.mark.parametrize("path", [path for path in MODULES if path.endswith("__init__.py")])
def test_a_package_api_lists_its_own_packages_names_and_they_resolve(path: str) -> None:
    """A package ``__init__``'s ``__all__`` is its deliberate API: each name resolves, and one it
    imports comes from the module of the same package that defines it (not another package's
    name passed on, not a second-hand copy)."""
    package = _module_name(path)
    module = importlib.import_module(package)
    _, imported = _top_level(ast.parse((ROOT / path).read_text(encoding="utf-8")).body)
    for name in getattr(module, "__all__", []):
        assert hasattr(module, name), f"{package}.__all__ lists {name!r}, which does not resolve"
        source = imported.get(name)
        if source is None:
            continue  # defined in the __init__ itself (or resolved lazily: vis_embed's _PUBLIC, checked above)
        source = importlib.util.resolve_name(source, package)  # a relative import, from the package
        assert source.startswith(package + "."), \
            f"{package}.__all__ passes on {name!r} from {source}: import it from there where used"
        assert _defines(source, name), f"{package} imports {name!r} from {source}, which does not define it"


def test_the_all_check_sees_a_re_export() -> None:
    """The scanner is not blind: an imported name in a module's ``__all__`` is found, a defined one
    (under a top-level if too) is not."""
    tree = ast.parse("from vis_embed.gallery.index_choice import resolve_index\n"
                     "import typing\n"
                     "if typing.TYPE_CHECKING:\n    from x import Y\nelse:\n    Z = 1\n"
                     "def search(): ...\n"
                     "__all__ = ['resolve_index', 'search', 'Y', 'Z']\n")
    assert _re_exports("vis_embed/elsewhere.py", tree) == ["resolve_index", "Y"]
