"""The event engine of the simulator (:mod:`model.simulator`): one run of the system
it describes, request by request, and its result.

Implementation: a plain-Python event loop on ``heapq``. A decode instance
advances whole runs of iterations at once ("steps"): between two events that
change its batch (a completion, a join, a pool limit, an admission
opportunity), iteration times form an arithmetic sequence, so a step's end
time and its time integrals have closed forms. An external event that needs
the next boundary (a prefill completion, an arrival to an empty queue)
shortens the running step to the boundary that follows it.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from model.catalog import DISPATCH_MODES
from model.errors import DoesNotFitError, InputError
from model.simulator.samples import Samples, SimTiming

#: Stability criterion: completions >= this share of arrivals over the window.
STABLE_SHARE = 0.98

_PERCENTILES = (50, 90, 99)

_ARRIVAL, _PREFILL_DONE, _STEP_END, _MARK = 0, 1, 2, 3


def percentiles(values: ArrayLike) -> dict[str, float | None]:
    """``{"p50", "p90", "p99", "mean"}`` of `values` (None when empty)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    q = np.percentile(v, _PERCENTILES)
    out: dict[str, float | None] = {f"p{p}": float(x) for p, x in zip(_PERCENTILES, q, strict=True)}
    out["mean"] = float(v.mean())
    return out


@dataclass(frozen=True)
class SimResult:
    """One simulation run. Rates in req/s, times in s, tokens per decode instance.

    Time averages are over the window ``[window_start_s, window_end_s]``; the
    ``*_frac`` fields are shares of the pool ``C_tok`` averaged over decode
    instances (``kv_free_frac = 1 - active - prefill``; ``kv_headroom_frac`` is
    the ``R`` per request in flight the admission rule holds back, part of the free
    share). Queue lengths are per instance. Latencies are for the requests that
    arrived in the window and completed (``incomplete`` did not).
    """

    n_p: int
    n_d: int
    rate_rps: float  # offered rate (inf: saturated)
    seed: int
    dispatch: str
    window_start_s: float
    window_end_s: float
    arrived: int
    admitted: int
    completed: int
    throughput_rps: float
    backlog_start: int  # requests in the system (arrived, not completed) at the window start
    backlog_end: int
    ttft_s: NDArray[np.float64]
    tpot_s: NDArray[np.float64]
    completion_times_s: NDArray[np.float64]  # sorted, of the completions in the window
    incomplete: int
    mean_batch: float  # time average (idle time counts as 0)
    mean_active_ctx_tokens: float  # time-weighted mean context of an active request
    iteration_mean_batch: float  # mean batch size per decode iteration
    iteration_mean_ctx_tokens: float  # mean attended tokens per request-iteration
    iteration_mean_s: float  # mean decode iteration time
    decode_busy_frac: float  # share of time a decode instance runs iterations
    kv_active_frac: float
    kv_prefill_frac: float
    kv_free_frac: float
    kv_headroom_frac: float
    kv_peak_tokens: int  # max of allocated tokens (a step counts at its last iteration)
    admission_queue_mean: float | None  # None when saturated (unbounded)
    prefill_queue_mean: float
    prefill_utilisation: float
    admission_wait_s: float
    prefill_wait_s: float
    join_wait_s: float
    retractions: int
    total_arrived: int  # over the whole run (not only the window)
    total_admitted: int
    total_completed: int
    end_s: float  # simulated time at the end of the run
    events: int
    log: list[tuple[Any, ...]] | None = field(default=None, repr=False)

    @property
    def saturated(self) -> bool:
        return math.isinf(self.rate_rps)

    @property
    def window_s(self) -> float:
        return self.window_end_s - self.window_start_s

    @property
    def completed_share(self) -> float:
        """Completions over arrivals in the window (1 when nothing arrived)."""
        return self.completed / self.arrived if self.arrived else 1.0

    @property
    def stable(self) -> bool:
        """The stability criterion: completions >= 98% of arrivals over the window."""
        return self.completed_share >= STABLE_SHARE


# --------------------------------------------------------------------------------------
# The engine


class _Decode:
    """State of one decode instance (tokens are counted in whole tokens)."""

    __slots__ = (
        "queue",
        "retracted",
        "joins",
        "fin",
        "n",
        "kv",
        "prealloc",
        "inflight",
        "it",
        "busy",
        "t0",
        "kv0",
        "pre0",
        "a1",
        "cn",
        "k",
        "ver",
        "area_n",
        "area_kv",
        "area_pre",
        "area_q",
        "area_infl",
        "area_busy",
        "iters",
        "tokens",
        "ctx_sum",
        "t_last",
        "created",
    )

    def __init__(self) -> None:
        self.queue: deque[int] = deque()  # dispatched, waiting for admission (FIFO)
        self.retracted: deque[int] = deque()  # retracted, waiting to resume (ahead of queue)
        self.joins: list[int] = []  # prefill done, waiting for the next iteration boundary
        self.fin: list[tuple[int, int]] = []  # heap of (finishing iteration, request id)
        self.n = 0  # active decode requests
        self.kv = 0  # tokens allocated to active requests (at the last boundary)
        self.prealloc = 0  # tokens pre-allocated to admitted, not yet decoding requests
        self.inflight = 0  # admitted and not completed (retracted excluded)
        self.it = 0  # iterations run so far
        self.busy = False  # a step is running
        self.t0 = 0.0  # running step: start time
        self.kv0 = 0  # running step: kv at its start
        self.pre0 = 0  # running step: prealloc at its start (it can only fall during a step)
        self.a1 = 0.0  # running step: t_k = a1 + cn * k
        self.cn = 0.0
        self.k = 0  # running step: planned iterations
        self.ver = 0  # running step: version (stale end events are skipped)
        self.area_n = 0.0  # integrals up to the last boundary (n, kv) or t_last (others)
        self.area_kv = 0.0
        self.area_pre = 0.0
        self.area_q = 0.0
        self.area_infl = 0.0
        self.area_busy = 0.0  # time with a step running
        self.iters = 0  # iterations completed
        self.tokens = 0  # sum over iterations of the batch size (decode tokens)
        self.ctx_sum = 0  # sum over iterations of the attended tokens S
        self.t_last = 0.0
        self.created = 0  # saturated mode: requests created for this instance


def _step_time(a1: float, cn: float, j: int) -> float:
    """Time of the first ``j`` iterations of a step: sum of ``a1 + cn k``, k = 1..j."""
    return j * a1 + cn * (j * (j + 1) // 2)


def _iterations_done(a1: float, cn: float, dt: float, kmax: int) -> int:
    """Largest ``j <= kmax`` with ``_step_time(j) <= dt``."""
    if dt <= 0:
        return 0
    if cn > 0:
        b = a1 + 0.5 * cn
        j = int(2.0 * dt / (b + math.sqrt(b * b + 2.0 * cn * dt)))
    else:
        j = int(dt / a1)
    j = min(j, kmax)
    while j < kmax and _step_time(a1, cn, j + 1) <= dt:
        j += 1
    while j > 0 and _step_time(a1, cn, j) > dt:
        j -= 1
    return j


def _kv_area(a1: float, cn: float, n: int, kv0: int, j: int) -> float:
    """Integral of allocated tokens over the first ``j`` iterations of a step:
    sum over k = 1..j of ``(kv0 + k n)(a1 + cn k)``."""
    s1 = j * (j + 1) / 2.0
    s2 = j * (j + 1) * (2 * j + 1) / 6.0
    return j * kv0 * a1 + (kv0 * cn + n * a1) * s1 + n * cn * s2


def simulate(
    timing: SimTiming,
    samples: Samples,
    n_p: int,
    n_d: int,
    rate_rps: float | None,
    *,
    requests: int = 4000,
    duration_s: float | None = None,
    warmup_fraction: float = 0.5,
    seed: int = 0,
    dispatch: str = "round_robin",
    replay: bool = False,
    drain: bool = False,
    tail: bool = True,
    log: bool = False,
) -> SimResult:
    """Simulate ``n_p`` prefill and ``n_d`` decode instances (see the module docstring).

    Modes:

    * open loop, Poisson arrivals at ``rate_rps``: the horizon is ``duration_s``, or
      by default long enough for ``requests`` arrivals after the warm-up; the window
      is the horizon after ``warmup_fraction`` of it. With ``tail`` (default) the run
      goes on, arrivals included, until the window's requests complete (at most one
      more horizon); with ``drain`` arrivals stop at the horizon and the run ends
      when the system is empty.
    * saturated, ``rate_rps = math.inf``: every decode queue is unbounded; the run
      stops after ``requests`` completions measured after
      ``requests * warmup_fraction / (1 - warmup_fraction)`` warm-up completions.
    * trace replay (``replay=True``): the samples' own arrival times, in order,
      time-scaled to mean rate ``rate_rps`` if given; window from the first to the
      last arrival (after ``warmup_fraction`` of it), then the run drains.

    The same arguments and seed give identical results. ``log=True`` records, in
    order, tuples ``(kind, t, ...)``: ``("admit" | "refuse", t, rid, d, kv_active,
    kv_prefill, in_flight, size)`` before the decision, ``("prefill", t, rid, p)``,
    ``("join", t, rid, d)``, ``("step", t, d, batch, kv_active, iterations,
    kv_prefill)`` at a step's start (iterations planned), ``("step_end", t, d,
    iterations)`` (iterations run), ``("retract", t, rid, d)`` and ``("done", t,
    rid, d)``.
    """
    _check_config(n_p, n_d, dispatch)
    if not (0.0 <= warmup_fraction < 1.0):
        raise InputError("warmup_fraction", "must be in [0, 1)")
    if requests < 1:
        raise InputError("requests", "must be >= 1")
    longest = samples.max_tokens + timing.reserved_tokens
    if longest > timing.kv_usable_tokens:
        raise DoesNotFitError(
            "workload",
            f"the longest request needs {longest:,} tokens (l_in + l_out + R) but the "
            f"usable KV pool holds {timing.kv_usable_tokens:,}",
        )
    arrivals: list[float] | None = None
    if replay:
        if samples.arrival_s is None:
            raise InputError("workload", f"{samples.name} has no arrival times to replay")
        arr = samples.arrival_s - samples.arrival_s[0]
        if rate_rps is not None:
            if not (math.isfinite(rate_rps) and rate_rps > 0):
                raise InputError("rate", "must be finite and > 0 to rescale a replay")
            span = arr[-1]
            if span <= 0:
                raise InputError("workload", "the trace's arrivals span no time")
            arr = arr * ((len(arr) - 1) / rate_rps / span)
        arrivals = arr.tolist()
        horizon = float(arrivals[-1])
        drain = True
    else:
        if rate_rps is None or not (rate_rps > 0):
            raise InputError("rate", f"must be > 0 (or inf for saturation), got {rate_rps!r}")
        if math.isinf(rate_rps):
            horizon = math.inf
        elif duration_s is not None:
            if not (math.isfinite(duration_s) and duration_s > 0):
                raise InputError("duration", "must be finite and > 0")
            horizon = float(duration_s)
        else:
            horizon = requests / rate_rps / (1.0 - warmup_fraction)
    engine = _Engine(
        timing,
        samples,
        n_p,
        n_d,
        rate_rps=0.0 if rate_rps is None else float(rate_rps),
        horizon=horizon,
        warmup_fraction=warmup_fraction,
        requests=requests,
        seed=seed,
        dispatch=dispatch,
        arrivals=arrivals,
        drain=drain,
        tail=tail,
        log=log,
    )
    return engine.run()


def _check_config(n_p: int, n_d: int, dispatch: str) -> None:
    for name, v in (("n_p", n_p), ("n_d", n_d)):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise InputError(name, f"must be an integer >= 1, got {v!r}")
    if dispatch not in DISPATCH_MODES:
        raise InputError("dispatch", f"must be one of {', '.join(DISPATCH_MODES)}")


class _Engine:
    """One run of the event loop (built and run by :func:`simulate`)."""

    def __init__(
        self,
        timing: SimTiming,
        samples: Samples,
        n_p: int,
        n_d: int,
        *,
        rate_rps: float,
        horizon: float,
        warmup_fraction: float,
        requests: int,
        seed: int,
        dispatch: str,
        arrivals: list[float] | None,
        drain: bool,
        tail: bool,
        log: bool,
    ) -> None:
        self.tm = timing
        self.samples = samples
        self.n_p, self.n_d = int(n_p), int(n_d)
        self.rate = rate_rps
        self.saturated = arrivals is None and math.isinf(rate_rps)
        self.horizon = horizon
        self.warmup_fraction = warmup_fraction
        self.requests = requests
        self.seed = seed
        self.dispatch = dispatch
        self.arrivals = arrivals
        self.drain = drain
        self.tail = tail
        self.log: list[tuple[Any, ...]] | None = [] if log else None

    # The run is one long method on purpose: the event loop binds everything it
    # touches to locals, which is what makes pure-Python simulation fast enough.
    def run(self) -> SimResult:  # noqa: C901 (event loop)
        tm = self.tm
        n_p, n_d = self.n_p, self.n_d
        usable = tm.kv_usable_tokens
        res = tm.reserved_tokens
        c_kv = tm.attended_token_s  # s per attended token
        w_s = tm.iteration_s  # s per iteration at zero batch
        t_req = tm.request_s  # s per request in the batch (the clock's term included)
        a_p, b_p = tm.a_p_s_per_token, tm.b_p_s_per_token2
        log = self.log
        saturated = self.saturated
        round_robin = self.dispatch == "round_robin"

        s_in = self.samples.l_in.tolist()
        s_out = self.samples.l_out.tolist()
        n_samples = len(s_in)
        ss = np.random.SeedSequence(self.seed)
        rng_gap, rng_len, rng_disp = (np.random.default_rng(s) for s in ss.spawn(3))
        block = 4096

        # per request (index = request id)
        r_arr: list[float] = []
        r_in: list[int] = []
        r_out: list[int] = []
        r_p: list[int] = []
        r_d: list[int] = []
        r_adm: list[float] = []
        r_pstart: list[float] = []
        r_first: list[float] = []
        r_join: list[float] = []
        r_done: list[float] = []
        r_iters: list[int] = []  # decode iterations done before the current join
        r_jit: list[int] = []  # instance iteration count at the current join

        decs = [_Decode() for _ in range(n_d)]
        pq: list[deque[int]] = [deque() for _ in range(n_p)]  # admitted, waiting for prefill
        p_busy = [-1] * n_p
        p_area_busy = [0.0] * n_p
        p_area_q = [0.0] * n_p
        p_last = [0.0] * n_p

        heap: list[tuple[float, int, int, int, int]] = []
        seq = 0
        counters = {"arrived": 0, "admitted": 0, "completed": 0, "retractions": 0}
        peak = 0
        events = 0

        # length and dispatch draws, in blocks
        len_buf: list[int] = []
        disp_buf: list[tuple[int, int]] = []

        def draw_index() -> int:
            # successive random permutations of the samples: without replacement, so any
            # n_samples consecutive requests have exactly the samples' length mix
            if n_samples == 1:
                return 0
            if not len_buf:
                len_buf.extend(rng_len.permutation(n_samples).tolist())
            return len_buf.pop()

        def draw_dispatch() -> tuple[int, int]:
            if not disp_buf:
                ps = rng_disp.integers(0, n_p, block).tolist()
                ds = rng_disp.integers(0, n_d, block).tolist()
                disp_buf.extend(list(zip(ps, ds, strict=True))[::-1])
            return disp_buf.pop()

        def new_request(t: float, i: int, p: int, d: int) -> int:
            rid = len(r_in)
            r_arr.append(t)
            r_in.append(s_in[i])
            r_out.append(s_out[i])
            r_p.append(p)
            r_d.append(d)
            r_adm.append(math.nan)
            r_pstart.append(math.nan)
            r_first.append(math.nan)
            r_join.append(math.nan)
            r_done.append(math.nan)
            r_iters.append(0)
            r_jit.append(0)
            return rid

        def touch(dec: _Decode, t: float) -> None:
            dt = t - dec.t_last
            if dt > 0:
                dec.area_pre += dec.prealloc * dt
                dec.area_q += (len(dec.queue) + len(dec.retracted)) * dt
                dec.area_infl += dec.inflight * dt
                dec.t_last = t

        def p_touch(p: int, t: float) -> None:
            dt = t - p_last[p]
            if dt > 0:
                if p_busy[p] >= 0:
                    p_area_busy[p] += dt
                p_area_q[p] += len(pq[p]) * dt
                p_last[p] = t

        def push(t: float, kind: int, idx: int, ver: int) -> None:
            nonlocal seq
            seq += 1
            heapq.heappush(heap, (t, seq, kind, idx, ver))

        def start_prefill(p: int, t: float) -> None:
            rid = pq[p].popleft()
            p_busy[p] = rid
            r_pstart[rid] = t
            if log is not None:
                log.append(("prefill", t, rid, p))
            li = r_in[rid]
            push(t + (a_p * li + b_p * li * li), _PREFILL_DONE, p, 0)

        def admit(dec: _Decode, d: int, t: float) -> None:
            """FIFO admission at time t (retracted requests first)."""
            nonlocal peak
            while True:
                if dec.retracted:
                    rid = dec.retracted[0]
                    size = r_in[rid] + r_iters[rid]
                    resumed = True
                else:
                    if not dec.queue:
                        if not saturated:
                            return
                        k = d + dec.created * n_d
                        dec.created += 1
                        p = k % n_p if round_robin else draw_dispatch()[0]
                        dec.queue.append(new_request(0.0, draw_index(), p, d))
                        counters["arrived"] += 1
                    rid = dec.queue[0]
                    size = r_in[rid]
                    resumed = False
                # R per request in flight (and at least the next iteration's slots, R = 0)
                need = dec.kv + dec.prealloc + size + max(res * (dec.inflight + 1), dec.n + 1)
                if need > usable:
                    if log is not None:
                        log.append(("refuse", t, rid, d, dec.kv, dec.prealloc, dec.inflight, size))
                    return
                if log is not None:
                    log.append(("admit", t, rid, d, dec.kv, dec.prealloc, dec.inflight, size))
                touch(dec, t)
                dec.inflight += 1
                if resumed:
                    dec.retracted.popleft()
                    # resumes straight into the batch: the caller is at a boundary
                    dec.n += 1
                    dec.kv += size
                    r_jit[rid] = dec.it
                    heapq.heappush(dec.fin, (dec.it + r_out[rid] - 1 - r_iters[rid], rid))
                else:
                    dec.queue.popleft()
                    counters["admitted"] += 1
                    dec.prealloc += size
                    r_adm[rid] = t
                    p = r_p[rid]
                    p_touch(p, t)
                    pq[p].append(rid)
                    if p_busy[p] < 0:
                        start_prefill(p, t)
                alloc = dec.kv + dec.prealloc
                if alloc > peak:
                    peak = alloc

        def truncate(dec: _Decode, d: int, t: float) -> None:
            """End the running step at the first iteration boundary after t."""
            m = _iterations_done(dec.a1, dec.cn, t - dec.t0, dec.k) + 1
            if m < dec.k:
                dec.k = m
                dec.ver += 1
                push(dec.t0 + _step_time(dec.a1, dec.cn, m), _STEP_END, d, dec.ver)

        def boundary(dec: _Decode, d: int, t: float) -> None:
            """The decode scheduler at an iteration boundary (or an idle instance)."""
            nonlocal peak
            if dec.busy:
                k, n = dec.k, dec.n
                top = dec.kv0 + k * n + dec.pre0
                if top > peak:
                    peak = top
                if log is not None:
                    log.append(("step_end", t, d, k))
                t_step = _step_time(dec.a1, dec.cn, k)
                dec.area_busy += t_step
                dec.area_n += n * t_step
                dec.area_kv += _kv_area(dec.a1, dec.cn, n, dec.kv0, k)
                dec.iters += k
                dec.tokens += k * n
                dec.ctx_sum += k * dec.kv0 + n * (k * (k + 1) // 2)
                dec.it += k
                dec.kv = dec.kv0 + k * n
                dec.busy = False
            touch(dec, t)
            fin = dec.fin
            it = dec.it
            while fin and fin[0][0] <= it:
                _, rid = heapq.heappop(fin)
                dec.n -= 1
                dec.kv -= r_in[rid] + r_out[rid] - 1
                dec.inflight -= 1
                complete(rid, t)
            if dec.joins:
                for rid in dec.joins:
                    li = r_in[rid]
                    dec.prealloc -= li
                    dec.kv += li
                    dec.n += 1
                    r_jit[rid] = it
                    r_join[rid] = t
                    heapq.heappush(fin, (it + r_out[rid] - 1, rid))
                    if log is not None:
                        log.append(("join", t, rid, d))
                dec.joins.clear()
            if dec.n and dec.kv + dec.n + dec.prealloc > usable:
                retract(dec, d, t)
            admit(dec, d, t)
            n = dec.n
            if n:
                kv0 = dec.kv
                room = (usable - dec.prealloc - kv0) // n
                k = min(fin[0][0] - it, room)
                a1 = w_s + t_req * n + c_kv * kv0
                cn = c_kv * n
                dec.busy = True
                dec.t0, dec.kv0, dec.a1, dec.cn, dec.k = t, kv0, a1, cn, k
                dec.pre0 = dec.prealloc
                dec.ver += 1
                if log is not None:
                    log.append(("step", t, d, n, kv0, k, dec.prealloc))
                push(t + _step_time(a1, cn, k), _STEP_END, d, dec.ver)

        def retract(dec: _Decode, d: int, t: float) -> None:
            it = dec.it
            while dec.n and dec.kv + dec.n + dec.prealloc > usable:
                victim = max(
                    dec.fin,
                    key=lambda e: (-(r_iters[e[1]] + it - r_jit[e[1]]), r_in[e[1]], e[1]),
                )
                dec.fin.remove(victim)
                heapq.heapify(dec.fin)
                rid = victim[1]
                r_iters[rid] += it - r_jit[rid]
                dec.n -= 1
                dec.kv -= r_in[rid] + r_iters[rid]
                dec.inflight -= 1
                dec.retracted.append(rid)
                counters["retractions"] += 1
                if log is not None:
                    log.append(("retract", t, rid, d))

        # window bookkeeping
        sat_warm = (
            max(1, round(self.requests * self.warmup_fraction / (1.0 - self.warmup_fraction)))
            if self.warmup_fraction > 0
            else 0
        )
        snaps: list[dict[str, Any]] = []
        t_w = self.horizon * self.warmup_fraction if not saturated else math.nan
        window_left = 0  # window requests not yet completed (open loop)
        stop = False

        def snapshot(t: float) -> None:
            s = {"t": t, **counters, "n": 0.0, "kv": 0.0, "pre": 0.0, "q": 0.0, "infl": 0.0}
            s.update({"dbusy": 0.0, "iters": 0, "tokens": 0, "ctx": 0})
            for dec in decs:
                touch(dec, t)
                s["pre"] += dec.area_pre
                s["q"] += dec.area_q
                s["infl"] += dec.area_infl
                an, akv = dec.area_n, dec.area_kv
                s["dbusy"] += dec.area_busy
                s["iters"] += dec.iters
                s["tokens"] += dec.tokens
                s["ctx"] += dec.ctx_sum
                if dec.busy:
                    dt = t - dec.t0
                    j = _iterations_done(dec.a1, dec.cn, dt, dec.k)
                    s["dbusy"] += dt
                    s["iters"] += j
                    s["tokens"] += j * dec.n
                    s["ctx"] += j * dec.kv0 + dec.n * (j * (j + 1) // 2)
                    an += dec.n * dt
                    akv += _kv_area(dec.a1, dec.cn, dec.n, dec.kv0, j)
                    akv += (dt - _step_time(dec.a1, dec.cn, j)) * (dec.kv0 + (j + 1) * dec.n)
                s["n"] += an
                s["kv"] += akv
            for p in range(n_p):
                p_touch(p, t)
            s["busy"] = sum(p_area_busy)
            s["pq"] = sum(p_area_q)
            s["backlog"] = counters["arrived"] - counters["completed"]
            snaps.append(s)

        def complete(rid: int, t: float) -> None:
            nonlocal window_left, stop
            r_done[rid] = t
            counters["completed"] += 1
            if log is not None:
                log.append(("done", t, rid, r_d[rid]))
            if saturated:
                done = counters["completed"]
                if done == sat_warm:
                    snapshot(t)
                if done == sat_warm + self.requests:
                    snapshot(t)
                    stop = True
            elif t_w <= r_arr[rid] <= self.horizon:
                window_left -= 1

        # ---- initial events
        arrivals = self.arrivals
        gaps: list[float] = []
        next_arrival_index = 0
        if saturated:
            if sat_warm == 0:
                snapshot(0.0)
            for d, dec in enumerate(decs):
                boundary(dec, d, 0.0)
        else:
            push(t_w, _MARK, 0, 0)
            # just after the horizon, so that arrivals at the horizon are inside the window
            push(math.nextafter(self.horizon, math.inf), _MARK, 1, 0)
            if arrivals is not None:
                push(arrivals[0], _ARRIVAL, 0, 0)
            else:
                gaps = rng_gap.exponential(1.0 / self.rate, block).tolist()[::-1]
                t_first_arrival = gaps.pop()
                if not self.drain or t_first_arrival <= self.horizon:
                    push(t_first_arrival, _ARRIVAL, 0, 0)
        t_cap = self.horizon * 2.0 if math.isfinite(self.horizon) else math.inf
        if arrivals is not None:
            t_cap = math.inf

        t = 0.0
        heappop = heapq.heappop
        while heap and not stop:
            t, _, kind, idx, ver = heappop(heap)
            events += 1
            if kind == _STEP_END:
                dec = decs[idx]
                if ver != dec.ver or not dec.busy:
                    continue
                boundary(dec, idx, t)
            elif kind == _PREFILL_DONE:
                p = idx
                p_touch(p, t)
                rid = p_busy[p]
                p_busy[p] = -1
                r_first[rid] = t
                if pq[p]:
                    start_prefill(p, t)
                d = r_d[rid]
                dec = decs[d]
                if r_out[rid] == 1:
                    touch(dec, t)
                    dec.prealloc -= r_in[rid]
                    dec.inflight -= 1
                    complete(rid, t)
                    if dec.busy:
                        if dec.queue or dec.retracted or saturated:
                            truncate(dec, d, t)
                    else:
                        boundary(dec, d, t)
                else:
                    dec.joins.append(rid)
                    if dec.busy:
                        truncate(dec, d, t)
                    else:
                        boundary(dec, d, t)
            elif kind == _ARRIVAL:
                if arrivals is not None:
                    i = next_arrival_index
                    next_arrival_index += 1
                    if next_arrival_index < len(arrivals):
                        push(arrivals[next_arrival_index], _ARRIVAL, 0, 0)
                else:
                    i = draw_index()
                    if not gaps:
                        gaps = rng_gap.exponential(1.0 / self.rate, block).tolist()[::-1]
                    t_next = t + gaps.pop()
                    if not self.drain or t_next <= self.horizon:
                        push(t_next, _ARRIVAL, 0, 0)
                k = counters["arrived"]
                if round_robin:
                    p, d = k % n_p, k % n_d
                else:
                    p, d = draw_dispatch()
                rid = new_request(t, i, p, d)
                counters["arrived"] += 1
                if t_w <= t <= self.horizon:
                    window_left += 1
                dec = decs[d]
                touch(dec, t)
                dec.queue.append(rid)
                if dec.busy:
                    if len(dec.queue) == 1 and not dec.retracted:
                        truncate(dec, d, t)
                else:
                    boundary(dec, d, t)
            else:  # _MARK: window start (0) or end (1)
                snapshot(t)
                if idx == 1 and not self.drain and not self.tail:
                    stop = True
            if (
                not saturated
                and not self.drain
                and t >= self.horizon
                and (window_left == 0 or t >= t_cap)
                and len(snaps) >= 2
            ):
                stop = True
        if len(snaps) < 2:  # pragma: no cover (the loop always reaches the window's end)
            raise RuntimeError("the run ended before its measurement window")
        return self._result(
            snaps,
            t,
            peak,
            events,
            counters,
            (r_arr, r_in, r_out, r_adm, r_pstart, r_first, r_join, r_done),
        )

    def _result(
        self,
        snaps: list[dict[str, Any]],
        t_end: float,
        peak: int,
        events: int,
        totals: Mapping[str, int],
        req: tuple[list[Any], ...],
    ) -> SimResult:
        a, b = snaps[0], snaps[1]
        window = b["t"] - a["t"]
        r_arr, r_in, r_out, r_adm, r_pstart, r_first, r_join, r_done = (np.asarray(x) for x in req)
        n_d, n_p = self.n_d, self.n_p
        pool = float(self.tm.kv_pool_tokens)
        if self.saturated:
            sel = (r_done > a["t"]) & (r_done <= b["t"])
        else:
            sel = (r_arr >= a["t"]) & (r_arr <= b["t"])
        done = sel & np.isfinite(r_done)
        ttft = (r_first - r_arr)[done]
        multi = done & (r_out > 1)
        tpot = ((r_done - r_first) / np.maximum(r_out - 1, 1))[multi]
        joined = done & np.isfinite(r_join)

        def avg(key: str, per: float) -> float:
            return (b[key] - a[key]) / window / per if window > 0 else math.nan

        def mean_or_nan(x: NDArray[Any]) -> float:
            return float(x.mean()) if x.size else math.nan

        area_n = b["n"] - a["n"]
        iters = b["iters"] - a["iters"]
        tokens = b["tokens"] - a["tokens"]
        completed = b["completed"] - a["completed"]
        arrived = int(b["arrived"] - a["arrived"]) if not self.saturated else int(completed)
        return SimResult(
            n_p=n_p,
            n_d=n_d,
            rate_rps=float(self.rate) if not self.saturated else math.inf,
            seed=self.seed,
            dispatch=self.dispatch,
            window_start_s=float(a["t"]),
            window_end_s=float(b["t"]),
            arrived=arrived,
            admitted=int(b["admitted"] - a["admitted"]),
            completed=int(completed),
            throughput_rps=completed / window if window > 0 else math.nan,
            backlog_start=int(a["backlog"]),
            backlog_end=int(b["backlog"]),
            ttft_s=ttft.astype(float),
            tpot_s=tpot.astype(float),
            completion_times_s=np.sort(r_done[(r_done > a["t"]) & (r_done <= b["t"])]),
            incomplete=int((sel & ~np.isfinite(r_done)).sum()) if not self.saturated else 0,
            mean_batch=avg("n", n_d),
            mean_active_ctx_tokens=(b["kv"] - a["kv"]) / area_n if area_n > 0 else math.nan,
            iteration_mean_batch=tokens / iters if iters else math.nan,
            iteration_mean_ctx_tokens=(b["ctx"] - a["ctx"]) / tokens if tokens else math.nan,
            iteration_mean_s=(b["dbusy"] - a["dbusy"]) / iters if iters else math.nan,
            decode_busy_frac=avg("dbusy", n_d),
            kv_active_frac=avg("kv", n_d * pool),
            kv_prefill_frac=avg("pre", n_d * pool),
            kv_free_frac=1.0 - avg("kv", n_d * pool) - avg("pre", n_d * pool),
            kv_headroom_frac=avg("infl", n_d * pool) * self.tm.reserved_tokens,
            kv_peak_tokens=int(peak),
            admission_queue_mean=None if self.saturated else avg("q", n_d),
            prefill_queue_mean=avg("pq", n_p),
            prefill_utilisation=avg("busy", n_p),
            admission_wait_s=mean_or_nan((r_adm - r_arr)[done]) if not self.saturated else math.nan,
            prefill_wait_s=mean_or_nan((r_pstart - r_adm)[done]),
            join_wait_s=mean_or_nan((r_join - r_first)[joined]),
            retractions=int(totals["retractions"]),
            total_arrived=int(totals["arrived"]),
            total_admitted=int(totals["admitted"]),
            total_completed=int(totals["completed"]),
            end_s=float(t_end),
            events=events,
            log=self.log,
        )
