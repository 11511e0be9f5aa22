"""Keys of the service's answers that the command line's and the HTTP API's tests both
check."""

from __future__ import annotations

#: the numbers of a capacity report that SPEC 2 computes and that are floats
CAPACITY_FLOATS = (
    "capacity_rps",
    "power_w",
    "mu_p_rps",
    "mu_d_rps",
    "mu_d_max_rps",
    "batch",
    "ctx_tokens",
)
#: every number of a capacity report that SPEC 2 computes: the floats, the instance
#: counts and the KV pool (integers)
CAPACITY_KEYS = frozenset({"n_p", "n_d", "kv_pool_tokens", *CAPACITY_FLOATS})
#: a schedule's totals, all floats
TOTALS_KEYS = frozenset(
    {
        "objective_usd",
        "energy_kwh",
        "cost_usd",
        "carbon_kg",
        "served_requests",
        "unserved_requests",
        "unserved_value_usd",
        "transition_cost_usd",
    }
)
#: ``pdwatt capacity`` of 3 prefill instances and 1 decode instance at fixed:4096:256
CAPACITY_3P1D = ["capacity", "--workload", "fixed:4096:256", "--np", "3", "--nd", "1"]
