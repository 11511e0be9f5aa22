"""Prometheus metrics: requests, latencies, solve times and solver outcomes.

Every label value of a request's metrics comes from a fixed set, never from what the
client wrote: the route is the matched route's template (``/v1/sites/{site_id}``, or
``unmatched``), the method one of :data:`HTTP_METHODS` or ``other``; each new label
value is a series kept for the life of the process."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: the request methods of HTTP (RFC 9110 section 9 and PATCH, RFC 5789)
HTTP_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)
#: the method label of every other method
OTHER_METHOD = "other"


def method_label(method: str) -> str:
    """The ``method`` label of a request's metrics: its method when HTTP defines it,
    else :data:`OTHER_METHOD`."""
    return method if method in HTTP_METHODS else OTHER_METHOD


registry = CollectorRegistry()
requests_total = Counter(
    "pdwatt_requests_total", "HTTP requests", ["route", "method", "status"], registry=registry
)
request_seconds = Histogram(
    "pdwatt_request_seconds",
    "HTTP request latency",
    ["route"],
    buckets=(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
    registry=registry,
)
solve_seconds = Histogram(
    "pdwatt_solve_seconds",
    "schedule solve time",
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
    registry=registry,
)
solver_outcomes_total = Counter(
    "pdwatt_solver_outcomes_total", "schedule outcomes", ["status"], registry=registry
)
busy_workers = Gauge("pdwatt_busy_workers", "solver workers in use", registry=registry)
