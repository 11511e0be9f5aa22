"""tests/source.py: the source parsed again after CPython 3.11's spurious SystemError
(python/cpython#106905, which cannot be provoked on demand: ``ast.parse`` is made to
raise it here), and any other error raised."""

from __future__ import annotations

import ast

import pytest

from tests import source


def test_the_spurious_recursion_mismatch_is_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    real, calls = ast.parse, []

    def flaky(text: str) -> ast.Module:
        calls.append(text)
        if len(calls) < 3:
            raise SystemError("AST constructor recursion depth mismatch (before=123, after=177)")
        return real(text)

    monkeypatch.setattr(source.ast, "parse", flaky)
    tree = source.parse("x = 1\n")
    assert isinstance(tree.body[0], ast.Assign) and len(calls) == 3


def test_other_errors_are_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_text: str) -> ast.Module:
        raise SystemError("something else")

    monkeypatch.setattr(source.ast, "parse", broken)
    with pytest.raises(SystemError, match="something else"):
        source.parse("x = 1\n")
    monkeypatch.undo()
    with pytest.raises(SyntaxError):
        source.parse("x = = 1\n")
