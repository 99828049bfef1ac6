"""The package root's public API: every name in ``vis_embed.__all__`` resolves to the object its
defining module holds (no copy, no stale re-export), and ``import vis_embed`` stays light."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import vis_embed


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
