"""The type stubs (python/ucache/_ucache.pyi) name only what the extension has: every class
and method in them exists at run time."""

from __future__ import annotations

import ast
from pathlib import Path

import ucache
import ucache._ucache as native

STUBS = Path(__file__).resolve().parents[1] / "python/ucache/_ucache.pyi"


def test_every_stubbed_class_and_method_exists():
    tree = ast.parse(STUBS.read_text())
    checked = 0
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            cls = getattr(native, node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name not in ("__init__", "__buffer__"):
                    assert hasattr(cls, item.name), f"{node.name}.{item.name} is in the stubs only"
                    checked += 1
    assert checked > 40
    assert {"Landing", "Pin", "Mapping"} <= set(ucache.__all__)
    assert ucache.Landing is native.Landing
