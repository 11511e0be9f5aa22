"""The test tiers: every test that tests/conftest.py marks slow by name exists, so that a
renamed test does not silently leave the slow tier for the quick one."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import SLOW_TESTS
from tests.source import parse

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_marked_slow_by_name_is_defined_in_its_module() -> None:
    missing = []
    for module, names in SLOW_TESTS.items():
        path = ROOT / module
        assert path.is_file(), f"{module}: no such test module"
        tree = parse(path)
        defined = {
            n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        missing += [f"{module}::{name}" for name in names if name not in defined]
    assert not missing, f"marked slow by name but not defined: {missing}"
