"""The layering the project keeps, read from the source: ``model`` imports neither
``formulation`` nor ``service``; ``formulation`` does not import ``service``; no module
imports another module's private names; and the modules' imports (those inside
functions included) form no cycle."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
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


@pytest.mark.parametrize("name", ["service.cli.app", "service.cli.plan", "service.jobs.queue"])
def test_the_graph_sees_imports(name: str) -> None:
    """The checks above read real edges (a graph with none would pass them all)."""
    assert graph()[name], name


# formulation's folders in pipeline order: a module may import its own folder, the
# flat modules at the top (the problem, its data, pricing, time, infeasibility without a
# solver) and folders before it;
# solve.py runs the pipeline over them all (its state is run.py; diagnosis.py names
# the periods of a problem it found infeasible), whatif/ asks questions of solve and
# fleet/ plans several sites with it.
FORMULATION_ORDER = (
    "processes", "subproblems", "milp", "bounds", "primal", "top", "whatif", "fleet"
)  # fmt: skip
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


#: the modules that load a solver
SOLVER_PACKAGES = ("pyomo", "highspy")


def test_formulations_base_loads_no_solver() -> None:
    """formulation's flat base and its phase list reach no module that imports Pyomo or
    HiGHS, imports inside functions included: what answers requests without solving
    (the API process, its error handlers) names ``InfeasibleError`` and the phases
    without loading a solver; only the pipeline (solve, run, diagnosis) does."""
    g = graph()
    loads = {
        m
        for m, path in MODULES.items()
        if any(t.split(".")[0] in SOLVER_PACKAGES for t, _ in imports(path))
    }
    assert "formulation.milp.compact" in loads  # the check sees a solver's importers

    def reached(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for n in g[todo.pop()] - seen:
                seen.add(n)
                todo.append(n)
        return seen

    light = sorted(f"formulation.{m}" for m in (*FORMULATION_BASE, "phases"))
    bad = {m: sorted(reached(m) & loads) for m in light if reached(m) & loads}
    assert bad == {}, bad
    assert reached("formulation.solve") & loads  # the pipeline does load one


def formulation_folder(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2:
        return parts[1]
    return "base" if parts[1] in FORMULATION_BASE else "top"


def upward_imports(package: str, folder: Callable[[str], str], order: Sequence[str]) -> list[str]:
    """The imports between ``package``'s modules from a folder to one after it in
    ``order`` (each module's folder named by ``folder``)."""
    bad = []
    for mod, targets in graph().items():
        if not mod.startswith(package + ".") or "migrations" in mod:
            continue
        src = order.index(folder(mod))
        for t in targets:
            if t.startswith(package + ".") and order.index(folder(t)) > src:
                bad.append(f"{mod} ({folder(mod)}) imports {t} ({folder(t)})")
    return bad


def test_formulation_folders_follow_the_pipeline() -> None:
    folders = {formulation_folder(m) for m in MODULES if m.startswith("formulation.")}
    assert folders == set(FORMULATION_ORDER) | {"base"}, folders
    bad = upward_imports("formulation", formulation_folder, ("base", *FORMULATION_ORDER))
    assert bad == [], "\n".join(bad)


# model's folders by role, from the bottom: the flat base (errors, JSON documents as
# users send them, the catalog and what it is made of: GPU clocks, instance shapes;
# workloads, latency targets, the Pareto front); the performance sources (SPEC's
# rooflines, kernel tables, the engine, the KV link, speculative decoding); the capacity
# model, flat (the deployment spec, capacity, the admission balance); the simulator,
# which draws requests for a deployment; queueing and latency, whose targets the
# simulator may check; the flat top (the operations the CLI and the service call, the
# scheduler's tables); and measured/, the measurements and what is fitted or checked
# against them with all of the above. A module may import its own folder and the
# folders before it.
MODEL_ORDER = ("base", "performance", "capacity", "simulator", "queueing", "top", "measured")
MODEL_FLAT = {
    "base": {
        "errors", "jsondoc", "catalog", "clocks", "shapes", "workload", "latency_targets",
        "pareto",
    },
    "capacity": {"spec", "capacity", "admission"},
    "top": {"operations", "tables"},
}


def model_folder(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 or MODULES[module].name == "__init__.py":
        return parts[1]
    return next(level for level, names in MODEL_FLAT.items() if parts[1] in names)


def test_model_folders_follow_their_roles() -> None:
    mods = [m for m in MODULES if m.startswith("model.")]
    flat = {m.split(".")[1] for m in mods if MODULES[m].parent.name == "model"}
    assert flat == set().union(*MODEL_FLAT.values())  # every flat module has its level
    assert {model_folder(m) for m in mods} == set(MODEL_ORDER)
    bad = upward_imports("model", model_folder, MODEL_ORDER)
    assert bad == [], "\n".join(bad)


# service's folders by role, from the bottom: what it runs on (settings, pool, database,
# job store, webhooks, metrics) and the charts import nothing else of the service; then
# what a request is and what this server accepts; the registered sites; the fleets of
# them; the use-case
# table and its runs; the jobs that run them; the HTTP routers; the console; the app
# (service.main); the command line, which may start the app. A module may import its
# own folder and the folders before it.
SERVICE_ORDER = (
    "runtime",
    "charts",
    "requests",
    "sites",
    "fleets",
    "usecases",
    "jobs",
    "routers",
    "console",
    "main",
    "cli",
)
#: no module of service/ is longer (lines)
SERVICE_MAX_LINES = 400


def service_folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "main"


def test_service_folders_follow_their_roles() -> None:
    mods = [m for m in MODULES if m.startswith("service") and "migrations" not in m]
    assert {service_folder(m) for m in mods} == set(SERVICE_ORDER)
    loose = [m for m in mods if MODULES[m].parent.name == "service" and m != "service"]
    assert loose == ["service.main"]  # every other module is in the folder of its role
    bad = upward_imports("service", service_folder, SERVICE_ORDER)
    assert bad == [], "\n".join(bad)


def test_service_modules_stay_short() -> None:
    long = {
        m: n
        for m, path in MODULES.items()
        if m.startswith("service.")
        and (n := len(path.read_text().splitlines())) > SERVICE_MAX_LINES
    }
    assert long == {}, f"over {SERVICE_MAX_LINES} lines: {long}"
