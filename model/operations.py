"""The core's user-level operations, as JSON-able reports (SPEC 6.1).

The CLI and the HTTP service both call these, so that ``pdwatt capacity --json``
and ``POST /v1/capacity`` give the same document.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from model.capacity import Coefficients, candidate_configs, evaluate, settings_record
from model.catalog import (
    Calibration,
    ServingStack,
    apply_overrides,
    load_calibration,
    load_gpu,
    load_model,
)
from model.clocks import named_settings
from model.errors import DoesNotFitError, InputError, NotFoundError
from model.pareto import front_indices, max_capacity_index, min_power_index
from model.performance.engine import (
    NO_KERNEL_PACKAGE,
    EngineCalibration,
    KernelSource,
    choose_version,
    database_label,
    gpu_folder,
    installed_kernels,
    open_database,
    shipped_calibration,
)
from model.performance.interconnect import kv_link
from model.performance.speculative import model_accepted_tokens, speculative_record
from model.queueing.targets import evaluate_spec
from model.shapes import check_shape, parse_shape
from model.spec import (
    DEFAULT_FRAMEWORK,
    DEFAULT_PERFORMANCE,
    DEFAULT_VARIANT,
    DeploymentSpec,
    check_framework,
    check_performance,
    setting_arg,
    with_settings,
)
from model.workload import Workload, parse_workload

SECTIONS = ("model", "gpu", "calibration", "serving")

#: the deployment a request that names none describes: the one source of these
#: defaults for the HTTP API's schemas and the command line's options
DEFAULT_MODEL = "qwen3-32b"
DEFAULT_GPU = "h200"
DEFAULT_WORKLOAD = "azure-conv-2023"


@dataclass(frozen=True)
class SpecRequest:
    """Names plus per-section overrides, as a user gives them."""

    model: str = DEFAULT_MODEL
    gpu: str = DEFAULT_GPU
    workload: str = DEFAULT_WORKLOAD
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    moments: Mapping[str, Any] | None = None  # explicit workload moments (replace `workload`)
    read_files: bool = False  # resolve `trace:`/`moments:` file forms (the CLI only)
    #: a calibration to start from instead of the catalog's (a fitted file's entry);
    #: the ``calibration`` overrides still apply on top
    calibration: Calibration | None = None
    #: the memory balance (model.spec.MODEL_VARIANTS)
    model_variant: str = DEFAULT_VARIANT
    #: where the times come from (model.spec.PERFORMANCE_SOURCES)
    performance: str = DEFAULT_PERFORMANCE
    #: ``kernels``: the serving framework of the tables (default ``vllm``)
    framework: str | None = None
    #: ``kernels``: the kernel database folder, chosen by whoever runs the core (the
    #: command line's ``--kernels``, a server's setting), never by a request; unused under
    #: ``spec``
    kernels: str | None = None
    #: ``kernels``: the tables' version per catalog GPU (default: the engine
    #: calibration's, ``EngineCalibration.version``)
    kernel_versions: Mapping[str, str] = field(default_factory=dict)
    #: ``kernels``: the engine's overheads (default: the shipped calibration of the GPU
    #: and framework)
    engine: EngineCalibration | None = None
    #: each phase's GPU where it is not ``gpu`` (docs/mixed-gpus.md); the ``gpu`` and
    #: ``calibration`` overrides apply to both
    prefill_gpu: str | None = None
    decode_gpu: str | None = None
    #: the link between the phases (model.performance.interconnect.INTERCONNECTS) and its bandwidth
    #: per GPU and direction (GB/s); neither: a mixed pair's default, none for one type
    interconnect: str | None = None
    interconnect_gb_per_s: float | None = None


def kernel_database(folder: str, field_name: str = "kernels") -> str:
    """``folder`` if it holds kernel tables in AIConfigurator's layout; else an input
    error naming ``field_name``."""
    try:
        db = open_database(folder)
    except InputError as e:
        raise InputError(field_name, e.reason) from None
    if not db.refs:
        raise InputError(
            field_name,
            f"{folder!r} is not a kernel database: it holds no tables laid out as "
            "<gpu>/<op>/<framework>/<version>/<kind>_perf.parquet",
        )
    return folder


def kernel_versions_of(folder: str, gpu: str, framework: str) -> list[str]:
    """The versions of ``framework``'s GEMM tables for catalog GPU ``gpu`` in ``folder``."""
    db = open_database(folder)
    return sorted(v for f, v in db.versions(gpu_folder(gpu), "gemm") if f == framework)


def _kernel_inputs(
    req: SpecRequest, gpu: str
) -> tuple[KernelSource | None, EngineCalibration | None]:
    """The kernel source and engine calibration of a request (both None under ``spec``,
    where a framework, a version or overheads are errors: nothing given is ignored)."""
    performance = check_performance(req.performance)
    if performance == "spec":
        for name, given in (
            ("framework", req.framework is not None),
            ("kernel_versions", bool(req.kernel_versions)),
            ("engine", req.engine is not None),
        ):
            if given:
                raise InputError(name, "only used with performance 'kernels'")
        return None, None
    folder = req.kernels or installed_kernels()
    if not folder:
        raise InputError("performance", f"'kernels' needs kernel tables: {NO_KERNEL_PACKAGE}")
    framework = check_framework(req.framework or DEFAULT_FRAMEWORK)
    engine = req.engine or shipped_calibration(gpu, framework)
    version, notes = choose_version(
        folder, gpu, framework, req.kernel_versions.get(gpu), engine.version
    )
    return KernelSource(folder, framework, ((gpu, version),), notes), engine


def resolve_spec(req: SpecRequest) -> DeploymentSpec:
    """Catalog entries by name, then the user's overrides (unknown fields are errors)."""
    unknown = set(req.overrides) - set(SECTIONS)
    if unknown:
        raise InputError(
            "overrides", f"unknown section(s) {sorted(unknown)}; known: {', '.join(SECTIONS)}"
        )
    ov = req.overrides
    model = apply_overrides(load_model(req.model), ov.get("model", {}), "model")
    decode_name = _phase_gpu(req.decode_gpu, req.gpu, "decode_gpu")
    prefill_name = _phase_gpu(req.prefill_gpu, req.gpu, "prefill_gpu")
    gpu = apply_overrides(load_gpu(decode_name), ov.get("gpu", {}), "gpu")
    cal = req.calibration or load_calibration(req.model, decode_name)
    if ov.get("calibration"):
        cal = apply_overrides(cal, ov["calibration"], "calibration")
    prefill_gpu, prefill_cal = None, None
    if prefill_name != decode_name:
        prefill_gpu = apply_overrides(load_gpu(prefill_name), ov.get("gpu", {}), "gpu")
        prefill_cal = load_calibration(req.model, prefill_name)
        if ov.get("calibration"):
            prefill_cal = apply_overrides(prefill_cal, ov["calibration"], "calibration")
    link = kv_link(req.interconnect, req.interconnect_gb_per_s, prefill_name != decode_name)
    serving = apply_overrides(ServingStack(), ov.get("serving", {}), "serving")
    if req.moments is not None:
        try:
            workload = Workload.from_dict(req.moments)
        except InputError as e:  # a field of the request's moments
            raise InputError(f"moments.{e.field}", e.reason) from None
    else:
        workload = parse_workload(req.workload, read_files=req.read_files)
    source, engine = _kernel_inputs(req, gpu.name)
    return DeploymentSpec(
        model,
        gpu,
        cal,
        workload,
        serving,
        req.model_variant,
        performance=req.performance,
        kernel_source=source,
        engine=engine,
        prefill_gpu=prefill_gpu,
        prefill_calibration=prefill_cal,
        kv_link=link,
    )


def _phase_gpu(name: str | None, default: str, field_name: str) -> str:
    """The catalog name of a phase's GPU (``default`` when it names none); an unknown
    name is an error naming ``field_name``."""
    if name is None:
        return load_gpu(default).name
    try:
        return load_gpu(name).name
    except NotFoundError as e:
        raise NotFoundError(field_name, e.name, e.known) from None


def _form(form: Any, names: tuple[str, str]) -> dict[str, Any]:
    a, b = form.coefficients
    return {
        names[0]: a,
        names[1]: b,
        "points": form.points,
        "worst_deviation": form.worst_deviation,
    }


def performance_report(spec: DeploymentSpec, c: Coefficients) -> dict[str, Any]:
    """Where a deployment's times come from: ``spec`` (SPEC 2.2-2.3's rooflines with the
    calibration) or ``kernels``, with the tables (the folder's name only, framework,
    version), the engine calibration and the two forms with their worst relative
    deviation from the composed times; and the power model, the calibration's ramps in
    both cases."""
    out: dict[str, Any] = {"source": spec.performance}
    src, eng, forms = spec.kernel_source, spec.engine, c.forms
    if src is not None and eng is not None and forms is not None:
        out["kernels"] = {
            "folder": database_label(src.folder),
            "framework": src.framework,
            "gpu": spec.gpu.name,
            "version": src.version(spec.gpu.name),
        }
        notes = [*src.notes, *forms.substitutions]
        if notes:
            out["kernels"]["notes"] = notes
        out["engine_calibration"] = {**eng.describe(), **eng.overheads.as_dict()}
        out["decode_line"] = {
            "context_tokens": forms.context_tokens,
            "batch_from": forms.decode.domain[0],
            "batch_to": forms.decode.domain[1],
            **_form(forms.decode, ("alpha_s", "g_s_per_request")),
        }
        out["prefill_curve"] = {
            "longest_prompt_tokens": forms.longest_prompt_tokens,
            "attention_fitted_from": forms.prefill.domain[0],
            "attention_fitted_to": forms.prefill.domain[1],
            "extends_beyond_measured": forms.prefill.extends_beyond,
            **_form(forms.prefill, ("a_p_s_per_token", "b_p_s_per_token2")),
        }
    out["power"] = "the calibration's ramps (SPEC 2.6)"
    return out


def _context(spec: DeploymentSpec, overridden: bool, c: Coefficients) -> dict[str, Any]:
    cal = spec.calibration
    out: dict[str, Any] = {
        "model": spec.model.name,
        "gpu": spec.gpu.name,
        "workload": spec.workload.name,
        "model_variant": spec.variant,
        "calibration": {
            "measured": bool(cal.measured),
            "overridden": overridden,
            "source": cal.source,
        },
        "performance": performance_report(spec, c),
    }
    return out | phase_gpus_record(spec)


def phase_gpus_record(spec: DeploymentSpec) -> dict[str, Any]:
    """What an output adds for a deployment whose phases run on two GPU types, or whose
    KV transfer is charged: each phase's GPU and the link (nothing otherwise, the
    document as before)."""
    out: dict[str, Any] = {}
    if spec.mixed:
        out["prefill_gpu"] = spec.prefill_hw.name
        out["decode_gpu"] = spec.gpu.name
        out["prefill_calibration"] = {
            "measured": bool(spec.prefill_cal.measured),
            "source": spec.prefill_cal.source,
        }
    if spec.kv_link is not None:
        out |= spec.kv_link.record()
    return out


def instance_gpus(spec: DeploymentSpec) -> tuple[int, int]:
    """GPUs per prefill and per decode instance (their shapes' ``tp x dp``)."""
    prefill, decode = spec.serving.shapes()
    return prefill.gpus, decode.gpus


def capacity_report(
    spec: DeploymentSpec,
    n_p: int,
    n_d: int,
    load_rps: float | None = None,
    overridden: bool = False,
) -> dict[str, Any]:
    """``pdwatt capacity``: one configuration (SPEC 6.1 keys plus context)."""
    for name, v in (("n_p", n_p), ("n_d", n_d)):
        if int(v) != v or v < 0:
            raise InputError(name, "must be an integer >= 0")
    if n_p == 0 and n_d == 0:  # nothing to report: no capacity, power or bottleneck
        raise InputError("n_p", "n_p and n_d are both 0: a configuration needs instances")
    if load_rps is not None and (not np.isfinite(load_rps) or load_rps < 0):
        raise InputError("load", "must be finite and >= 0")
    r = evaluate_spec(spec, [n_p], [n_d], None if load_rps is None else [load_rps])
    out = r.record(0)
    if load_rps is not None and load_rps > out["load_rps"]:  # served at most at capacity
        out["requested_load_rps"] = float(load_rps)  # (SPEC 2.6): what was asked, and
        out["unserved_rps"] = float(load_rps) - out["load_rps"]  # what is not served
    if spec.targets.given:
        out["latency_targets"] = spec.targets.record()
    draft = spec.serving.mtp_draft_tokens
    if draft:  # the decode times are per token gained (model.performance.engine.KernelTimes)
        out["speculative"] = speculative_record(draft, model_accepted_tokens(spec.model, draft))
    out.update(_context(spec, overridden, r.coefficients))
    return out


def front_settings(
    spec: DeploymentSpec,
    prefill_settings: Sequence[str] | None,
    decode_settings: Sequence[str] | None,
) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The settings a front searches per phase, each checked against the deployment's
    GPU (an input error names ``prefill_settings[j]`` or ``decode_settings[j]``) and
    written as :mod:`model.clocks` writes them (the full clock, also for ``default``, as
    the GPU's full clock; repeats dropped, order kept); a phase given none searches the
    full clock only. None when neither phase is given: the front of today."""
    if prefill_settings is None and decode_settings is None:
        return None
    clocks = spec.gpu_clocks()
    lists = []
    for phase, texts in (("prefill", prefill_settings), ("decode", decode_settings)):
        field_name = f"{phase}_settings"
        if texts is not None and len(texts) == 0:
            raise InputError(field_name, "give at least one setting (or leave it out)")
        names = named_settings(texts or ("default",), clocks, field_name)
        if clocks is None:  # only the default, on a GPU without clock data
            raise InputError(field_name, "this GPU has no clock data in the catalog")
        lists.append(names)
    return lists[0], lists[1]


class FrontQuestion(Protocol):
    """What a front is asked for: ``pdwatt front``'s options, the HTTP front request."""

    @property
    def max_gpus(self) -> int: ...
    @property
    def required_rps(self) -> float | None: ...
    @property
    def headroom(self) -> float: ...
    @property
    def budget_w(self) -> float | None: ...
    @property
    def prefill_settings(self) -> Sequence[str] | None: ...
    @property
    def decode_settings(self) -> Sequence[str] | None: ...
    @property
    def prefill_shapes(self) -> Sequence[str] | None: ...
    @property
    def decode_shapes(self) -> Sequence[str] | None: ...
    @property
    def mtp_draft_tokens(self) -> Sequence[int] | None: ...


def front_of(spec: DeploymentSpec, q: FrontQuestion, overridden: bool) -> dict[str, Any]:
    """:func:`front_report` of ``q`` (latency targets, if it has them, restrict it
    afterwards, each configuration at its own settings: :mod:`model.queueing.slo`)."""
    return front_report(
        spec,
        q.max_gpus,
        q.required_rps,
        q.headroom,
        q.budget_w,
        overridden=overridden,
        prefill_settings=q.prefill_settings,
        decode_settings=q.decode_settings,
    )


def front_report(
    spec: DeploymentSpec,
    max_gpus: int = 16,
    required_rps: float | None = None,
    headroom: float = 1.0,
    budget_w: float | None = None,
    overridden: bool = False,
    prefill_settings: Sequence[str] | None = None,
    decode_settings: Sequence[str] | None = None,
) -> dict[str, Any]:
    """``pdwatt front``: every candidate, the Pareto front by capacity, and selections.

    With ``prefill_settings`` and/or ``decode_settings`` (docs/clocks.md), a candidate is
    ``(n_P, n_D, setting_P, setting_D)`` for every pair of the listed settings (pairs
    in listed order, prefill outer), each configuration named by its settings, and the
    front and the selections search them all; without, the report is today's."""
    if int(max_gpus) != max_gpus or max_gpus < 2:
        raise InputError("max_gpus", "must be an integer >= 2")
    if max_gpus > 4096:
        raise InputError("max_gpus", "must be <= 4096")
    lists = front_settings(spec, prefill_settings, decode_settings)
    n_p, n_d = candidate_configs(int(max_gpus), *instance_gpus(spec))
    if lists is None:
        r = evaluate(spec, n_p, n_d)
        coefficients = r.coefficients
        configs = [r.record(i) for i in range(len(r))]
        mu, power, gpus = r.capacity_rps, r.power_w, r.gpus
    else:
        configs, results = [], []
        for pair in ((a, b) for a in lists[0] for b in lists[1]):
            at = with_settings(spec, setting_arg(pair[0], spec), setting_arg(pair[1], spec))
            r = evaluate(at, n_p, n_d)
            # the settings, each phase's effective clock and draw per GPU at capacity,
            # as `pdwatt capacity` names them (a pair at the full clock included)
            named = settings_record(with_settings(spec, *pair))
            configs.extend(r.record(i) | named for i in range(len(r)))
            results.append(r)
        coefficients = results[0].coefficients
        mu = np.concatenate([r.capacity_rps for r in results])
        power = np.concatenate([r.power_w for r in results])
        gpus = np.concatenate([r.gpus for r in results])
    front = front_indices(mu, power)
    out: dict[str, Any] = _context(spec, overridden, coefficients)
    if lists is not None:
        out["prefill_settings"], out["decode_settings"] = list(lists[0]), list(lists[1])
    out.update(
        {
            "max_gpus": int(max_gpus),
            "configs": configs,
            "front": [configs[i] for i in front],
        }
    )
    on_front = [configs[i] for i in front]
    out |= selections(
        on_front, mu[front], power[front], gpus[front], required_rps, headroom, budget_w
    )
    return out


def selections(
    on_front: Sequence[dict[str, Any]],
    mu: ArrayLike,
    power: ArrayLike,
    gpus: ArrayLike,
    required_rps: float | None,
    headroom: float,
    budget_w: float | None,
) -> dict[str, Any]:
    """A front's selections: ``min_power_for_rate`` (given a rate) and
    ``max_capacity_under_budget`` (given a budget), each naming its configuration of
    ``on_front`` (capacities ``mu``, powers ``power``, GPUs ``gpus``) or None."""
    out: dict[str, Any] = {}
    if required_rps is not None:
        i = min_power_index(mu, power, required_rps, headroom, np.asarray(gpus, float))
        out["min_power_for_rate"] = {
            "required_rps": required_rps,
            "headroom": headroom,
            "config": None if i is None else on_front[i],
        }
    if budget_w is not None:
        i = max_capacity_index(mu, power, budget_w)
        out["max_capacity_under_budget"] = {
            "budget_w": budget_w,
            "config": None if i is None else on_front[i],
        }
    return out


# -- a front over instance shapes (docs/shapes.md, "The front over shapes") ---------------

#: the largest instance ``auto`` proposes (one NVLink node of 8 GPUs)
AUTO_INSTANCE_GPUS = 8
#: counts of a restricted front's ``slo`` that add up over shape pairs
_SLO_COUNTS = ("checked", "simulated", "meeting", "failing", "batch_capped", "unmet")


def auto_shapes(spec: DeploymentSpec, max_gpus: int) -> list[str]:
    """The shapes ``auto`` searches for a phase: ``tp<G>`` for G = 1, 2, 4, 8 dividing the
    attention heads, and, for a mixture of experts, ``tp<G>,ep<G>`` (experts spread over
    the instance) and ``tp1,dp<G>,ep<G>`` (attention replicated, experts spread), where
    ``ep`` divides the experts; each at most :data:`AUTO_INSTANCE_GPUS` GPUs and leaving
    one GPU for the other phase."""
    m = spec.model
    out = []
    for g in (1, 2, 4, 8):
        if g > min(AUTO_INSTANCE_GPUS, max_gpus - 1):
            break
        if m.n_heads % g == 0:
            out.append(f"tp{g}")
        if g > 1 and m.experts and m.experts % g == 0:
            if m.n_heads % g == 0:
                out.append(f"tp{g},ep{g}")
            out.append(f"tp1,dp{g},ep{g}")
    return out


def shape_lists(
    spec: DeploymentSpec,
    prefill_shapes: Sequence[str] | None,
    decode_shapes: Sequence[str] | None,
    max_gpus: int,
) -> tuple[list[str], list[str]] | None:
    """The shapes a front searches per phase (``["auto"]``: :func:`auto_shapes`; a phase
    given none keeps the deployment's own), each checked against the model and written
    as :class:`model.shapes.InstanceShape` writes it (repeats dropped, order kept); None
    when neither phase is given. An input error names ``prefill_shapes[j]``."""
    if prefill_shapes is None and decode_shapes is None:
        return None
    own = spec.serving.shapes()
    lists = []
    for phase, texts, mine in (
        ("prefill", prefill_shapes, own[0]),
        ("decode", decode_shapes, own[1]),
    ):
        name = f"{phase}_shapes"
        if texts is not None and len(texts) == 0:
            raise InputError(name, "give at least one shape (or leave it out)")
        if texts is not None and list(texts) == ["auto"]:
            texts = auto_shapes(spec, max_gpus)
        found: dict[str, None] = {}
        for j, text in enumerate(texts or [mine.text]):
            shape = parse_shape(text, f"{name}[{j}]")
            check_shape(shape, f"{name}[{j}]", spec.model.n_heads, spec.model.experts)
            found[shape.text] = None
        lists.append(list(found))
    return lists[0], lists[1]


def with_shapes(spec: DeploymentSpec, prefill: str, decode: str) -> DeploymentSpec:
    """``spec`` with its phases' instance shapes."""
    serving = replace(spec.serving, prefill_shape=prefill, decode_shape=decode)
    return replace(spec, serving=serving)


def with_drafts(
    spec: DeploymentSpec, draft: int, field: str = "mtp_draft_tokens"
) -> DeploymentSpec:
    """``spec`` with its decode instances drafting ``draft`` tokens per iteration (MTP,
    :mod:`model.performance.speculative`); an input error names ``field``."""
    try:
        return replace(spec, serving=replace(spec.serving, mtp_draft_tokens=draft))
    except InputError as e:
        raise InputError(field, e.reason) from None


def draft_list(spec: DeploymentSpec, drafts: Sequence[int] | None) -> list[int] | None:
    """The MTP draft depths a front searches, each checked (an input error names
    ``mtp_draft_tokens[j]``; repeats dropped, order kept); None when none is given."""
    if drafts is None:
        return None
    if len(drafts) == 0:
        raise InputError("mtp_draft_tokens", "give at least one depth (or leave it out)")
    found: dict[int, None] = {}
    for j, d in enumerate(drafts):
        with_drafts(spec, d, f"mtp_draft_tokens[{j}]")
        found[d] = None
    return list(found)


def front_over_shapes(
    spec: DeploymentSpec,
    q: FrontQuestion,
    overridden: bool,
    restrict: Callable[[dict[str, Any], DeploymentSpec], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """:func:`front_of`, or, when ``q`` lists shapes per phase (``prefill_shapes``,
    ``decode_shapes``) or MTP draft depths (``mtp_draft_tokens``), the front over every
    pair of shapes at every depth: each one's front (restricted by ``restrict(report,
    spec_at_it)``, e.g. to latency targets) with each configuration naming its
    ``prefill_shape`` and ``decode_shape`` and its ``mtp_draft_tokens`` where those are
    searched, then the front and the selections over all of them. The front of the
    union is the front of the parts' fronts (a point no other part's front dominates).
    Parts whose instances exceed ``max_gpus`` together, or whose weights do not fit, are
    listed with the reason (``shapes_skipped``)."""
    done = restrict or (lambda report, _at: report)
    lists = shape_lists(
        spec,
        getattr(q, "prefill_shapes", None),
        getattr(q, "decode_shapes", None),
        q.max_gpus,
    )
    drafts = draft_list(spec, getattr(q, "mtp_draft_tokens", None))
    if lists is None and drafts is None:
        return done(front_of(spec, q, overridden), spec)
    own = spec.serving.shapes()
    pairs = [(a, b) for a in lists[0] for b in lists[1]] if lists else [(own[0].text, own[1].text)]

    def at_shapes(ps: str, ds: str, d: int | None) -> dict[str, Any]:
        at = with_shapes(spec, ps, ds) if lists else spec
        at = with_drafts(at, d) if d is not None else at
        return done(front_of(at, q, overridden), at)

    def named(a: str, b: str, d: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {"prefill_shape": a, "decode_shape": b} if lists else {}
        return out | ({"mtp_draft_tokens": d} if d is not None else {})

    parts, skipped = _pair_fronts(
        (named(a, b, d), partial(at_shapes, a, b, d))
        for a, b in pairs
        for d in (drafts if drafts is not None else [None])
    )
    if not parts:
        what = "shape pair" if lists else "depth"
        raise InputError(
            "max_gpus",
            f"no {what} fits {q.max_gpus} GPUs: " + "; ".join(x["reason"] for x in skipped),
        )
    return _merged(parts, lists, drafts, skipped, q)


def _merged(
    parts: list[dict[str, Any]],
    lists: tuple[list[str], list[str]] | None,
    drafts: list[int] | None,
    skipped: list[dict[str, Any]],
    q: FrontQuestion,
) -> dict[str, Any]:
    out = _union(parts, q)
    if lists is not None:
        out["prefill_shapes"], out["decode_shapes"] = lists
    if drafts is not None:
        out["mtp_draft_tokens"] = drafts
    out["shapes_skipped"] = skipped
    return out


def gpu_pair_specs(req: SpecRequest, gpus: Sequence[str]) -> dict[tuple[str, str], SpecRequest]:
    """The requests of a front over GPU types (docs/mixed-gpus.md): ``req`` with each
    phase on each of ``gpus`` (catalog names; prefill outer, in listed order, repeats
    dropped). An unknown name is an error naming ``gpus[j]``."""
    if len(gpus) == 0:
        raise InputError("gpus", "give at least one GPU type (or leave it out)")
    names: dict[str, None] = {}
    for j, name in enumerate(gpus):
        names[_phase_gpu(name, name, f"gpus[{j}]")] = None
    return {
        (pg, dg): replace(req, gpu=dg, prefill_gpu=pg, decode_gpu=dg)
        for pg in names
        for dg in names
    }


def front_over_gpus(
    requests: Mapping[tuple[str, str], SpecRequest],
    q: FrontQuestion,
    overridden: bool,
    restrict: Callable[[dict[str, Any], DeploymentSpec], dict[str, Any]] | None = None,
    prepare: Callable[[DeploymentSpec], DeploymentSpec] | None = None,
) -> dict[str, Any]:
    """:func:`front_over_shapes` of each GPU pair's deployment (``requests``: the pair's
    request, :func:`gpu_pair_specs`; ``prepare``: what the caller adds to each resolved
    spec), each configuration naming its ``prefill_gpu`` and ``decode_gpu``, then the
    front and the selections over all of them (the front of the pairs' fronts). Pairs
    whose weights do not fit, or whose instances exceed ``max_gpus``, are listed with
    the reason (``gpus_skipped``)."""

    def at_pair(req: SpecRequest) -> dict[str, Any]:
        at = resolve_spec(req)
        if prepare is not None:
            at = prepare(at)
        return front_over_shapes(at, q, overridden, restrict)

    parts, skipped = _pair_fronts(
        ({"prefill_gpu": pg, "decode_gpu": dg}, partial(at_pair, req))
        for (pg, dg), req in requests.items()
    )
    if not parts:
        raise InputError(
            "gpus", "no GPU pair fits: " + "; ".join(x["reason"] for x in skipped)
        )
    out = _union(parts, q)
    for key in ("prefill_gpu", "decode_gpu", "prefill_calibration", "interconnect",
                "interconnect_gb_per_s"):  # fmt: skip
        out.pop(key, None)  # each configuration names its own
    out["gpu"] = ",".join(dict.fromkeys(g for pair in requests for g in pair))
    out["gpu_pairs"] = [list(pair) for pair in requests]
    out["gpus_skipped"] = skipped
    return out


def _pair_fronts(
    pairs: Iterable[tuple[dict[str, Any], Callable[[], dict[str, Any]]]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each pair's front report (``pairs``: the fields naming the pair and the call that
    reports its front), each configuration naming the pair; the pairs whose weights do
    not fit, or whose instances exceed ``max_gpus``, apart with the reason."""
    parts: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for named, run in pairs:
        try:
            rep = run()
        except InputError as e:  # DoesNotFitError among them
            if not isinstance(e, DoesNotFitError) and e.field != "max_gpus":
                raise
            skipped.append(named | {"reason": str(e)})
            continue
        rep["configs"] = [c | named for c in rep["configs"]]
        rep["front"] = [c | named for c in rep["front"]]
        parts.append(rep)
    return parts, skipped


def _union(parts: list[dict[str, Any]], q: FrontQuestion) -> dict[str, Any]:
    """The front reports ``parts`` as one: every configuration, the front of their
    fronts and the selections over it (the first part's other fields)."""
    out = dict(parts[0])
    out["configs"] = [c for p in parts for c in p["configs"]]
    members = [c for p in parts for c in p["front"]]
    mu = np.array([c["capacity_rps"] for c in members], dtype=float)
    power = np.array([c["power_w"] for c in members], dtype=float)
    front = front_indices(mu, power)
    out["front"] = on_front = [members[int(i)] for i in front]
    g_f = [c["gpus"] for c in on_front]
    out |= selections(
        on_front, mu[front], power[front], g_f, q.required_rps, q.headroom, q.budget_w
    )
    if "slo" in out:
        out["slo"] = dict(out["slo"]) | {
            k: sum(p["slo"].get(k, 0) for p in parts) for k in _SLO_COUNTS if k in out["slo"]
        }
    return out
