"""The calls the service makes, as plain functions of JSON data.

Run in worker processes for schedules (CPU-bound, seconds) and in threads for the
core (milliseconds). Each returns exactly what ``pdwatt ... --json`` prints.
"""

from __future__ import annotations

from typing import Any

from model.capacity import DEFAULT_PERFORMANCE, DEFAULT_VARIANT, settings_record, with_settings
from model.operations import SpecRequest, capacity_report, front_report, resolve_spec


def _spec(body: dict[str, Any], kernels: str | None) -> tuple[Any, bool]:
    """``kernels``: the server's kernel database (its setting, never the request's)."""
    req = SpecRequest(
        model=body.get("model", "qwen3-32b"),
        gpu=body.get("gpu", "h200"),
        workload=body.get("workload", "azure-conv-2023"),
        overrides=body.get("overrides") or {},
        moments=body.get("moments"),
        model_variant=body.get("model_variant", DEFAULT_VARIANT),
        performance=body.get("performance", DEFAULT_PERFORMANCE),
        framework=body.get("framework"),
        kernels=kernels,
    )  # read_files stays False: no request reads a server file
    return resolve_spec(req), bool(body.get("overrides"))


def capacity(body: dict[str, Any], kernels: str | None = None) -> dict[str, Any]:
    spec, ov = _spec(body, kernels)
    spec = with_settings(spec, body.get("prefill_setting"), body.get("decode_setting"))
    rep = capacity_report(spec, body["n_p"], body["n_d"], body.get("load_rps"), overridden=ov)
    rep.update(settings_record(spec))
    return rep


def front(body: dict[str, Any], kernels: str | None = None) -> dict[str, Any]:
    spec, ov = _spec(body, kernels)
    return front_report(
        spec,
        body.get("max_gpus", 16),
        body.get("required_rps"),
        body.get("headroom", 1.0),
        body.get("budget_w"),
        overridden=ov,
    )


def schedule(
    body: dict[str, Any],
    memory_budget_mb: float | None = None,
    monitor: Any = None,
    kernels: str | None = None,
) -> dict[str, Any]:
    """``monitor`` (optional): see :data:`formulation.solve.Monitor` (jobs' progress and
    cancellation); ``kernels``: the server's kernel database."""
    from formulation.problem import Host, problem_from_dict
    from formulation.results import response
    from formulation.solve import solve

    # no workload file is read
    host = Host(memory_budget_mb=memory_budget_mb, kernels=kernels)
    return response(solve(problem_from_dict(body, host), monitor=monitor))
