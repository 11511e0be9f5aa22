"""The test tiers are marked one way: a slow test carries ``pytest.mark.slow`` in its own
module (a decorator or the module's ``pytestmark``), and the shared conftest marks no test
slow by name, so that the mark is seen where the test is read."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.source import parse

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def _slow_marks(node: ast.AST) -> int:
    """``pytest.mark.slow`` attributes under ``node``."""
    return sum(
        1
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and n.attr == "slow"
        and isinstance(n.value, ast.Attribute)
        and n.value.attr == "mark"
    )


def test_no_conftest_marks_a_test_slow() -> None:
    for conftest in TESTS.rglob("conftest.py"):
        tree = parse(conftest)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_marker":
                args = [a.value for a in node.args if isinstance(a, ast.Constant)]
                assert "slow" not in args, f"{conftest.relative_to(ROOT)}: marks tests slow"
        assert _slow_marks(tree) == 0, f"{conftest.relative_to(ROOT)}: marks tests slow"


def test_slow_marks_sit_on_tests_or_modules() -> None:
    """Every ``pytest.mark.slow`` of a test module decorates a test (or a class of them) or
    is the module's ``pytestmark``; and the slow tier is not empty."""
    total = 0
    misplaced = []
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = parse(path)
        placed = 0
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                placed += sum(_slow_marks(d) for d in node.decorator_list)
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
            ):
                placed += _slow_marks(node)
        found = _slow_marks(tree)
        total += found
        if found != placed:
            misplaced.append(f"{path.relative_to(ROOT)}: {found - placed} elsewhere")
    assert not misplaced, misplaced
    assert total >= 60, total
