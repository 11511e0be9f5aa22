"""Decisions against measured disaggregated deployments (docs/decisions-silicon.md).

For each group of disaggregated rows of a measured-results file (same model, GPU,
framework, precision, prompt and output length) with at least :data:`MIN_CONFIGS`
configurations (prefill workers and shape, decode workers and shape), an operator with a
TPOT target ``T`` wants the configuration with the most throughput per GPU among those
that meet ``T``. Here ``T`` is the group's best measured TPOT: the TPOT of the row with
the most throughput per GPU in the group, so that the measured best meets it.

* **Measured** throughput of a row, a closed loop of ``C`` clients, is ``C / (TTFT +
  (osl - 1) TPOT)`` requests per second; per GPU, over the row's ``x G_P + y G_D`` GPUs.
  A configuration's measured best within ``T`` is the most of its rows whose TPOT is
  within ``T`` (0 if none is).
* **pdwatt** ranks the configurations by their capacity under the TPOT target
  (:func:`model.queueing.targets.evaluate_targets`, docs/admission.md, section 8) per GPU, each
  at its own per-phase shapes (docs/shapes.md) and, where its run drafted with MTP, its
  draft depth (``serving.mtp_draft_tokens``, measured kernels only), and picks the
  first.

The pick is judged by its *measured* throughput per GPU within ``T`` against the
group's measured best: the advice is right when it is within 10%.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from model.errors import InputError
from model.latency_targets import LatencyTargets
from model.measured.silicon import SiliconRow, published_config, records_by_run, run_draft
from model.queueing.targets import evaluate_targets
from model.shapes import InstanceShape
from model.spec import DeploymentSpec

#: configurations a group needs to be judged
MIN_CONFIGS = 5
#: the pick is right when its measured throughput per GPU is within this share of the best
TOLERANCE = 0.10


@dataclass(frozen=True)
class Config:
    """A disaggregated configuration: ``n_p`` prefill and ``n_d`` decode instances of
    the given shapes, the decode instances drafting ``draft`` tokens per iteration with
    the model's MTP module (0: none)."""

    n_p: int
    prefill: InstanceShape
    n_d: int
    decode: InstanceShape
    draft: int = 0

    @property
    def gpus(self) -> int:
        return self.n_p * self.prefill.gpus + self.n_d * self.decode.gpus

    @property
    def text(self) -> str:
        mtp = f", MTP {self.draft}" if self.draft else ""
        return f"{self.n_p}P{self.n_d}D ({self.prefill.text} / {self.decode.text}{mtp})"


def config_of(row: SiliconRow, draft: int = 0) -> Config | str:
    """The row's configuration, or why it is not one pdwatt can express. A row that
    gives no worker counts takes the configuration published for its run
    (:func:`model.measured.silicon.published_config`), as the validation does. ``draft``: the
    tokens its decode instances draft per iteration (MTP), where the run's record or its
    twin's says so (:func:`drafts_of`)."""
    if row.mode != "disagg" or row.prefill is None or row.decode is None:
        return "not a disaggregated row"
    if row.prefill.workers is None or row.decode.workers is None:
        published = published_config(row)
        if isinstance(published, str):
            return published
        if published is not None:
            row = published[0]
    assert row.prefill is not None and row.decode is not None
    shapes = []
    for name, p in (("prefill", row.prefill), ("decode", row.decode)):
        if p.workers is None:
            return f"no {name}_num_workers"
        if p.pp != 1:
            return f"{name} pipeline parallelism {p.pp}: not expressed"
        shapes.append(InstanceShape(p.tp, p.dp, p.moe_ep))
    return Config(row.prefill.workers or 0, shapes[0], row.decode.workers or 0, shapes[1], draft)


def drafts_of(rows: Sequence[SiliconRow]) -> dict[str, int]:
    """Row id -> the MTP draft depth its run used, by its own published record or by
    that of a twin, the same run recorded twice (:func:`model.measured.silicon.run_draft`, as
    the validation reads it); rows of runs without MTP are not listed."""
    out: dict[str, int] = {}
    for run in records_by_run(rows).values():
        for r in run:
            if (d := run_draft(r, [t for t in run if t is not r])) is not None:
                out[r.id] = d[0]
    return out


def measured_rps_per_gpu(row: SiliconRow, config: Config) -> float:
    """The closed loop's throughput per GPU: ``C / (TTFT + (osl - 1) TPOT) / GPUs``."""
    assert row.concurrency is not None
    e2e_s = (row.ttft_ms + (row.osl - 1) * row.tpot_ms) / 1e3
    return row.concurrency / e2e_s / config.gpus


@dataclass(frozen=True)
class Choice:
    """One configuration of a group: what was measured and what pdwatt predicts."""

    config: Config
    measured_best: float  # req/s per GPU within the target (0: no row meets it)
    rows: int
    predicted: float | None  # pdwatt's capacity under the target per GPU (None: refused)
    reason: str | None = None


@dataclass(frozen=True)
class Group:
    key: tuple[str, str, str, str, int, int]  # model, system, backend, precision, isl, osl
    tpot_target_s: float
    choices: tuple[Choice, ...]

    @property
    def best(self) -> Choice:
        return max(self.choices, key=lambda c: c.measured_best)

    @property
    def pick(self) -> Choice | None:
        ranked = [c for c in self.choices if c.predicted is not None]
        return max(ranked, key=lambda c: c.predicted or 0.0) if ranked else None

    @property
    def ratio(self) -> float | None:
        """The pick's measured throughput per GPU over the best's (None: no pick)."""
        pick, best = self.pick, self.best
        if pick is None or best.measured_best <= 0:
            return None
        return pick.measured_best / best.measured_best


def groups_of(rows: Sequence[SiliconRow]) -> list[tuple[tuple, list[tuple[SiliconRow, Config]]]]:
    """The disaggregated rows grouped by model, GPU, framework, precision and lengths,
    with their configurations; groups of at least :data:`MIN_CONFIGS` configurations,
    largest first. Rows without a configuration or a concurrency are left out."""
    out: dict[tuple, list[tuple[SiliconRow, Config]]] = {}
    drafts = drafts_of(rows)
    for r in rows:
        cfg = config_of(r, drafts.get(r.id, 0))
        if isinstance(cfg, str) or r.concurrency is None:
            continue
        key = (r.model_path, r.system, r.backend, r.precision, r.isl, r.osl)
        out.setdefault(key, []).append((r, cfg))
    big = [(k, v) for k, v in out.items() if len({c for _, c in v}) >= MIN_CONFIGS]
    return sorted(big, key=lambda kv: (-len({c for _, c in kv[1]}), kv[0]))


def judge(
    key: tuple,
    members: Sequence[tuple[SiliconRow, Config]],
    predict: Callable[[Config, LatencyTargets], float],
) -> Group:
    """The group's choices under the TPOT target (the TPOT of the group's row with the
    most measured throughput per GPU); ``predict(config, targets)`` is pdwatt's capacity
    per GPU of a configuration under the targets (an InputError is the configuration's
    reason for no prediction; :func:`capacity_per_gpu` with the deployment at its
    shapes)."""
    top = max(members, key=lambda m: measured_rps_per_gpu(*m))
    target = top[0].tpot_ms / 1e3
    goals = LatencyTargets(tpot_p99_s=target)
    by_config: dict[Config, list[SiliconRow]] = {}
    for r, c in members:
        by_config.setdefault(c, []).append(r)
    choices = []
    for c, rs in by_config.items():
        within = [measured_rps_per_gpu(r, c) for r in rs if r.tpot_ms / 1e3 <= target]
        best = max(within, default=0.0)
        try:
            predicted, reason = predict(c, goals), None
        except InputError as e:
            predicted, reason = None, str(e)
        choices.append(Choice(c, best, len(rs), predicted, reason))
    return Group(key, target, tuple(choices))


def capacity_per_gpu(spec: DeploymentSpec, config: Config, goals: LatencyTargets) -> float:
    """pdwatt's capacity of ``config`` under ``goals`` (docs/admission.md, section 8) per
    GPU, ``spec`` the deployment at the configuration's shapes."""
    r = evaluate_targets(spec, [config.n_p], [config.n_d], goals)
    return float(r.capacity_rps[0]) / config.gpus
