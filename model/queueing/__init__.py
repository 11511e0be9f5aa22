"""Queueing and latency: the analytic queue model's TTFT and TPOT, capacity under p99
latency targets and the capacity-power front under them."""
