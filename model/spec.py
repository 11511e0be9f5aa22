"""What a deployment is, as the capacity model takes it: :class:`DeploymentSpec` (model,
GPU, calibration, serving stack, workload, where the times come from, GPU settings,
latency targets, the KV link between the phases) and the checks of the choices it
names (the memory balance's variant, the performance source, the kernel tables'
framework); its coefficients are :meth:`model.capacity.Coefficients.of`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from model.catalog import Calibration, GpuSpec, ModelArch, ServingStack, load_gpu_clocks
from model.clocks import GpuClocks, Setting, parse_setting
from model.errors import InputError
from model.latency_targets import LatencyTargets
from model.performance.engine import EngineCalibration, KernelSource
from model.performance.interconnect import KvLink
from model.performance.speculative import check_draft
from model.shapes import check_shape
from model.workload import Workload

#: The analytical models of the memory balance: ``paper`` is SPEC 2.5 to the letter;
#: ``admission`` charges the pool only for admitted requests (docs/admission.md).
MODEL_VARIANTS = ("paper", "admission")
#: The variant with the smaller worst-case error against the simulator over the six
#: validation workloads (docs/validation.md).
DEFAULT_VARIANT = "admission"


def check_variant(variant: object, field: str = "model_variant") -> str:
    """``variant`` if it names a memory balance; else an input error naming ``field``."""
    if not isinstance(variant, str) or variant not in MODEL_VARIANTS:
        raise InputError(field, f"must be one of {', '.join(MODEL_VARIANTS)}, got {variant!r}")
    return variant


#: Where the capacity model's times come from: ``spec``, SPEC 2.2-2.3's rooflines with
#: the calibration; ``kernels``, measured kernel tables plus the engine's overheads.
PERFORMANCE_SOURCES = ("spec", "kernels")
DEFAULT_PERFORMANCE = "spec"
#: the serving frameworks whose kernel tables a ``kernels`` deployment may read
FRAMEWORKS = ("vllm", "sglang", "trtllm")
DEFAULT_FRAMEWORK = "vllm"


def check_performance(performance: object, field: str = "performance") -> str:
    """``performance`` if it names a performance source; else an input error naming
    ``field``."""
    if not isinstance(performance, str) or performance not in PERFORMANCE_SOURCES:
        raise InputError(
            field, f"must be one of {', '.join(PERFORMANCE_SOURCES)}, got {performance!r}"
        )
    return performance


def check_framework(framework: object, field: str = "framework") -> str:
    """``framework`` if it names a serving framework of the kernel tables; else an input
    error naming ``field``."""
    if not isinstance(framework, str) or framework not in FRAMEWORKS:
        raise InputError(field, f"must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    return framework


@dataclass(frozen=True)
class DeploymentSpec:
    """One deployment's inputs: model, GPU, calibration, serving stack and workload."""

    model: ModelArch
    gpu: GpuSpec
    calibration: Calibration
    workload: Workload
    serving: ServingStack = field(default_factory=ServingStack)
    variant: str = DEFAULT_VARIANT  # the memory balance: one of MODEL_VARIANTS
    #: where the times come from: one of PERFORMANCE_SOURCES
    performance: str = DEFAULT_PERFORMANCE
    #: ``kernels`` only: the kernel tables (folder, framework, version per GPU) and the
    #: serving engine's overheads fitted on top of them (with the version they were
    #: fitted against and their source)
    kernel_source: KernelSource | None = None
    engine: EngineCalibration | None = None
    #: the phases' GPU settings, ``"<N>MHz"`` or ``"<N>W"`` (None: the full clock);
    #: ``clocks`` overrides the catalog's clock data of the GPU (docs/clocks.md)
    prefill_setting: str | None = None
    decode_setting: str | None = None
    clocks: GpuClocks | None = None
    #: p99 TTFT/TPOT targets: tables (:mod:`model.tables`) then hold each
    #: configuration's capacity under them (:mod:`model.queueing.targets`); none by default
    targets: LatencyTargets = field(default_factory=LatencyTargets)
    #: the prefill phase's GPU and its calibration where they differ from ``gpu`` and
    #: ``calibration`` (then the decode phase's, which hold the KV pool; docs/mixed-gpus.md);
    #: None: both phases on ``gpu``, as before
    prefill_gpu: GpuSpec | None = None
    prefill_calibration: Calibration | None = None
    #: the link each request's KV crosses from prefill to decode (None: not charged, as
    #: before; :func:`model.performance.interconnect.kv_link`)
    kv_link: KvLink | None = None

    def __post_init__(self) -> None:
        check_variant(self.variant)
        if (self.prefill_gpu is None) != (self.prefill_calibration is None):
            raise InputError("prefill_gpu", "a prefill GPU needs its calibration, and back")
        if self.prefill_gpu == self.gpu and self.prefill_calibration == self.calibration:
            # one GPU type after all: the spec of today's deployment, field for field
            object.__setattr__(self, "prefill_gpu", None)
            object.__setattr__(self, "prefill_calibration", None)
        if self.mixed:
            if self.prefill_setting is not None or self.decode_setting is not None:
                raise InputError(
                    "prefill_gpu", "GPU settings need both phases on one GPU type (for now)"
                )
            if self.performance == "kernels":
                raise InputError(
                    "prefill_gpu", "performance 'kernels' needs both phases on one GPU type"
                )
        self.settings()  # an input error naming the setting if it is not one
        shapes = self.serving.shapes()
        for name, shape in zip(("prefill_shape", "decode_shape"), shapes, strict=True):
            if getattr(self.serving, name) is not None:
                check_shape(shape, name, self.model.n_heads, self.model.experts)
        check_performance(self.performance)
        draft = self.serving.mtp_draft_tokens
        check_draft(self.model, draft)
        if draft and self.performance != "kernels":
            raise InputError(
                "mtp_draft_tokens",
                "speculative decoding is composed from measured kernels: it needs "
                "performance 'kernels'",
            )
        if self.performance == "kernels":
            if self.kernel_source is None:
                raise InputError("kernels", "performance 'kernels' needs a kernel database")
            if self.engine is None:
                raise InputError("performance", "performance 'kernels' needs engine overheads")
            check_framework(self.kernel_source.framework)
            self.kernel_source.version(self.gpu.name)  # an error naming the GPU if absent
        elif self.kernel_source is not None or self.engine is not None:
            raise InputError("performance", "kernel tables are only read with 'kernels'")

    @property
    def mixed(self) -> bool:
        """Whether the prefill phase runs on another GPU type than the decode phase."""
        return self.prefill_gpu is not None

    @property
    def prefill_hw(self) -> GpuSpec:
        """The prefill phase's GPU (``gpu`` unless ``prefill_gpu`` is given)."""
        return self.gpu if self.prefill_gpu is None else self.prefill_gpu

    @property
    def prefill_cal(self) -> Calibration:
        """The prefill phase's calibration (``calibration`` unless the prefill GPU's)."""
        return self.calibration if self.prefill_calibration is None else self.prefill_calibration

    def gpu_clocks(self) -> GpuClocks | None:
        """The GPU's clock data: ``clocks`` if given, else the catalog's (None if it
        has none)."""
        return self.clocks if self.clocks is not None else load_gpu_clocks(self.gpu.name)

    def settings(self) -> tuple[Setting | None, Setting | None]:
        """The parsed ``(prefill, decode)`` settings (None: the full clock)."""
        clocks = self.gpu_clocks()
        return (
            parse_setting(self.prefill_setting, clocks, "prefill_setting"),
            parse_setting(self.decode_setting, clocks, "decode_setting"),
        )

    @property
    def framework(self) -> str | None:
        """The serving framework of the kernel tables (None under ``spec``)."""
        return None if self.kernel_source is None else self.kernel_source.framework

    def describe(self) -> dict[str, Any]:
        """JSON-able summary of the inputs (for outputs and cache keys)."""
        out: dict[str, Any] = {
            "model": asdict(self.model),
            "gpu": asdict(self.gpu),
            "calibration": asdict(self.calibration),
            "workload": self.workload.to_dict(),
            "serving": serving_record(self.serving),
            "model_variant": self.variant,
            "performance": self.performance,
        }
        if self.kernel_source is not None and self.engine is not None:
            out["kernels"] = self.kernel_source.describe()
            out["engine"] = asdict(self.engine)
        texts = self.setting_texts()
        if texts:  # at the default: as before
            out |= texts
            if self.clocks is not None:
                out["clocks"] = asdict(self.clocks)
        if self.targets.given:  # none: as before
            out["targets"] = self.targets.record()
        if self.prefill_gpu is not None and self.prefill_calibration is not None:
            out["prefill_gpu"] = asdict(self.prefill_gpu)
            out["prefill_calibration"] = asdict(self.prefill_calibration)
        if self.kv_link is not None:
            out |= self.kv_link.record()
        return out

    def setting_texts(self) -> dict[str, str]:
        """``prefill_setting`` and ``decode_setting`` as text (the full clock for a
        phase left at its default); empty at the default (both phases at full clock)."""
        prefill, decode = self.settings()
        if prefill is None and decode is None:
            return {}
        clocks = self.gpu_clocks()
        assert clocks is not None  # a setting parses only with clock data
        return {
            "prefill_setting": clocks.full_clock if prefill is None else prefill.text,
            "decode_setting": clocks.full_clock if decode is None else decode.text,
        }


def serving_record(serving: ServingStack) -> dict[str, Any]:
    """The serving stack as JSON; ``max_running_requests`` and the phases' shapes only
    when set (a document at the defaults is as before the fields existed)."""
    out = asdict(serving)
    for name in ("max_running_requests", "prefill_shape", "decode_shape"):
        if out[name] is None:
            del out[name]
    return out


def with_targets(
    spec: DeploymentSpec, ttft_p99_s: float | None, tpot_p99_s: float | None
) -> DeploymentSpec:
    """``spec`` with p99 latency targets (None: none); an input error names the target."""
    return replace(spec, targets=LatencyTargets(ttft_p99_s, tpot_p99_s))


def with_settings(
    spec: DeploymentSpec, prefill_setting: str | None, decode_setting: str | None
) -> DeploymentSpec:
    """``spec`` with the phases' GPU settings (``"<N>MHz"``, ``"<N>W"`` or None for the
    full clock; docs/clocks.md); an input error names the setting that is not one."""
    return replace(spec, prefill_setting=prefill_setting, decode_setting=decode_setting)


def setting_arg(text: str, spec: DeploymentSpec) -> str | None:
    """A setting as :func:`with_settings` takes it (None: full clock)."""
    clocks = spec.gpu_clocks()
    return None if clocks is None or text == clocks.full_clock else text
