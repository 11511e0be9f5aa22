"""The documents stay true to the repository: every file and name that
``docs/spec-map.md`` cites exists, ``docs/README.md`` lists every document under
``docs/``, every relative link in the Markdown files resolves, and the README stays
short enough to read in a few minutes."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from tests.source import parse

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
MARKDOWN = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
README_MAX_LINES = 150  # the README answers what, how to run, where to read on


@cache
def defined_names(path: Path) -> set[str]:
    """Top-level functions, classes and assignments of ``path``, and ``Class.member``
    for the functions and assignments in a class body."""
    names: set[str] = set()

    def targets(node: ast.stmt) -> list[str]:
        if isinstance(node, ast.Assign):
            return [t.id for t in node.targets if isinstance(t, ast.Name)]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            return [node.target.id]
        return []

    for node in parse(path).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}.{member.name}")
                names.update(f"{node.name}.{t}" for t in targets(member))
        else:
            names.update(targets(node))
    return names


def spec_map_citations() -> list[tuple[str, str, str | None]]:
    """``(row, file, name)`` for every citation in the code column of the SPEC map's
    tables: a backquoted path, then the backquoted names defined in it (``None`` when a
    file is cited alone)."""
    out: list[tuple[str, str, str | None]] = []
    for line in (DOCS / "spec-map.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("SPEC", "---"):
            continue
        current: str | None = None
        for token in re.findall(r"`([^`]+)`", cells[2]):
            if "/" in token:
                current = token
                out.append((cells[0], token, None))
            else:
                assert current is not None, f"{cells[0]}: `{token}` cited before any file"
                out.append((cells[0], current, token))
    return out


CITATIONS = spec_map_citations()


def test_spec_map_cites_every_section() -> None:
    rows = {row.split()[0] for row, _, _ in CITATIONS}
    sections = {"2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "3", "4", "5", "6"}
    assert sections <= rows, f"SPEC sections without a row: {sorted(sections - rows)}"


@pytest.mark.parametrize(("row", "file", "name"), CITATIONS)
def test_spec_map_citation_exists(row: str, file: str, name: str | None) -> None:
    path = REPO / file
    assert path.is_file(), f"spec-map.md, row {row!r}: no file {file}"
    if name is not None:
        assert name in defined_names(path), f"spec-map.md, row {row!r}: {file} defines no {name}"


def test_docs_index_lists_every_document() -> None:
    index = (DOCS / "README.md").read_text()
    linked = set(re.findall(r"\]\(([^)#]+\.md)\)", index))
    documents = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert documents - linked == set(), "docs/README.md does not list these"


@pytest.mark.parametrize("doc", MARKDOWN, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path) -> None:
    targets = re.findall(r"\]\(([^)]+)\)", doc.read_text())
    missing = [
        t
        for t in targets
        if "://" not in t and not t.startswith("#") and not (doc.parent / t.split("#")[0]).exists()
    ]
    assert missing == [], f"{doc.relative_to(REPO)} links to missing files"


def test_readme_is_short() -> None:
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines"


# ---------------------------------------------------------------- the phase list


def test_the_pipeline_runs_the_listed_phases_in_their_order() -> None:
    """``formulation.phases.PHASES`` is the one list: the pipeline's table
    (``formulation.solve.STEPS``) has exactly its phases, in its order, and ``_phases``
    opens no phase but through that table (read from the source)."""
    from formulation.phases import PHASES
    from formulation.solve import STEPS

    assert [s.name for s in STEPS] == [p.name for p in PHASES]
    assert [s.name for s in STEPS if s.last] == [p.name for p in PHASES if p.instead]
    tree = parse(REPO / "formulation" / "solve.py")
    opened = [
        node.args[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "phase"
        and node.args
    ]
    # one phase opened, by its step's name
    assert [ast.unparse(a) for a in opened] == ["step.name"]


@pytest.mark.parametrize("document", ["docs/schedule.md", "README.md"])
def test_the_documents_phase_lists_are_written_from_the_table(document: str) -> None:
    from formulation.phases import BEGIN, DOCUMENTS, END

    text = (REPO / document).read_text(encoding="utf-8")
    block = f"{BEGIN}\n{DOCUMENTS[document]()}\n{END}"
    assert block in text, f"{document}: run python -m formulation.phases --write"
