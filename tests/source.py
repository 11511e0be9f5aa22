"""Reading the project's own source as syntax trees, for the tests that check its
structure."""

from __future__ import annotations

import ast
from pathlib import Path


def parse(source: str | Path) -> ast.Module:
    """``ast.parse`` of a text or a file's text. CPython 3.11 can raise a spurious
    ``SystemError: AST constructor recursion depth mismatch`` when another thread builds
    a syntax tree at the same time (python/cpython#106905; its traceback formatting
    does, for the carets it prints): the same text is parsed again, at most twice more."""
    text = source.read_text() if isinstance(source, Path) else source
    for _ in range(2):
        try:
            return ast.parse(text)
        except SystemError as e:
            if "recursion depth mismatch" not in str(e):
                raise
    return ast.parse(text)
