"""Demand-response what-if and flexibility curve as plain functions of JSON data, run
in the solver's worker processes; each returns exactly what ``pdwatt dr --json`` /
``pdwatt flex --json`` prints. Errors of the nested schedule request name their field
under ``request.``."""

from __future__ import annotations

from typing import Any

from formulation.dr import request_errors

REQUEST = "request."


def demand_response(payload: dict[str, Any]) -> dict[str, Any]:
    from formulation.dr import demand_response as run
    from service.work import _check_schedule_workloads

    with request_errors(REQUEST):
        _check_schedule_workloads(payload["request"])
    return run(payload["request"], payload["event"], request_field=REQUEST)


def flexibility(payload: dict[str, Any]) -> dict[str, Any]:
    from formulation.flex import flexibility_curve
    from service.work import _check_schedule_workloads

    with request_errors(REQUEST):
        _check_schedule_workloads(payload["request"])
    return flexibility_curve(
        payload["request"], payload.get("period"), payload.get("points", 25), request_field=REQUEST
    )
