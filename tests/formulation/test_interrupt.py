"""HiGHS runs in a process of its own (formulation.milp.highs.HighsProcess): a stop request,
or a MILP running past its time limit and grace, ends the process, and the MILP
answers with the best schedule HiGHS had sent; the next MILP gets a new process."""

from __future__ import annotations

import time

import pytest
from pyomo.contrib.appsi.solvers.highs import Highs

import formulation.milp.compact as milp
from formulation.budget import HIGHS_GRACE_S, HIGHS_GRACE_SHARE, Deadline
from formulation.data import build_data
from formulation.demo import demo_request
from formulation.evaluate import price_schedule
from formulation.milp.highs import PROCESS, HighsProcess, lp_arrays, stdout_to_stderr
from formulation.primal.baselines import greedy_ramped
from formulation.problem import problem_from_dict
from formulation.processes.interrupt import interruptible
from tests.service.conftest import small_schedule


def larger() -> dict[str, object]:
    """The demo site: its compact MILP (about 75,000 binaries) takes HiGHS far longer
    than a second to prove optimal."""
    return demo_request()


@pytest.mark.slow  # 34.4 s on two cores
def test_a_stopped_milp_keeps_the_incumbent_highs_sent() -> None:
    data = build_data(problem_from_dict(larger()))
    start = greedy_ramped(data)
    assert start.violation_free

    def stop() -> bool:  # asked every poll: stop once HiGHS has sent a schedule
        return PROCESS.incumbents > 0

    restarts = PROCESS.restarts
    # the stop comes with HiGHS's first schedule; the limit only bounds a slow machine's
    # wait for it (30 s ran out once, under load, before HiGHS had sent one)
    with interruptible(stop):
        r = milp.solve_compact(data, Deadline.after(120.0), 0.0, start=start.schedule)
    if r.termination == "optimal":
        pytest.skip("HiGHS solved this MILP before the stop")
    assert r.termination == "stopped" and PROCESS.restarts == restarts + 1
    assert r.status == "time_limit" and r.schedule is not None
    p = price_schedule(data, r.schedule)
    assert p.violation_free
    assert p.objective_usd <= start.objective_usd + 1e-6
    assert r.objective_usd == pytest.approx(p.objective_usd, rel=1e-9)
    if r.bound_usd is not None:
        assert r.bound_usd <= p.objective_usd + 1e-6
    # the next MILP runs on a new process
    small = build_data(problem_from_dict(small_schedule(mip_gap=0.0)))
    again = milp.solve_compact(small, Deadline.after(30.0), 0.0)
    assert again.schedule is not None and again.termination == "optimal"


@pytest.mark.slow  # 15.8 s on two cores
def test_a_milp_past_its_deadline_is_ended_with_its_process() -> None:
    """HiGHS told to run 60 s, the parent allowing 0.3 s: the process is ended at the
    deadline plus the grace, whatever HiGHS is doing."""
    data = build_data(problem_from_dict(larger()))
    m = milp.build_model(data)
    opt = Highs()
    with stdout_to_stderr():
        opt.set_instance(m)
    payload = lp_arrays(opt._solver_model)
    payload["options"] = {"time_limit": 60.0, "mip_rel_gap": 0.0}
    proc = HighsProcess()
    t0 = time.perf_counter()
    out = proc.solve(payload, Deadline.after(0.3))
    spent = time.perf_counter() - t0
    if out.status == "optimal":
        pytest.skip("HiGHS proved this MILP optimal within the grace")
    assert out.status == "killed" and proc.restarts == 1
    assert spent < 0.3 * (1 + HIGHS_GRACE_SHARE) + HIGHS_GRACE_S + 2.0
    # the next MILP runs on a new process
    small = milp.build_model(build_data(problem_from_dict(small_schedule(mip_gap=0.0))))
    opt = Highs()
    with stdout_to_stderr():
        opt.set_instance(small)
    payload = lp_arrays(opt._solver_model) | {"options": {"mip_rel_gap": 0.0}}
    again = proc.solve(payload, Deadline.after(60.0))
    assert again.status == "optimal" and again.best is not None
    proc.kill()


def test_a_failing_stop_check_ends_the_milp() -> None:
    data = build_data(problem_from_dict(small_schedule(mip_gap=0.0)))
    start = greedy_ramped(data)

    def broken() -> bool:
        raise RuntimeError("database is locked")

    with interruptible(broken):
        r = milp.solve_compact(data, Deadline.after(30.0), 0.0, start=start.schedule)
    assert r.termination in ("stopped", "optimal")
