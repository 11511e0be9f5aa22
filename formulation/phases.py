"""The phases of a schedule solve, in the order they run: the one list of them.

:func:`formulation.solve.solve` runs them (each named in the response's
``solver.phases`` with its time; a name not listed here is refused), and the phase
lists of ``docs/schedule.md`` and the README are written from this table by
``python -m formulation.phases --write`` (``tests/test_docs.py`` checks that they are).
Measured times behind the choices named here are in ``docs/performance.md``.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Phase:
    #: as in the response's ``solver.phases``
    name: str
    #: what it does and when it runs (Markdown, one paragraph)
    does: str
    #: the few words the README gives it (empty: named without them)
    brief: str = ""
    #: runs in place of others (``solver.method: compact``), not in the sequence
    instead: bool = False


PHASES: tuple[Phase, ...] = (
    Phase(
        "tables",
        "the candidate tables, the memory budget and the checks that need no solve (a cap "
        "below the least the site can draw is reported with its periods).",
    ),
    Phase(
        "baselines",
        "`static_peak` and `greedy` (SPEC; both may break transition limits) and "
        "`greedy_ramped` (the per-period greedy within the limits); the best "
        "violation-free one is the first incumbent. `greedy` is each period's exact "
        "optimum, found by a Lagrangian-bounded enumeration "
        "(`formulation.subproblems.period.solve_period`; `solver.greedy` says how many "
        "periods are proven within its time share). A baseline that breaks a constraint "
        "(the cap, the inventory, a transition limit) may cost less than the schedule: "
        'the response marks it `"feasible": false`, and `pdwatt plan` and the console '
        "mark it infeasible and give no saving beside it.",
        brief="`static_peak`, `greedy`, `greedy_ramped`",
    ),
    Phase(
        "compact",
        "with `solver.method: compact`, in place of every phase after `baselines`: the "
        "compact MILP over every candidate in one HiGHS run (exact, for small instances "
        "and as the reference).",
        brief="with `solver.method: compact`, in place of the phases after `baselines`",
        instead=True,
    ),
    Phase(
        "one_period_bound",
        "when the greedy baseline found every over-cap period's exact optimum within "
        "`TimeBudget.GUIDED_ROUND` of the limit, it adds those optima up between each "
        "deployment's exact DP before and after the periods where the site binds "
        "(`formulation.primal.window.guided_start`): a bound taken before `relaxation`, "
        "which stops once its master LP falls to it, and which can be far stronger than "
        "the relaxation's.",
        brief="when the periods' exact optima are cheap",
    ),
    Phase(
        "relaxation",
        "Lagrangian relaxation of the site cap and GPU inventories, each deployment's DP "
        "(restricted to what the site allows it whatever the others do) as the "
        "subproblem (`formulation.bounds.lagrange`); multipliers by column generation "
        "with dual smoothing (`solver.method: auto`) or the volume algorithm (`volume`). "
        "Column generation starts, where the greedy baseline solved over-cap periods, "
        "from those periods' own cap prices (their one-period problems' multipliers): "
        "a bound before its first round and the smoothing's stability centre. "
        "Whenever `STALL_ROUNDS` (4) rounds in a row leave the bound where it was, the "
        "volume algorithm goes on from the best multipliers towards the incumbent's "
        "cost, its points handed back to column generation as columns and stability "
        "centre (`formulation.bounds.decomposition.ascend`). "
        "Its best bound is the proven lower bound: never below the sum of the "
        "deployments' uncapped optima, and with one deployment the exact optimum.",
        brief="Lagrangian relaxation of the site cap and GPU inventories, each "
        "deployment's exact DP as the subproblem: the proven bound",
    ),
    Phase(
        "lp_support",
        "after column generation: the compact MILP over the configurations that the "
        "final master LP's columns use (and the incumbent's), every period "
        "(price-and-branch on the LP's support), a small MILP whose optimum is usually "
        "close to the best schedule; then the master as an integer program, one whole "
        "column per deployment within the site's constraints (a binary per column, "
        "small at any size: on 256 deployments, where the support's MILP had no time, "
        "it found the best schedules); schedules only.",
    ),
    Phase(
        "repair",
        "the Lagrangian solutions at the best multipliers made feasible by exact "
        "per-deployment re-optimisation within the transition limits "
        "(`formulation.primal.heuristics`); skipped when the window is guided by the "
        "one-period optima, which repairs its own starts.",
    ),
    Phase(
        "exact_window",
        "the MILP (Pyomo + HiGHS) over the periods where the site constraints bind, the "
        "others solved exactly by DP, over the choices Lagrangian pruning keeps "
        "(`formulation.primal.window`), when the model it would build fits in the time "
        "left; it can raise the bound. When the one-period optima were cheap and "
        "`relaxation` leaves a gap above `TimeBudget.GUIDED_GAP` (0.5%), the window is "
        "guided by them instead: its Lagrangian decomposition (exact one-period optima, "
        "cap included, against each deployment's path) is often far stronger than the "
        "relaxation's bound, and it reports every better bound and schedule as found.",
        brief="the MILP over the periods where the cap binds",
    ),
    Phase(
        "neighbourhoods",
        "with the time left, MILPs restricted to corridors of configurations around the "
        "incumbent and the Lagrangian paths (local branching), the radius growing while "
        "a corridor is solved without improvement; schedules only. When column "
        "generation stopped short of convergence they end "
        "`TimeBudget.RESUMED_RELAXATION` (15%) of the limit before its end, or sooner "
        "when no further MILP fits in the time left.",
        brief="MILPs around the incumbent with the time left",
    ),
    Phase(
        "relaxation_resumed",
        "when the phases before end ahead of the limit with column generation short of "
        "convergence and the gap open, column generation goes on from the columns, "
        "master LP and best multipliers `relaxation` stopped with, in whole rounds (a "
        "round starts only when its longest one fits in the time left) until the limit, "
        "handing over to the volume algorithm when its rounds stall, as in "
        "`relaxation`; the bound it reports is the best Lagrangian value seen, so it "
        "never falls.",
        brief="column generation resumed when the time allows",
    ),
    Phase(
        "lp_support_resumed",
        "when `relaxation_resumed` ends before the limit (converged, or no further round "
        "to gain) with the gap open: the MILP over its master LP's support, as "
        "`lp_support`, with the columns the resumed rounds added.",
        brief="the support's MILP after it",
    ),
    Phase(
        "neighbourhoods_resumed",
        "after `lp_support_resumed`, with the gap still open: the corridor MILPs from "
        "where `neighbourhoods` stopped (its radius and time windows), until the limit.",
        brief="then the corridors again, until the limit",
    ),
)

PHASE_NAMES: frozenset[str] = frozenset(p.name for p in PHASES)


# ------------------------------------------------------------------ the documents

#: the documents' generated blocks lie between these lines
BEGIN = (
    "<!-- phases: written by `python -m formulation.phases --write`; edit formulation/phases.py -->"
)
END = "<!-- end of phases -->"


def schedule_doc_block() -> str:
    """The phase list of ``docs/schedule.md``: one item per phase."""
    return "\n".join(_wrap(f"* `{p.name}`: {p.does}", "  ") for p in PHASES)


def readme_block() -> str:
    """The README's sentence naming the phases in order."""
    parts = [f"`{p.name}`" + (f" ({p.brief})" if p.brief else "") for p in PHASES]
    return _wrap("Its phases, in order: " + "; ".join(parts) + ".", "")


def _wrap(text: str, indent: str, width: int = 88) -> str:
    """``text`` in lines of at most ``width`` characters, later lines indented."""
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = indent + word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "\n".join(lines)


#: the documents with a generated block, and each one's block
DOCUMENTS = {"docs/schedule.md": schedule_doc_block, "README.md": readme_block}


def with_block(text: str, block: str) -> str:
    """``text`` with its generated block replaced by ``block`` (ValueError without one)."""
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?\n" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise ValueError("no generated phase block")
    return pattern.sub(lambda _m: f"{BEGIN}\n{block}\n{END}", text, count=1)


def main(argv: list[str]) -> int:
    """``--write``: rewrite the documents' blocks; otherwise report those out of date
    (status 1)."""
    root = Path(__file__).resolve().parents[1]
    stale = []
    for rel, block in DOCUMENTS.items():
        path = root / rel
        text = path.read_text(encoding="utf-8")
        new = with_block(text, block())
        if new != text:
            stale.append(rel)
            if "--write" in argv:
                path.write_text(new, encoding="utf-8")
    verb = "rewritten" if "--write" in argv else "out of date"
    for rel in stale:
        print(f"{rel}: phase list {verb}")
    return 1 if stale and "--write" not in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
