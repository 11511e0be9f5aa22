"""Discrete-event simulator of PD-disaggregated serving, request by request.

An independent check on the analytical core (SPEC 2.2-2.5) and the source of
latency figures (TTFT, TPOT). It shares with the core only the catalog, the
workload loaders and the primitive timing formulas:

    t_P(l_in) = a_P l_in + b_P l_in^2                                  (SPEC 2.2)
    t_D(batch) = (weight_bytes + kappa * S) / (beta MBU) + t_iter + t_req * n

where ``n`` is the number of requests in the decode batch and ``S`` the sum of
their *actual* current contexts (SPEC 2.3 with the real batch instead of
``B * ctx``). Under ``performance: kernels`` (measured kernel tables, ``a_P`` and
``b_P`` from the capacity model's prefill curve) the decode iteration is the capacity
model's line split the same way, ``alpha + (g - g_c ctx) n + g_c S`` with ``g_c`` its
context share (:class:`SimTiming`). It never calls the memory balance, the batch solver, Kingman's
formula or the capacity code.

The system simulated (SGLang's PD mode, SPEC 2.1):

* Arrivals are Poisson at ``rate_rps`` (or a trace's own timestamps); each
  request draws ``(l_in, l_out)`` jointly from the samples, going through
  successive random permutations of them (sampling without replacement: any
  ``len(samples)`` consecutive requests have exactly the samples' length mix,
  which removes most of the sampling noise of heavy-tailed traces); trace
  replay uses the rows in order. The router sends request ``k`` to
  prefill instance ``k mod n_P`` and decode instance ``k mod n_D``
  (round-robin) or to uniformly random ones.
* Decode admission: each decode instance keeps a FIFO queue of the requests
  dispatched to it. The head is admitted when the pool can hold every running
  context, every admitted-but-not-decoding input, ``R`` more tokens per request
  in flight and the head's own ``l_in + R``:
  ``kv_active + kv_prefill + R * (in_flight + 1) + l_in <= C_tok - U``.
  Admission pre-allocates ``l_in`` tokens; only then may the request's prefill
  start. Strict FIFO: a head that does not fit blocks the requests behind it.
* Prefill: one FCFS server per instance, in order of admission, service time
  ``t_P(l_in)``. The first output token comes from prefill (TTFT); KV transfer
  to the decode instance takes no time.
* Decode: continuous batching. An iteration takes ``t_D`` of its batch; every
  active request allocates one token slot at the start of the iteration and
  gains one token. A request needs ``l_out - 1`` iterations and attends to
  ``l_in + k`` tokens in its ``k``-th (its mean over them is ``l_in + l_out/2``).
  The decode scheduler acts at iteration boundaries, as SGLang's event loop
  does: completed requests leave (freeing their tokens), requests whose prefill
  ended join, the pool is checked, the queue is admitted, then the next
  iteration starts. An idle decode instance acts at once. Requests with
  ``l_out = 1`` finish at the end of their prefill and release their
  pre-allocation.
* Retraction: if the next iteration's token slots do not fit (possible only
  when outputs outgrow the ``R`` reserve), requests are retracted, fewest
  generated tokens first (ties: longest prompt), as SGLang's
  ``retract_decode`` does. A retracted request's KV is parked off the GPU at no
  cost and it resumes, ahead of new admissions, when ``its context + R`` fits
  under the admission rule. Retractions are counted.

Statistics are time-weighted over a measurement window (the second half of
the horizon by default): throughput, mean decode batch, KV pool occupancy split
(active decode / pre-allocated for prefill / free), queue lengths, prefill
utilisation; TTFT and TPOT percentiles over the requests that arrive in the
window (the run continues past the window until they complete, arrivals
included, so that slow requests are not dropped).

The package's modules: :mod:`model.simulator.samples` (inputs),
:mod:`model.simulator.engine` (one run), :mod:`model.simulator.search` (capacity) and
:mod:`model.simulator.reports` (JSON-able reports).
"""

from model.simulator.engine import STABLE_SHARE, SimResult, percentiles, simulate
from model.simulator.reports import (
    capacity_search_report,
    simulate_report,
    simulated_slo,
    simulated_slo_check,
    slo_front,
)
from model.simulator.samples import (
    DATA_DIR_ENV,
    Samples,
    SimTiming,
    data_dir,
    not_simulated,
    preset_samples,
    resolve_samples,
)
from model.simulator.search import (
    CapacityEstimate,
    default_requests,
    find_capacity,
    pooled_stable,
)

__all__ = [
    "DATA_DIR_ENV",
    "STABLE_SHARE",
    "CapacityEstimate",
    "Samples",
    "SimResult",
    "SimTiming",
    "capacity_search_report",
    "data_dir",
    "default_requests",
    "find_capacity",
    "not_simulated",
    "percentiles",
    "pooled_stable",
    "preset_samples",
    "resolve_samples",
    "simulate",
    "simulate_report",
    "simulated_slo",
    "simulated_slo_check",
    "slo_front",
]
