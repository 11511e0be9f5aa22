"""The front's SLO filter: its rounds of checks, run one after the other or side by side in
processes (``model.pareto.restrict_front``, ``pdwatt front --slo-jobs``)."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from model.errors import InputError
from model.operations import SpecRequest, front_report, resolve_spec
from model.pareto import front_indices, restrict_front
from service.cli import simulate as cli_simulate
from service.cli.app import build_parser


def _report(max_gpus: int = 8) -> dict[str, Any]:
    return front_report(resolve_spec(SpecRequest(workload="fixed:1024:256")), max_gpus, 5.0)


def _first_front(report: dict[str, Any]) -> set[tuple[int, int]]:
    configs = report["configs"]
    mu = np.array([c["capacity_rps"] for c in configs])
    power = np.array([c["power_w"] for c in configs])
    live = np.flatnonzero(mu > 0)
    front = live[front_indices(mu[live], power[live])]
    return {(configs[i]["n_p"], configs[i]["n_d"]) for i in front}


def test_rounds_check_the_current_front_once_each_whatever_the_order() -> None:
    report = _report()
    first = _first_front(report)
    rounds: list[list[tuple[int, int]]] = []

    def _check(cfg: dict[str, Any]) -> dict[str, Any]:
        # fails the whole first front and every third configuration, so that later
        # rounds bring dominated configurations forward
        key = (cfg["n_p"], cfg["n_d"])
        return {"meets": key not in first and (cfg["n_p"] + 2 * cfg["n_d"]) % 3 != 0}

    def backwards(
        check: Callable[[dict[str, Any]], dict[str, Any]], configs: list[dict[str, Any]]
    ) -> Iterator[dict[str, Any]]:
        rounds.append([(c["n_p"], c["n_d"]) for c in configs])
        verdicts = [check(c) for c in reversed(configs)]  # evaluated in another order
        return iter(verdicts[::-1])

    plain, n_plain = restrict_front(report, _check)
    mapped, n_mapped = restrict_front(report, _check, backwards)
    assert mapped == plain and n_mapped == n_plain
    assert len(rounds) >= 2  # the verdict above fails front configurations
    flat = [cfg for r in rounds for cfg in r]
    assert len(flat) == len(set(flat)) == n_plain
    # the first round is the front of every configuration with capacity
    configs = report["configs"]
    mu = np.array([c["capacity_rps"] for c in configs])
    power = np.array([c["power_w"] for c in configs])
    live = np.flatnonzero(mu > 0)
    first = {
        (configs[i]["n_p"], configs[i]["n_d"]) for i in live[front_indices(mu[live], power[live])]
    }
    assert set(rounds[0]) == first
    # every configuration left on the new front meets the check
    assert mapped["front"] and all(_check(c)["meets"] for c in mapped["front"])


def _front_args(extra: str) -> argparse.Namespace:
    """``pdwatt front``'s own options (the command line's parser)."""
    base = "front --model qwen3-32b --gpu h200 --workload fixed:1024:256 --slo-requests 300 "
    return build_parser().parse_args(shlex.split(base + extra))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["simulate", "analytic"])
def test_processes_give_the_same_verdicts(method: str, capsys: pytest.CaptureFixture[str]) -> None:
    report = _report(6)
    targets = f"--slo-method {method} --ttft-p99 0.2 --tpot-p99 0.05 "
    one = cli_simulate.apply_slo(report, _front_args(targets + "--slo-jobs 1 --json"))
    assert capsys.readouterr().err == ""  # --json: no progress lines
    two = cli_simulate.apply_slo(report, _front_args(targets + "--slo-jobs 2"))
    assert two == one
    # the targets bite: capacities under them are below those without
    assert one["slo"]["meeting"] > 0
    pairs = zip(one["configs"], report["configs"], strict=True)
    assert any(c["capacity_rps"] < p["capacity_rps"] for c, p in pairs)
    # the verdicts' lines (Progress also repeats the latest one while a check runs long)
    lines = [
        ln
        for ln in capsys.readouterr().err.splitlines()
        if ln.startswith("[") and "SLO check" in ln
    ]
    checked = sum(1 for c in one["configs"] if c["slo"]["checked"])
    assert len(lines) == checked  # one progress line per verdict
    how = "simulated" if method == "simulate" else "analytic"
    assert all(how in ln for ln in lines)


def test_slo_jobs_must_be_positive() -> None:
    with pytest.raises(InputError) as e:
        cli_simulate.apply_slo(_report(4), _front_args("--tpot-p99 0.05 --slo-jobs 0"))
    assert e.value.field == "slo_jobs"
