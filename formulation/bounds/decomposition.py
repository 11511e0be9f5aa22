"""Dantzig-Wolfe decomposition of the schedule MILP: a proven lower bound and the
configurations worth keeping.

Deployments are coupled only by the per-period site cap and the GPU inventories.
Relaxing those with prices gives one exact dynamic program per deployment
(:mod:`formulation.subproblems.dp`). Column generation finds the prices: the master LP chooses a
convex combination of whole-horizon schedules ("columns") per deployment within the
cap and inventory; its duals price the next DP; the DPs return new columns.

Whatever the prices ``pi >= 0`` (per IT watt and period) and ``sigma >= 0`` (per GPU
and period), the Lagrangian value

    L(pi, sigma) = sum_m DP_m(pi, sigma) - sum_t pi_t (cap_t / PUE - p_idle G)
                   - sum_{g,t} sigma_{g,t} G_g + sum_t cw_t p_idle G

is a lower bound on the MILP optimum (weak duality); the best one seen is reported.
At convergence it equals the master LP value (the Dantzig-Wolfe bound).

The master LP is solved with highspy directly: it is re-solved after every round of
new columns, and adding a column to a live HiGHS model is far cheaper than rebuilding
a Pyomo model each time. The integer problem itself is built in Pyomo
(:mod:`formulation.milp.compact`).

Dual smoothing (Wentges, "Weighted Dantzig-Wolfe decomposition for linear
mixed-integer programming", ITOR 4, 1997): the DPs are priced at ``alpha * best +
(1 - alpha) * LP`` duals, the best-bound multipliers being the stability centre, which
damps the oscillation of the LP duals; mispricing (no new column at the smoothed
point) falls back to the LP duals, so every round adds a column or proves the LP
optimal. Every priced point is a Lagrangian bound whatever ``alpha``: the smoothing
changes only how fast the bound rises. The automatic ``alpha`` of Pessoa, Sadykov,
Uchoa and Vanderbeck ("Automation and combination of linear-programming based
stabilization techniques in column generation", INFORMS J. Comput. 30, 2018: ``alpha``
falls by 0.1 where the supergradient at the smoothed point points towards the LP
duals, else rises by a tenth of ``1 - alpha``) raised the bound more slowly on site D
with 3 x 3 settings (99.7 against 107.4 thousand USD after six rounds, 108.7 against
109.0 after twelve), so ``alpha`` stays fixed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import highspy
import numpy as np
from numpy.typing import NDArray

from formulation.bounds.lagrange import DualOracle, Point, VolumeState, relax
from formulation.budget import Deadline
from formulation.data import ScheduleData, site_constant_usd
from formulation.evaluate import Schedule, transitions
from formulation.milp.highs import quiet_highs
from formulation.subproblems.dp import (
    deployment_grid,
)

log = logging.getLogger(__name__)

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass
class Column:
    deployment: int
    config: IntArray  # (T,)
    served_rps: FloatArray  # (T,)
    cost_usd: float  # true cost (energy of IT power net of idle credit, unserved, transitions)
    pnet_w: FloatArray  # (T,) IT power minus the idle power of the GPUs it uses
    gpus: IntArray  # (T,)


@dataclass
class DecompositionResult:
    lower_bound_usd: float
    lp_value_usd: float
    columns: list[Column]
    weights: FloatArray  # LP weight of each column
    iterations: int
    seconds: float
    converged: bool
    lp_slack_periods: list[int] = field(default_factory=list)  # cap needs slack in the LP
    lp_inventory_slack: list[tuple[int, int]] = field(default_factory=list)
    history: list[tuple[float, float]] = field(default_factory=list)  # (s, best bound)
    # stopped because the master LP fell to a bound proven otherwise (``bound_to_beat``)
    beaten: bool = False
    # the state, to go on from where it stopped
    generation: ColumnGeneration | None = None


def make_column(data: ScheduleData, m: int, sched_cfg: IntArray, served: FloatArray) -> Column:
    d = data.deployments[m]
    p = d.power_w(sched_cfg, served)
    gpus = d.gpus[sched_cfg]
    pnet = p - data.idle_gpu_power_w * gpus
    starts, stops = transitions(d, sched_cfg)
    cost = float(
        np.sum(data.cost_usd_per_w * pnet)
        + np.sum(d.unserved_usd_per_rps * (d.demand_rps - served))
        + data.start_cost_usd * starts.sum()
        + data.stop_cost_usd * stops.sum()
    )
    return Column(m, sched_cfg.copy(), served.copy(), cost, pnet, gpus.astype(np.int64))


class Master:
    """The restricted master LP in a live HiGHS model."""

    def __init__(self, data: ScheduleData) -> None:
        self.data = data
        T, G, M = data.n_periods, len(data.pools), len(data.deployments)
        self.T, self.G, self.M = T, G, M
        self.h = quiet_highs()
        self.h.setOptionValue("presolve", "off")
        inf = highspy.kHighsInf
        # rows: convexity (M, == 1), cap (T, <= rhs), inventory (G*T, <= G_g)
        self.cap_rhs = data.net_cap_w
        lower = np.concatenate([np.ones(M), np.full(T + G * T, -inf)])
        upper = np.concatenate([np.ones(M), self.cap_rhs, np.repeat(data.pool_gpus, T)])
        self.h.addRows(
            len(lower), lower, upper, 0, np.array([0]), np.array([], dtype=np.int32), np.array([])
        )
        # slack columns with a large price keep the LP feasible; positive slack at the
        # optimum means the LP relaxation (hence the MILP) is infeasible there.
        self.big = 1e3 * (float(np.max(data.cost_usd_per_w)) + 1.0)
        for t in range(T):
            self.h.addCol(
                self.big, 0.0, inf, 1, np.array([M + t], dtype=np.int32), np.array([-1.0])
            )
        for r in range(G * T):
            self.h.addCol(
                self.big * 1e3, 0.0, inf, 1, np.array([M + T + r], dtype=np.int32), np.array([-1.0])
            )
        self.n_slack = T + G * T
        self.columns: list[Column] = []
        self.keys: set[tuple[int, bytes, bytes]] = set()

    def add(self, col: Column) -> bool:
        key = (col.deployment, col.config.tobytes(), np.round(col.served_rps, 9).tobytes())
        if key in self.keys:
            return False
        self.keys.add(key)
        T, M = self.T, self.M
        rows = [col.deployment]
        vals = [1.0]
        nz = np.flatnonzero(col.pnet_w)
        rows += (M + nz).tolist()
        vals += col.pnet_w[nz].tolist()
        for g, pool_gpus in self.data.pool_use(col.deployment):  # one pool, or one per phase
            gpus = col.gpus if pool_gpus is self.data.deployments[col.deployment].gpus else (
                pool_gpus[col.config]
            )
            gz = np.flatnonzero(gpus)
            rows += (M + T + g * T + gz).tolist()
            vals += gpus[gz].astype(float).tolist()
        self.h.addCol(
            col.cost_usd,
            0.0,
            highspy.kHighsInf,
            len(rows),
            np.array(rows, dtype=np.int32),
            np.array(vals),
        )
        self.columns.append(col)
        return True

    def solve(self) -> tuple[float, FloatArray, FloatArray, FloatArray, FloatArray]:
        self.h.run()
        sol = self.h.getSolution()
        info = self.h.getInfo()
        duals = np.asarray(sol.row_dual)
        x = np.asarray(sol.col_value)
        M, T, G = self.M, self.T, self.G
        kappa = duals[:M]
        pi = np.maximum(-duals[M : M + T], 0.0)
        sigma = np.maximum(-duals[M + T :], 0.0).reshape(G, T)
        return float(info.objective_function_value), kappa, pi, sigma, x


def decompose(
    data: ScheduleData,
    deadline: Deadline,
    extra_columns: list[Column] | None = None,
    max_iter: int = 500,
    rel_tol: float = 1e-7,
    smoothing: float = 0.5,
    progress: Callable[[str], None] | None = None,
    oracle: DualOracle | None = None,
    stop: Callable[[], bool] | None = None,
    first: Point | None = None,
    bound_to_beat: Callable[[], float] | None = None,
    warm: Point | None = None,
    upper_usd: Callable[[], float] | None = None,
    rel_gap: float = 0.0,
) -> DecompositionResult:
    """Column generation to the Dantzig-Wolfe bound (or ``deadline``). ``oracle``
    prices the deployments' DPs (default: serial, on unrestricted grids), e.g. on the
    grids of :func:`formulation.bounds.lagrange.local_grids`; ``stop``: checked after every
    round; ``first``: the oracle's point at zero prices, if the caller has it;
    ``bound_to_beat`` (optional): a lower bound proven otherwise; ``warm``
    (optional): the oracle's point at multipliers found otherwise (the periods' own cap
    prices), the stability centre when its bound beats zero prices'. The restricted master
    LP's value is at least the Dantzig-Wolfe bound, so once it is no higher than that
    bound column generation cannot beat it and stops (``beaten`` in the result). The
    result's ``generation`` goes on from where it stopped (:meth:`ColumnGeneration.rounds`).
    With ``upper_usd`` (the incumbent's cost), stalled rounds hand over to the volume
    algorithm (:func:`ascend`, which ``rel_gap`` also stops)."""
    own = oracle is None
    if oracle is None:
        oracle = DualOracle(data, [deployment_grid(data, d) for d in data.deployments])
    try:
        gen = ColumnGeneration(data, oracle, extra_columns, rel_tol, smoothing, first, warm)
        if upper_usd is None:
            gen.rounds(oracle, deadline, max_iter, progress, stop, bound_to_beat)
        else:
            ascend(gen, oracle, deadline, upper_usd, rel_gap, progress, stop, bound_to_beat)
        return gen.result()
    finally:
        if own:
            oracle.close()


def _columns(data: ScheduleData, p: Point) -> list[Column]:
    return [
        make_column(data, m, p.schedule.config[m], p.schedule.served_rps[m])
        for m in range(len(data.deployments))
    ]


class ColumnGeneration:
    """Column generation's state between rounds: the live master LP with its columns,
    the best bound and its multipliers (the stability centre of the smoothing). Its
    rounds can stop at one deadline and go on at a later one, with another oracle over
    the same grids, from the same columns and duals: nothing is recomputed, and the
    bound never falls (it is the best Lagrangian value seen)."""

    def __init__(
        self,
        data: ScheduleData,
        oracle: DualOracle,
        extra_columns: list[Column] | None = None,
        rel_tol: float = 1e-7,
        smoothing: float = 0.5,
        first: Point | None = None,
        warm: Point | None = None,
    ) -> None:
        self.data = data
        self.rel_tol = rel_tol
        self.alpha = smoothing
        self.t0 = time.perf_counter()
        T, G = data.n_periods, len(data.pools)
        self.master = Master(data)
        zero_pi, zero_sigma = np.zeros(T), np.zeros((G, T))
        high_pi = np.full(T, 1e2 * (float(np.max(data.cost_usd_per_w)) + 1e-6) + 1.0)
        if first is None:
            first = oracle(zero_pi, zero_sigma)
        # the least-power paths (at a price of power above any other cost) let the LP
        # meet the cap without its slack; multipliers found otherwise (``warm``) give
        # paths near the cap instead, one oracle call fewer
        for p in (first, oracle(high_pi, zero_sigma) if warm is None else warm):
            for col in _columns(data, p):
                self.master.add(col)
        for col in extra_columns or []:
            self.master.add(col)
        # at zero prices the bound is the sum of each deployment's uncapped optimum: the
        # bound never falls below it, whatever the LP duals do
        #: the oracle's point at the best multipliers: the best bound and the
        #: smoothing's stability centre
        self.best_point = first
        if warm is not None and warm.value_usd > first.value_usd:
            # the first LP duals are far off: the warm multipliers are the centre
            self.best_point = warm
        self.history = [(time.perf_counter() - self.t0, self.best_lb)]
        self.lp = np.inf
        self.iterations = 0
        self.converged = self.beaten = False
        self.x = np.zeros(0)
        #: the longest round so far (s): a round that must end by a deadline starts
        #: only with this much time left
        self.round_s = 0.0
        #: the volume algorithm's evaluations so far and its state, to go on with
        #: (:func:`ascend`)
        self.volume_evaluations = 0
        self.volume = VolumeState()
        #: the round that last raised the bound (0: none has)
        self.improved_at = 0
        #: the master LP's value (the site's constant included) after each round
        self.lp_history: list[float] = []
        #: the last :meth:`rounds` ended because it stalled (:meth:`stalling`)
        self.stalled = False

    @property
    def best_lb(self) -> float:
        """The best Lagrangian bound seen."""
        return self.best_point.value_usd

    @property
    def best_pi(self) -> FloatArray:
        return self.best_point.pi_w

    @property
    def best_sigma(self) -> FloatArray:
        return self.best_point.sigma_gpu

    def _centre(self, point: Point) -> bool:
        """``point`` becomes the best point when its bound is higher; whether it did."""
        if point.value_usd <= self.best_lb:
            return False
        self.best_point, self.improved_at = point, self.iterations
        self.history.append((time.perf_counter() - self.t0, self.best_lb))
        return True

    def stalling(self, rounds: int, since: int = 0) -> bool:
        """Whether the last ``rounds`` rounds (all after round ``since``) left the bound
        where it was while the master LP fell by less than ``STALL_SHARE`` of its gap
        to the bound: at that pace the LP alone would take more than
        ``rounds / STALL_SHARE`` rounds to meet the bound (tailing off)."""
        if self.iterations - max(self.improved_at, since) < rounds:
            return False
        lp = self.lp_history
        if len(lp) <= rounds:
            return False
        fell = lp[-rounds - 1] - lp[-1]
        return fell < STALL_SHARE * (lp[-1] - self.best_lb)

    def adopt(self, point: Point) -> bool:
        """A point of the dual function evaluated otherwise (the volume algorithm's, on
        the same grids): its paths join the master as columns, and its multipliers
        become the stability centre when its bound is the best. Whether it was."""
        for col in _columns(self.data, point):
            self.master.add(col)
        return self._centre(point)

    def rounds(
        self,
        oracle: DualOracle,
        deadline: Deadline,
        max_iter: int = 500,
        progress: Callable[[str], None] | None = None,
        stop: Callable[[], bool] | None = None,
        bound_to_beat: Callable[[], float] | None = None,
        whole: bool = False,
        stall_rounds: int | None = None,
    ) -> None:
        """Rounds until convergence, ``max_iter`` rounds in all, ``deadline``, ``stop``
        or the master LP falling to ``bound_to_beat()``; with ``stall_rounds``, also
        once that many rounds in a row have left the bound where it was (``stalled``).
        The deadline is checked after each round; with ``whole``, also before: a round
        starts only when the longest so far fits in the time left."""
        data = self.data
        self.beaten = self.stalled = False
        started_at = self.iterations
        while self.iterations < max_iter and not self.converged:
            if stall_rounds is not None and self.stalling(stall_rounds, started_at):
                self.stalled = True
                break
            if whole and deadline.remaining() < max(self.round_s, 1e-9):
                break
            started = time.perf_counter()
            self.iterations += 1
            self.lp, _, pi_lp, sigma_lp, self.x = self.master.solve()
            added = 0
            for attempt in (0, 1):
                if attempt == 0 and np.isfinite(self.best_lb) and self.alpha > 0:
                    a = self.alpha
                    pi = a * self.best_pi + (1 - a) * pi_lp
                    sigma = a * self.best_sigma + (1 - a) * sigma_lp
                elif attempt == 0:
                    continue
                else:
                    pi, sigma = pi_lp, sigma_lp
                point = oracle(pi, sigma)
                new_cols = _columns(data, point)
                self._centre(point)
                added = sum(self.master.add(c) for c in new_cols)
                if added:
                    break
            self.round_s = max(self.round_s, time.perf_counter() - started)
            lp_total = self.lp + site_constant_usd(data)
            self.lp_history.append(lp_total)
            scale = max(abs(lp_total), 1.0)
            if progress is not None:
                progress(
                    f"decomposition: round {self.iterations}, LP {lp_total:.4f}, bound "
                    f"{self.best_lb:.4f}, columns {len(self.master.columns)}"
                )
            if added == 0 or (lp_total - self.best_lb) <= self.rel_tol * scale:
                self.converged = True
                break
            if bound_to_beat is not None and lp_total <= bound_to_beat():
                self.beaten = True
                break
            if deadline.expired() or (stop is not None and stop()):
                break

    def result(self) -> DecompositionResult:
        data, x = self.data, self.x
        T = data.n_periods
        n_slack = self.master.n_slack
        slack = x[:n_slack] if x.size else np.zeros(n_slack)
        weights = np.zeros(len(self.master.columns))
        if x.size:
            weights[: x.size - n_slack] = x[n_slack:]
        cap_slack = [int(t) for t in np.flatnonzero(slack[:T] > 1e-6)]
        inv_slack = [(int(r // T), int(r % T)) for r in np.flatnonzero(slack[T:] > 1e-9)]
        return DecompositionResult(
            lower_bound_usd=float(self.best_lb),
            lp_value_usd=float(self.lp + site_constant_usd(data)),
            columns=list(self.master.columns),
            weights=np.asarray(weights),
            iterations=self.iterations,
            seconds=time.perf_counter() - self.t0,
            converged=self.converged,
            lp_slack_periods=cap_slack,
            lp_inventory_slack=inv_slack,
            history=list(self.history),
            beaten=self.beaten,
            generation=self,
        )


#: column generation hands over to the volume algorithm after this many rounds in a
#: row that leave the bound where it was, while its master LP falls by less than
#: ``STALL_SHARE`` of its gap to the bound over them (:meth:`ColumnGeneration.stalling`,
#: :func:`ascend`)
STALL_ROUNDS = 4
STALL_SHARE = 0.05


def ascend(
    gen: ColumnGeneration,
    oracle: DualOracle,
    deadline: Deadline,
    upper_usd: Callable[[], float],
    rel_gap: float,
    progress: Callable[[str], None] | None = None,
    stop: Callable[[], bool] | None = None,
    bound_to_beat: Callable[[], float] | None = None,
    whole: bool = False,
    on_bound: Callable[[float], None] | None = None,
) -> None:
    """Column generation's rounds (:meth:`ColumnGeneration.rounds`), and, whenever
    they tail off (``STALL_ROUNDS`` of them in a row leave the bound where it was and
    the master LP falls by less than ``STALL_SHARE`` of its gap to it), the volume
    algorithm (:func:`formulation.bounds.lagrange.relax`) from their best multipliers
    towards the incumbent's cost (``upper_usd``), going on with its step factor and
    direction from where its last run stopped, its points handed back to the column
    generation (:meth:`ColumnGeneration.adopt`: columns, and the stability centre
    when better), until ``deadline``, convergence, ``stop``, the gap within
    ``rel_gap`` or the master LP at ``bound_to_beat()``. Once a volume run raises the
    bound no further, the rounds go on without the switch. Every evaluated point is a
    Lagrangian bound on the same grids, so the bound is the best seen whichever method
    found it; ``on_bound`` sees each better one. The volume algorithm's evaluations
    are counted in ``gen.volume_evaluations``.

    Why: on 64 deployments of 100 to 160 GPUs (bench_memory's fleet, a 300 s limit)
    column generation from the periods' cap prices (29,418,160 USD) raised the bound
    by nothing in 72 rounds, its master LP falling by 20 to 600 USD a round from
    29,937,000, while the volume algorithm from the same multipliers reached
    29,696,223 USD in 72 evaluations (docs/performance.md)."""
    switch = True
    while not gen.converged and not deadline.expired() and not (stop is not None and stop()):
        gen.rounds(
            oracle,
            deadline,
            progress=progress,
            stop=stop,
            bound_to_beat=bound_to_beat,
            whole=whole,
            stall_rounds=STALL_ROUNDS if switch else None,
        )
        if on_bound is not None:
            on_bound(gen.best_lb)
        if not gen.stalled or gen.beaten:
            break
        before = gen.best_lb
        if progress is not None:
            progress(
                f"decomposition: bound unchanged for {STALL_ROUNDS} rounds at {before:.4f}, "
                "master LP tailing off: volume algorithm from its multipliers"
            )

        def seen(p: Point) -> None:
            if gen.adopt(p) and on_bound is not None:
                on_bound(p.value_usd)

        calls = oracle.calls
        # an evaluation starts only when one as long as the mean so far fits
        per_call = oracle.seconds / max(oracle.calls, 1)
        until = deadline.later(-per_call) if whole else deadline
        # every best point of the run, its last included, is adopted as ``seen``
        r = relax(
            oracle, until, upper_usd, rel_gap, seen, start=gen.best_point, stop=stop,
            state=gen.volume,
        )
        gen.volume_evaluations += oracle.calls - calls
        if progress is not None:
            progress(
                f"volume algorithm: {r.iterations} evaluations, bound {gen.best_lb:.4f}"
            )
        switch = gen.best_lb > before


@dataclass
class ColumnChoice:
    """One column per deployment chosen by :func:`integer_columns`: their schedule
    (None when HiGHS found none within its time), HiGHS's status and time."""

    schedule: Schedule | None
    status: str
    seconds: float
    columns: int


def integer_columns(
    gen: ColumnGeneration, deadline: Deadline, rel_gap: float, start: Schedule | None = None
) -> ColumnChoice:
    """The restricted master as an integer program: one whole column per deployment
    within the cap and inventories (no slack), least cost, by ``deadline``
    (price-and-branch on the columns). Small however many periods the site has (a
    binary per column, a row per deployment and coupling constraint), so it runs
    beside the master LP in this process. ``start`` (optional, a schedule whose paths
    are columns) is handed to HiGHS as its first solution. Its schedule, if any, meets
    every coupling constraint and transition limit (each column is a deployment's own
    feasible path)."""
    t0 = time.perf_counter()
    m = gen.master
    n_cols = len(m.columns)
    h = quiet_highs()
    h.passModel(m.h.getLp())
    n_slack = m.n_slack
    if n_slack:
        idx = np.arange(n_slack, dtype=np.int32)
        h.changeColsBounds(n_slack, idx, np.zeros(n_slack), np.zeros(n_slack))
    real = np.arange(n_slack, n_slack + n_cols, dtype=np.int32)
    h.changeColsIntegrality(
        n_cols, real, np.full(n_cols, highspy.HighsVarType.kInteger, dtype=np.uint8)
    )
    h.setOptionValue("mip_rel_gap", rel_gap)
    h.setOptionValue("time_limit", max(deadline.remaining(), 0.01))
    if start is not None:
        x0 = np.zeros(n_slack + n_cols)
        for j, col in enumerate(m.columns):
            if np.array_equal(col.config, start.config[col.deployment]) and np.allclose(
                col.served_rps, start.served_rps[col.deployment], rtol=0, atol=1e-9
            ):
                x0[n_slack + j] = 1.0
        sol = highspy.HighsSolution()
        sol.col_value = x0.tolist()
        sol.value_valid = True
        h.setSolution(sol)
    h.run()
    status = h.modelStatusToString(h.getModelStatus())
    seconds = time.perf_counter() - t0
    if h.getInfo().primal_solution_status != 2:  # kSolutionStatusFeasible
        return ColumnChoice(None, status, seconds, n_cols)
    x = np.asarray(h.getSolution().col_value)[n_slack:]
    chosen: list[Column | None] = [None] * m.M
    for i in np.flatnonzero(x > 0.5):
        col = m.columns[int(i)]
        chosen[col.deployment] = col
    if any(c is None for c in chosen):
        return ColumnChoice(None, status, seconds, n_cols)
    return ColumnChoice(
        schedule_of_columns(gen.data, [c for c in chosen if c is not None]),
        status,
        seconds,
        n_cols,
    )


def schedule_of_columns(data: ScheduleData, cols: list[Column]) -> Schedule:
    cfg = np.stack([c.config for c in cols])
    served = np.stack([c.served_rps for c in cols])
    return Schedule(cfg, served)
