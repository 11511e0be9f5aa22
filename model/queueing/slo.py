"""A capacity-power front under latency targets: each configuration's capacity is the
highest rate at which its p99 TTFT and TPOT targets hold (:mod:`model.queueing.targets`: decode at
the largest batch within the TPOT target, prefill up to the utilisation within the TTFT
target), and the front keeps the configurations that meet the targets at a fraction of
that capacity: the one function behind ``pdwatt front --ttft-p99/--tpot-p99`` and
``POST /v1/front``'s ``slo``. A configuration is dropped only when no batch or
utilisation meets its targets (capacity 0, its ``unmet`` says why) or when the check
below fails.

Two methods (docs/latency.md): ``analytic``, the queue model's p99s
(:func:`model.queueing.latency.analytic_slo_front`), where admission waits for KV pool memory
make its TTFT optimistic a simulation decides (when ``simulate_bound`` and the
simulator describes the model); ``simulate``, every check simulated
(:func:`model.simulator.slo_front`). The checks of a round go through ``map_checks``
(a process pool's ``map`` on the command line). A front over GPU settings
(docs/clocks.md, section 9) is checked configuration by configuration at each one's
own settings: its pair's coefficients, its pair's simulated timing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from model.capacity import Coefficients
from model.errors import InputError
from model.pareto import CheckMap, SettingPair, check_slo_targets, setting_pair
from model.queueing.latency import analytic_slo_front
from model.queueing.targets import LatencyTargets, evaluate_targets
from model.simulator import (
    Samples,
    SimTiming,
    not_simulated,
    simulated_slo_check,
    slo_front,
)
from model.spec import DeploymentSpec, setting_arg, with_settings

METHODS = ("analytic", "simulate")

T = TypeVar("T")


@dataclass(frozen=True)
class SloTargets:
    """What a front is restricted to, and how each configuration is checked."""

    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None
    #: the load of a check, as a fraction of the configuration's capacity
    at_load: float = 0.8
    #: ``analytic`` or ``simulate`` (:data:`METHODS`)
    method: str = "analytic"
    #: ``analytic``: simulate the configurations where admission waits matter
    simulate_bound: bool = True
    #: a simulated check's seeds and requests measured per seed
    seeds: int = 2
    requests: int = 4000

    def check(self) -> None:
        """InputError naming the option at fault (the targets themselves are checked
        with the front, :func:`model.pareto.check_slo_targets`)."""
        if self.method not in METHODS:
            raise InputError("slo_method", f"must be one of {', '.join(METHODS)}")
        if self.seeds < 1:
            raise InputError("slo_seeds", "must be >= 1")
        if self.requests < 1:
            raise InputError("slo_requests", "must be >= 1")

    @property
    def given(self) -> bool:
        """Whether any target is set (without one, a front is left as it is)."""
        return self.ttft_p99_s is not None or self.tpot_p99_s is not None


def setting_specs(
    report: Mapping[str, Any], spec: DeploymentSpec
) -> dict[SettingPair, DeploymentSpec]:
    """The deployment at each setting pair the configurations of ``report`` (a front
    report of ``spec``) name, as :func:`model.operations.front_report` evaluated them;
    empty for a front without settings."""
    pairs = {p for c in report["configs"] if (p := setting_pair(c)) is not None}
    return {
        pair: with_settings(spec, setting_arg(pair[0], spec), setting_arg(pair[1], spec))
        for pair in sorted(pairs)
    }


def _per_setting(
    specs: Mapping[SettingPair, DeploymentSpec],
    spec: DeploymentSpec,
    of: Callable[[DeploymentSpec], T],
) -> T | dict[SettingPair, T]:
    """``of(spec)``, or, for a front over settings, ``of`` at each of its pairs."""
    return {pair: of(at) for pair, at in specs.items()} if specs else of(spec)


#: how a front's capacities are taken under targets (the report's ``slo.capacity``)
CAPACITY_RULE = (
    "each configuration's capacity is the highest rate at which its targets hold: decode "
    "at the largest batch whose iteration is within the TPOT target, prefill up to the "
    "utilisation whose p99 TTFT is within the TTFT target (docs/admission.md, section 8); "
    "one that meets them at no batch or utilisation has capacity 0 and says why (unmet)"
)


def under_targets(
    report: dict[str, Any], spec: DeploymentSpec, samples: Samples, targets: SloTargets
) -> dict[str, Any]:
    """``report`` (a front report of ``spec``) with each configuration's capacity, power,
    batch and limits under ``targets`` (:func:`model.queueing.targets.evaluate_targets`), each at
    its own settings in a front over settings; the front and selections are left for
    :func:`model.pareto.restrict_front` to redo."""
    goals = LatencyTargets(targets.ttft_p99_s, targets.tpot_p99_s)
    specs = setting_specs(report, spec)
    configs = [dict(c) for c in report["configs"]]
    groups: dict[SettingPair | None, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(setting_pair(c), []).append(i)
    for pair, idx in groups.items():
        at = spec if pair is None else specs[pair]
        n_p = [configs[i]["n_p"] for i in idx]
        n_d = [configs[i]["n_d"] for i in idx]
        r = evaluate_targets(at, n_p, n_d, goals, l_in=samples.l_in)
        for j, i in enumerate(idx):
            configs[i] |= r.record(j)
    out = dict(report)
    out["configs"] = configs
    return out


def slo_restricted_front(
    report: dict[str, Any],
    spec: DeploymentSpec,
    samples: Samples,
    targets: SloTargets,
    map_checks: CheckMap = map,
) -> dict[str, Any]:
    """``report`` (a front report of ``spec``) restricted to the configurations that
    meet ``targets`` on the per-request lengths ``samples``, with ``slo`` added; the
    report itself when no target is given. A front over GPU settings checks each
    configuration at its own settings (:func:`setting_specs`). InputError names the
    option at fault."""
    if not targets.given:
        return report
    targets.check()
    check_slo_targets(targets.ttft_p99_s, targets.tpot_p99_s, targets.at_load)
    report = under_targets(report, spec, samples, targets)
    out = _checked(report, spec, samples, targets, map_checks)
    configs = out["configs"]
    out["slo"] |= {
        "capacity": CAPACITY_RULE,
        "batch_capped": sum(1 for c in configs if c.get("batch_capped_by") == "tpot_p99"),
        "unmet": sum(1 for c in configs if c.get("unmet") is not None),
    }
    return out


def _checked(
    report: dict[str, Any],
    spec: DeploymentSpec,
    samples: Samples,
    targets: SloTargets,
    map_checks: CheckMap,
) -> dict[str, Any]:
    """:func:`slo_restricted_front`'s checks of ``report`` (capacities under targets)."""
    pair = (targets.ttft_p99_s, targets.tpot_p99_s)
    specs = setting_specs(report, spec)

    def simulation() -> dict[str, Any]:  # how a configuration is simulated
        return {
            "timing": _per_setting(specs, spec, SimTiming.of),
            "samples": samples,
            "at_load": targets.at_load,
            "seeds": targets.seeds,
            "requests": targets.requests,
            "dispatch": spec.serving.dispatch,
        }

    if targets.method == "analytic":
        simulated: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        # a model the simulator does not describe (sliding-window attention): the
        # analytic figures decide every configuration (the report's rule says so)
        if targets.simulate_bound and not_simulated(spec.model) is None:
            simulated = partial(simulated_slo_check, targets=pair, **simulation())
        return analytic_slo_front(
            report,
            _per_setting(specs, spec, Coefficients.of),
            samples.l_in,
            samples.l_out,
            ttft_p99_s=targets.ttft_p99_s,
            tpot_p99_s=targets.tpot_p99_s,
            at_load=targets.at_load,
            fallback=simulated,
            map_checks=map_checks,
        )
    return slo_front(
        report,
        ttft_p99_s=targets.ttft_p99_s,
        tpot_p99_s=targets.tpot_p99_s,
        map_checks=map_checks,
        **simulation(),
    )
