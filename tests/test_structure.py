"""The layering the project keeps, read from the source: ``model`` imports neither
``formulation`` nor ``service``; ``formulation`` does not import ``service``; no module
imports another module's private names; and the modules' imports (those inside
functions included) form no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.source import parse

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("model", "formulation", "service")


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            if "migrations" in path.parts:  # run by Alembic, not imported
                continue
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = modules()


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import in ``path`` (names: those of ``from`` forms)."""
    out = []
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [a.name for a in node.names]))
    return out


def project_target(module: str, names: list[str]) -> list[str]:
    """The project modules an import statement loads (``from pkg import mod`` loads
    ``pkg.mod``)."""
    found = []
    if module in MODULES:
        found.append(module)
    for n in names:
        if f"{module}.{n}" in MODULES:
            found.append(f"{module}.{n}")
    return found


def graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {m: set() for m in MODULES}
    for mod, path in MODULES.items():
        for target, names in imports(path):
            for t in project_target(target, names):
                if t != mod and not mod.startswith(t + "."):  # a package's own parent
                    g[mod].add(t)
    return g


def test_the_layers_import_downwards_only() -> None:
    allowed = {"model": ("model",), "formulation": ("model", "formulation")}
    bad = []
    for mod, path in MODULES.items():
        layer = mod.split(".")[0]
        if layer not in allowed:
            continue
        for target, _ in imports(path):
            top = target.split(".")[0]
            if top in PACKAGES and top not in allowed[layer]:
                bad.append(f"{mod} imports {target}")
    assert bad == []


def test_no_module_imports_another_modules_private_names() -> None:
    bad = []
    for mod, path in MODULES.items():
        for target, names in imports(path):
            if target.split(".")[0] in PACKAGES and target != mod:
                bad += [f"{mod}: from {target} import {n}" for n in names if n.startswith("_")]
    assert bad == []


def test_no_import_cycle() -> None:
    g = graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(g[m]):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n) :] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("name", ["service.cli.app", "service.cli.plan", "service.queue"])
def test_the_graph_sees_imports(name: str) -> None:
    """The checks above read real edges (a graph with none would pass them all)."""
    assert graph()[name], name


# formulation's folders in pipeline order: a module may import its own folder, the
# flat modules at the top (the problem, its data, pricing, time, infeasibility without a
# solver) and folders before it;
# solve.py runs the pipeline over them all and whatif/ asks questions of solve.
FORMULATION_ORDER = ("processes", "subproblems", "milp", "bounds", "primal", "top", "whatif")
FORMULATION_BASE = {
    "budget",
    "data",
    "evaluate",
    "infeasible",
    "memory",
    "problem",
    "request",
    "demo",
}


def formulation_folder(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2:
        return parts[1]
    return "base" if parts[1] in FORMULATION_BASE else "top"


def test_formulation_folders_follow_the_pipeline() -> None:
    folders = {formulation_folder(m) for m in MODULES if m.startswith("formulation.")}
    assert folders == set(FORMULATION_ORDER) | {"base"}, folders
    bad = []
    for mod, targets in graph().items():
        if not mod.startswith("formulation."):
            continue
        src = formulation_folder(mod)
        for t in targets:
            if not t.startswith("formulation."):
                continue
            dst = formulation_folder(t)
            if dst == src or dst == "base":
                continue
            if src == "base" or FORMULATION_ORDER.index(dst) > FORMULATION_ORDER.index(src):
                bad.append(f"{mod} ({src}) imports {t} ({dst})")
    assert bad == [], "\n".join(bad)
