"""The package's structure as tests: import layers, no cycles, module size, real dependencies.

The import graph is read from the source (the AST of every module, imports inside functions
included), not from what a test run happens to import, so a lazy import that closes a
circle or crosses a layer is caught too.  docs/architecture.md describes the layers.
Command-line modules are the ones the CLI's command registry (``vis_embed.cli.COMMANDS``)
names, plus the dispatcher itself: what a module does, not what its file is called.
"""

from __future__ import annotations

import ast
import re
import tomllib
from functools import lru_cache
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("vis_embed",)
MAX_MODULE_LINES = 400

# The layers, lowest first (docs/architecture.md lists them): a package may import its own layer
# and those below, never above, and no two packages import each other (directly or round a
# circle).  Each entry is a whole package or top-level module: a layer is never split inside a
# package.  (A module belongs to the longest entry that prefixes its name; the root package
# "vis_embed" only to itself.)
LAYERS: tuple[tuple[str, ...], ...] = (
    ("vis_embed.errors",),
    ("vis_embed.io", "vis_embed.config", "vis_embed.distributed", "vis_embed.resources",
     "vis_embed.embedding_cache", "vis_embed.provenance"),
    # records and manifests; embedding matrices as stored (Matryoshka cut, quantization)
    ("vis_embed.data", "vis_embed.vectors"),
    # the dataset builders; the offline batch scheduler (numpy and pyarrow over the data's records)
    ("vis_embed.prep", "vis_embed.sampling"),
    # the model, by role: declarations (no torch), item -> inputs, the network, its files, the
    # inference runtime, the model's commands
    ("vis_embed.model",),
    ("vis_embed.model.inputs",),
    ("vis_embed.model.network",),
    ("vis_embed.model.files",),
    ("vis_embed.model.runtime",),
    ("vis_embed.model.cli",),
    # bridges to other tools (W&B, mteb), built on the model
    ("vis_embed.integrations",),
    # persistent faiss indexes of encoded galleries
    ("vis_embed.gallery",),
    # evaluation, and mining hard negatives with an auxiliary model: both search through the index stack
    ("vis_embed.evaluation", "vis_embed.mining"),
    ("vis_embed.training", "vis_embed.serving"),
    ("vis_embed.quickstart",),
    # the package's public API (re-exports) and the command-line dispatcher
    ("vis_embed", "vis_embed.cli", "vis_embed.__main__"),
)
ROOT_PACKAGE = "vis_embed"

# Distribution name -> import name, where they differ and the distribution may not be installed.
IMPORT_NAMES = {"pillow": "PIL", "pyyaml": "yaml", "faiss-cpu": "faiss", "faiss-gpu": "faiss",
                "scikit-learn": "sklearn", "opencv-python": "cv2"}
# Distributions imported under another package's name: torch.utils.tensorboard is tensorboard.
IMPORTED_AS = {"tensorboard": "torch.utils.tensorboard"}
# Distributions declared because a dependency needs them at run time without declaring them
# itself. Each entry is checked by test_undeclared_requirements_are_really_needed.
NEEDED_BY_DEPENDENCIES = {
    "torchvision": "transformers' Qwen-VL image and video processors import it, "
                   "but transformers does not declare it",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=None)
def _sources() -> dict[str, Path]:
    """Every module of the project's packages, by dotted name."""
    return {_module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _imports(module: str, path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """``(imported module, names taken from it)`` for every import statement of ``module``,
    anywhere in its source; relative imports are resolved."""
    found: list[tuple[str, tuple[str, ...]]] = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((base, tuple(alias.name for alias in node.names)))
    return found


def _targets(base: str, names: tuple[str, ...], modules: set[str] | dict[str, Path]) -> set[str]:
    """``from base import a, b``: each name that is a submodule, and ``base`` if any is not.

    A package's ``__init__`` that runs only because a submodule is imported is not counted
    (it would make every package that re-exports its submodules look circular).
    """
    submodules = {f"{base}.{name}" for name in names if f"{base}.{name}" in modules}
    return submodules | ({base} if len(submodules) < len(names) or not names else set())


@lru_cache(maxsize=None)
def import_graph() -> dict[str, frozenset[str]]:
    """Project module -> the project modules it imports."""
    modules = _sources()
    return {module: frozenset(target for base, names in _imports(module, path)
                              for target in _targets(base, names, modules)
                              if target in modules and target != module)
            for module, path in modules.items()}


def _cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


@lru_cache(maxsize=None)
def command_modules() -> frozenset[str]:
    """The command-line modules: each command's module in the registry, and the dispatcher."""
    from vis_embed.cli import COMMANDS

    return frozenset({target.partition(":")[0] for target, _help in COMMANDS.values()}
                     | {"vis_embed.cli", "vis_embed.__main__"})


def is_cli(module: str) -> bool:
    return module in command_modules()


def layer_of(module: str) -> int:
    """Index in LAYERS of the longest entry prefixing ``module`` (-1: in no layer)."""
    matches = [(len(entry), index) for index, entries in enumerate(LAYERS) for entry in entries
               if module == entry or (entry != ROOT_PACKAGE and module.startswith(entry + "."))]
    return max(matches)[1] if matches else -1


def _in(module: str, *packages: str) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def _violations(importer: Callable[[str], bool], forbidden: tuple[str, ...] = (), cli: bool = False) -> list[str]:
    """``"A imports B"`` for each module A that ``importer`` selects and B forbidden to it."""
    return sorted(f"{module} imports {target}" for module, targets in import_graph().items()
                  if importer(module) for target in targets
                  if _in(target, *forbidden) or (cli and is_cli(target)))


def test_the_graph_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    source = tmp_path / "pkg" / "sub" / "mod.py"
    source.parent.mkdir(parents=True)
    source.write_text("def f():\n    from vis_embed.model import embedder\n    from .. import other\n"
                      "    from .sibling import x\n")
    imports = _imports("pkg.sub.mod", source)
    assert imports == [("vis_embed.model", ("embedder",)), ("pkg", ("other",)), ("pkg.sub.sibling", ("x",))]
    modules = {"vis_embed.model", "vis_embed.model.embedder", "pkg", "pkg.other", "pkg.sub.sibling"}
    assert [_targets(base, names, modules) for base, names in imports] == [
        {"vis_embed.model.embedder"}, {"pkg.other"}, {"pkg.sub.sibling"}]
    assert _cycles({"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}) \
        == [["a", "b", "c"]]


def test_the_graph_holds_the_real_imports() -> None:
    """Guards the checks below against an empty or mis-rooted graph (they would pass vacuously)."""
    assert len(import_graph()) > 50
    assert "vis_embed.data" in import_graph()["vis_embed.training.trainer"]
    assert _violations(lambda module: module == "vis_embed.training.trainer", ("vis_embed.data",))


def test_no_import_cycle() -> None:
    assert _cycles(import_graph()) == []


def test_every_module_is_in_a_layer() -> None:
    assert layer_of("vis_embed.not_yet_placed") == -1  # a new subpackage must be placed explicitly
    assert sorted(module for module in import_graph() if layer_of(module) < 0) == []


def _upward_imports() -> set[str]:
    return {f"{module} imports {target}" for module, targets in import_graph().items()
            for target in targets if layer_of(target) > layer_of(module)}


def package_of(module: str) -> str:
    """The layer entry a module belongs to: its package (``vis_embed.model``), or the top-level
    module itself (``vis_embed.io``)."""
    return max((entry for entries in LAYERS for entry in entries
                if module == entry or (entry != ROOT_PACKAGE and module.startswith(entry + "."))), key=len)


def package_graph() -> dict[str, frozenset[str]]:
    """Package -> the other packages its modules import."""
    edges: dict[str, set[str]] = {package_of(module): set() for module in import_graph()}
    for module, targets in import_graph().items():
        for target in targets:
            if package_of(target) != package_of(module):
                edges[package_of(module)].add(package_of(target))
    return {package: frozenset(targets) for package, targets in edges.items()}


def test_no_module_imports_a_higher_layer() -> None:
    assert sorted(_upward_imports()) == []


def test_no_import_cycle_between_packages() -> None:
    """Packages, not only modules, form no circle: one that imports another is never imported
    back by it, however indirectly."""
    assert _cycles(package_graph()) == []


def test_the_package_checks_see_a_cycle_and_an_upward_arrow() -> None:
    """Guards the checks above: the real graph's arrows, turned round, are upward and circular."""
    assert layer_of("vis_embed.training.trainer") > layer_of("vis_embed.model.runtime.embedder") \
        > layer_of("vis_embed.data")
    assert layer_of("vis_embed.cli") > layer_of("vis_embed.quickstart.pipeline") > layer_of("vis_embed.serving.app")
    assert layer_of("vis_embed.serving.app") > layer_of("vis_embed.evaluation.report") \
        > layer_of("vis_embed.gallery.store") > layer_of("vis_embed.model.runtime.encode_file") \
        > layer_of("vis_embed.vectors")
    # the model's roles, each its own package: runtime > files > network > inputs > declarations
    assert layer_of("vis_embed.model.cli") > layer_of("vis_embed.model.runtime.embedder") \
        > layer_of("vis_embed.model.files.export") > layer_of("vis_embed.model.network.embedding_model") \
        > layer_of("vis_embed.model.inputs.preparer") > layer_of("vis_embed.model.embedding_config")
    assert package_of("vis_embed.model.runtime.encode_file") == "vis_embed.model.runtime"
    assert package_of("vis_embed.io") == "vis_embed.io"
    graph = package_graph()
    runtime = "vis_embed.model.runtime"
    assert "vis_embed.vectors" in graph[runtime] and runtime in graph["vis_embed.gallery"]
    turned = {**graph, "vis_embed.vectors": graph["vis_embed.vectors"] | {runtime}}
    assert any({runtime, "vis_embed.vectors"} <= set(cycle) for cycle in _cycles(turned))


def test_command_modules_come_from_the_registry() -> None:
    """Every registered command's module exists, and a module named like a command module
    (``cli.py``, ``*_cli.py``) is one: library code is not named ``*_cli``."""
    modules = _sources()
    assert sorted(command_modules() - set(modules)) == []
    named_like_cli = {module for module in modules
                      if module.rpartition(".")[2] == "cli" or module.endswith("_cli")}
    assert sorted(named_like_cli - command_modules()) == []


def test_data_and_prep_import_no_model_training_or_evaluation() -> None:
    assert _violations(lambda module: _in(module, "vis_embed.data", "vis_embed.prep"),
                       ("vis_embed.model", "vis_embed.training", "vis_embed.evaluation")) == []


def test_model_imports_no_training_evaluation_or_cli() -> None:
    assert _violations(lambda module: _in(module, "vis_embed.model") and not is_cli(module),
                       ("vis_embed.training", "vis_embed.evaluation"), cli=True) == []


def test_no_library_module_imports_a_cli_module() -> None:
    assert _violations(lambda module: not is_cli(module), cli=True) == []


def _print_calls(path: Path) -> list[int]:
    return [node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"]


def test_library_modules_log_instead_of_printing(tmp_path: Path) -> None:
    """Only command modules print (their results); the library logs (logging.getLogger(__name__)),
    which the command line shows on stderr and a library user configures."""
    probe = tmp_path / "probe.py"
    probe.write_text("import logging\nlogging.getLogger(__name__).info('x')\nif True:\n    print('y')\n")
    assert _print_calls(probe) == [4]
    printing = {module: _print_calls(path) for module, path in _sources().items() if not is_cli(module)}
    assert {module: lines for module, lines in printing.items() if lines} == {}


def test_no_module_over_the_line_limit() -> None:
    sizes = {module: len(path.read_text(encoding="utf-8").splitlines()) for module, path in _sources().items()}
    assert any(module.startswith("vis_embed.prep.") for module in sizes)  # the dataset builders too
    assert {module: lines for module, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}


def _import_names(distribution: str) -> set[str]:
    normalised = re.sub(r"[-_.]+", "-", distribution).lower()
    installed = {name for name, dists in packages_distributions().items()
                 if normalised in {re.sub(r"[-_.]+", "-", d).lower() for d in dists}}
    return installed | {IMPORT_NAMES.get(normalised, normalised.replace("-", "_"))}


def test_every_runtime_dependency_is_imported() -> None:
    requirements = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    distributions = [re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0) for requirement in requirements]
    imported = {base for module, path in _sources().items() for base, _ in _imports(module, path)}
    top_level = {name.split(".")[0] for name in imported}

    def is_imported(distribution: str) -> bool:
        return bool(_import_names(distribution) & top_level) or IMPORTED_AS.get(distribution) in imported

    unused = {d for d in distributions if not is_imported(d)} - set(NEEDED_BY_DEPENDENCIES)
    assert sorted(unused) == []


def test_undeclared_requirements_are_really_needed(tiny_checkpoint) -> None:
    """The allowance above holds only while loading a Qwen-VL processor really imports them."""
    import subprocess
    import sys

    script = ("import sys; from transformers import AutoProcessor; "
              f"AutoProcessor.from_pretrained({str(tiny_checkpoint())!r}); "
              "print(' '.join(sorted(m for m in sys.modules if '.' not in m)))")
    loaded = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                            text=True).stdout.split()
    assert sorted(name for name in NEEDED_BY_DEPENDENCIES if name not in loaded) == []


def test_no_issue_numbers_in_library_code() -> None:
    """A comment or docstring says why, not which issue asked (the tracker is not shipped)."""
    pattern = re.compile(r"\bissues?[ -]#?\d+|pre-issue-\d+", re.IGNORECASE)
    found = {module: [number for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                      if pattern.search(line)] for module, path in _sources().items()}
    assert {module: lines for module, lines in found.items() if lines} == {}
