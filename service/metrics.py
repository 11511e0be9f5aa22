"""Prometheus metrics: requests, latencies, solve times and solver outcomes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
