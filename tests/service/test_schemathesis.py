"""schemathesis against a real server: cases generated from the OpenAPI document, sent
over HTTP to ``pdwatt serve``; no 5xx, and every response matches its documented status,
media type, headers and schema.

The schema is loaded from the application at collection time (schemathesis builds one
test per operation then) and the first test checks that the live server serves the very
same document. The server runs with tiny limits (8 periods, 64 GPUs, 2 s per solve) so
that a generated schedule, or the documented 96-period demo example, is either refused
at once or solved quickly. CI-sized budget: ``MAX_EXAMPLES`` per operation, derandomized.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.main import create_app
from service.runtime.settings import Settings

pytestmark = pytest.mark.servers

MAX_EXAMPLES = 25
LIMITS: dict[str, Any] = {
    "workers": 2,
    "max_periods": 8,
    "max_site_gpus": 64,
    "max_time_limit_s": 2,
}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]

OPENAPI = create_app(Settings(**LIMITS)).openapi()
schema = schemathesis.openapi.from_dict(OPENAPI)
CASES: Counter[str] = Counter()  # per operation
STATUSES: Counter[tuple[str, int]] = Counter()  # per operation and response status


@schema.hook
def map_body(context: schemathesis.HookContext, body: Any) -> Any:
    """Generated schedules almost never name a known model or fit the server's limits, so
    they never reach the solver: give the generated ones known names, at most 4 periods,
    4 GPUs per deployment and 2 s of solver time, so that some of them are solved."""
    op = context.operation
    if op is None or op.path != "/v1/schedule" or not isinstance(body, dict):
        return body
    deployments = body.get("deployments")
    if not isinstance(deployments, list) or not all(isinstance(d, dict) for d in deployments):
        return body
    first = deployments[0].get("demand_rps") if deployments else None
    n = min(len(first), 4) if isinstance(first, list) and first else 1
    for d in deployments:
        if isinstance(d.get("demand_rps"), list) and d["demand_rps"]:
            d["demand_rps"] = (d["demand_rps"] * n)[:n]
        d |= {"model": "qwen3-8b", "gpu": "h200", "workload": "fixed:1024:128"}
        d["max_gpus"] = min(d["max_gpus"], 4) if isinstance(d.get("max_gpus"), int) else 4
        for key in ("initial", "bounds", "overrides"):
            d.pop(key, None)
    if isinstance(body.get("site"), dict):
        body["site"]["gpu_inventory"] = {"h200": 16}
    if isinstance(body.get("grid"), dict):
        for k, v in body["grid"].items():
            if isinstance(v, list) and v:
                body["grid"][k] = (v * n)[:n]
    limit = LIMITS["max_time_limit_s"]
    solver = body.setdefault("solver", {"time_limit_s": limit})
    if isinstance(solver, dict):
        t = solver.get("time_limit_s", limit)
        solver["time_limit_s"] = min(t, limit) if isinstance(t, int | float) else t
    return body


@pytest.fixture(scope="module")
def base_url(
    module_live_server: Callable[..., str], request: pytest.FixtureRequest
) -> Iterator[str]:
    yield module_live_server(**LIMITS)
    total = sum(CASES.values())
    documented = {f"{m.upper()} {p}" for p, ops in OPENAPI["paths"].items() for m in ops}
    lines = [f"schemathesis: {total} cases"]
    for op in sorted(documented):
        by_status = ", ".join(f"{st}: {v}" for (o, st), v in sorted(STATUSES.items()) if o == op)
        lines.append(f"  {op}: {CASES[op]} ({by_status})")
    lines.append(f"  other methods: {total - sum(CASES[op] for op in documented)}")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and total:
        reporter.write_line("\n" + "\n".join(lines))


def test_live_openapi_is_the_tested_one(base_url: str) -> None:
    live = httpx.get(f"{base_url}/openapi.json", timeout=10).json()
    assert live == OPENAPI


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_api(case: schemathesis.Case, base_url: str) -> None:
    op = f"{case.method.upper()} {case.path}"
    CASES[op] += 1
    response = case.call_and_validate(base_url=base_url, checks=CHECKS, timeout=60)
    STATUSES[op, response.status_code] += 1
