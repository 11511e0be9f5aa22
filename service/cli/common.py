"""What the ``pdwatt`` sub-commands share: the deployment options, the deployment they
describe, and the plain-text table helpers."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from typing import Any

from model.catalog import load_gpu, load_override_file, parse_set_flags
from model.errors import InputError
from model.operations import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    DEFAULT_WORKLOAD,
    SpecRequest,
    kernel_database,
    kernel_versions_of,
    resolve_spec,
)
from model.performance.engine import (
    KERNEL_PACKAGE,
    NO_KERNEL_PACKAGE,
    gpu_folder,
    installed_kernels,
)
from model.performance.interconnect import INTERCONNECTS
from model.spec import (
    DEFAULT_FRAMEWORK,
    DEFAULT_PERFORMANCE,
    DEFAULT_VARIANT,
    FRAMEWORKS,
    MODEL_VARIANTS,
    PERFORMANCE_SOURCES,
)
from service.cli.calibrate import calibration_for_gpu
from service.cli.shared import parse_kernel_versions

#: the environment variable naming the kernel database (the server's setting, and the
#: command line's default for ``--kernels``)
KERNELS_ENV = "PDWATT_KERNELS"


def add_variant_arg(p: argparse.ArgumentParser, per_deployment: bool = False) -> None:
    """``--model-variant``: the memory balance every command's capacities come from."""
    p.add_argument(
        "--model-variant",
        choices=MODEL_VARIANTS,
        help="memory balance: paper (SPEC 2.5) or admission (docs/admission.md); default "
        + DEFAULT_VARIANT
        + (" (for deployments that do not name their own model_variant)" if per_deployment else ""),
    )


def add_performance_args(p: argparse.ArgumentParser, per_deployment: bool = False) -> None:
    """``--performance``, ``--kernels``, ``--framework`` and ``--kernel-version``: where
    the times come from (SPEC's rooflines or measured kernels)."""
    each = " (for deployments that do not name their own)" if per_deployment else ""
    p.add_argument(
        "--performance",
        choices=PERFORMANCE_SOURCES,
        help="where the times come from: spec (SPEC 2.2-2.3 rooflines with the "
        "calibration) or kernels (measured kernel tables plus the serving engine's "
        f"fitted overheads, docs/kernels.md); default {DEFAULT_PERFORMANCE}{each}",
    )
    p.add_argument(
        "--kernels",
        metavar="DIR",
        help="kernel database (AIConfigurator's layout) read with --performance kernels "
        f"(default: ${KERNELS_ENV}, else the tables the {KERNEL_PACKAGE} package ships)",
    )
    p.add_argument(
        "--framework",
        choices=FRAMEWORKS,
        help="with --performance kernels: the serving framework of the kernel tables and "
        f"engine calibration (default {DEFAULT_FRAMEWORK}{each}; an engine calibration "
        "is shipped for H100, H200 and B200 under each, and GB200 under trtllm; docs/kernels.md)",
    )
    p.add_argument(
        "--kernel-version",
        dest="kernel_versions",
        action="append",
        default=[],
        metavar="GPU=VERSION",
        help="with --performance kernels: the version of GPU's kernel tables (default: "
        "the version of its engine calibration's tables); repeat for several GPUs",
    )


def kernel_options(
    a: argparse.Namespace, uses_kernels: bool, framework: str | None = None
) -> tuple[str | None, dict[str, str]]:
    """The kernel database folder and the versions per GPU the options give, checked:
    without a deployment using kernels, ``--kernels``, ``--framework`` and
    ``--kernel-version`` are errors (nothing given is ignored); with one, the folder
    (``--kernels``, else ``$PDWATT_KERNELS``) must be a kernel database and each version
    must be in it (for ``framework`` when given)."""
    versions: dict[str, str] = {}
    folder_given, framework_given = getattr(a, "kernels", None), getattr(a, "framework", None)
    for gpu, version in parse_kernel_versions(getattr(a, "kernel_versions", None)).items():
        try:
            versions[load_gpu(gpu).name] = version
        except InputError as e:
            raise InputError("--kernel-version", e.reason) from None
    if not uses_kernels:
        for flag, given in (
            ("--kernels", folder_given is not None),
            ("--framework", framework_given is not None),
            ("--kernel-version", bool(versions)),
        ):
            if given:
                raise InputError(flag, "only used with --performance kernels")
        return None, {}
    folder = folder_given or os.environ.get(KERNELS_ENV) or None
    where = "--kernels" if folder_given else f"--kernels (from {KERNELS_ENV})"
    if folder is None:
        folder = installed_kernels()
        if folder is None:
            raise InputError(
                "--kernels",
                f"--performance kernels needs a kernel database: {NO_KERNEL_PACKAGE}; or "
                f"give --kernels DIR or set {KERNELS_ENV}",
            )
        where = f"--kernels (default: the {KERNEL_PACKAGE} package's tables)"
    kernel_database(folder, where)
    for gpu, version in versions.items():
        try:
            gpu_folder(gpu)
        except InputError as e:
            raise InputError("--kernel-version", e.reason) from None
        fws = [framework] if framework else list(FRAMEWORKS)
        have = {f: kernel_versions_of(folder, gpu, f) for f in fws}
        if not any(version in v for v in have.values()):
            listed = "; ".join(f"{f}: {', '.join(v) or 'none'}" for f, v in have.items())
            raise InputError(
                "--kernel-version", f"no {gpu} tables of version {version!r} ({listed})"
            )
    return folder, versions


def add_spec_args(
    p: argparse.ArgumentParser, workload_help: str | None = None, variant: bool = True
) -> None:
    """The deployment options shared by the sub-commands (``variant``: the memory balance
    option, for the commands whose numbers come from it)."""
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"model name (default: {DEFAULT_MODEL})")
    p.add_argument("--gpu", default=DEFAULT_GPU, help=f"GPU name (default: {DEFAULT_GPU})")
    p.add_argument(
        "--workload",
        default=DEFAULT_WORKLOAD,
        help=workload_help
        or "fixed:IN:OUT, a preset (azure-conv-2023, azure-code-2023, mooncake), "
        f"trace:PATH (CSV or Mooncake JSONL) or moments:PATH.json (default: {DEFAULT_WORKLOAD})",
    )
    p.add_argument(
        "--override",
        metavar="FILE",
        help="JSON or TOML file with sections model/gpu/calibration/serving overriding fields",
    )
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override one field, e.g. --set calibration.mfu=0.6 "
        "--set serving.kv_pool_tokens=200000",
    )
    p.add_argument(
        "--calibration",
        metavar="CAL.json",
        help="calibration file from pdwatt calibrate (its entry for --gpu; --set and "
        "--override still apply on top)",
    )
    p.add_argument("--dispatch", choices=["round_robin", "random"], help="router dispatch policy")
    for phase, what in (("prefill", ""), ("decode", ", whose memory holds the KV pool")):
        p.add_argument(
            f"--{phase}-gpu",
            metavar="GPU",
            help=f"the {phase} instances' GPU type{what} (default: --gpu; docs/mixed-gpus.md)",
        )
    p.add_argument(
        "--interconnect",
        choices=list(INTERCONNECTS),
        help="the link a request's KV crosses from prefill to decode, charged to TTFT and "
        "capacity (default: infiniband for phases on two GPU types, not charged otherwise)",
    )
    p.add_argument(
        "--interconnect-gb-per-s",
        type=float,
        metavar="GB_S",
        help="the link's bandwidth per GPU and direction (GB/s), in place of the named link's",
    )
    for phase in ("prefill", "decode"):
        p.add_argument(
            f"--{phase}-shape",
            metavar="SHAPE",
            help=f"the {phase} instances' split, tp<T>[,dp<D>][,ep<E>]: T x D GPUs "
            "(docs/shapes.md; default: --set serving.tensor_parallel, 1)",
        )
    if variant:
        add_variant_arg(p)
    add_performance_args(p)
    p.add_argument("--json", action="store_true", help="machine output (same as the HTTP API)")


def spec_from_args(a: argparse.Namespace) -> tuple[Any, bool]:
    """The deployment the options describe, and whether any field was overridden."""
    req, overridden = spec_request_from_args(a)
    return resolve_spec(req), overridden


def spec_request_from_args(a: argparse.Namespace) -> tuple[SpecRequest, bool]:
    """The request of the deployment the options describe (names, overrides), and
    whether any field was overridden."""
    overrides: dict[str, dict[str, Any]] = {}
    if a.override:
        for sec, vals in load_override_file(a.override).items():
            overrides.setdefault(sec, {}).update(vals)
    for sec, vals in parse_set_flags(a.sets).items():
        overrides.setdefault(sec, {}).update(vals)
    if a.dispatch:
        overrides.setdefault("serving", {})["dispatch"] = a.dispatch
    for phase in ("prefill", "decode"):
        shape = getattr(a, f"{phase}_shape", None)
        if shape is not None:
            overrides.setdefault("serving", {})[f"{phase}_shape"] = shape
    base = None
    if getattr(a, "calibration", None):
        base = calibration_for_gpu(a.calibration, a.gpu)
    performance = getattr(a, "performance", None) or DEFAULT_PERFORMANCE
    framework = getattr(a, "framework", None)
    folder, versions = kernel_options(a, performance == "kernels", framework)
    req = SpecRequest(
        model=a.model,
        gpu=a.gpu,
        workload=a.workload,
        overrides=overrides,
        read_files=True,
        calibration=base,
        model_variant=getattr(a, "model_variant", None) or DEFAULT_VARIANT,
        performance=performance,
        framework=framework,
        kernels=folder,
        kernel_versions=versions,
        prefill_gpu=getattr(a, "prefill_gpu", None),
        decode_gpu=getattr(a, "decode_gpu", None),
        interconnect=getattr(a, "interconnect", None),
        interconnect_gb_per_s=getattr(a, "interconnect_gb_per_s", None),
    )
    return req, bool(overrides)


def fmt(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "inf"
        return f"{v:,.{nd}f}"
    return str(v)


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    line = "  ".join(h.rjust(w) for h, w in zip(header, widths, strict=False))
    body = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=False)) for r in rows]
    return "\n".join([line, "  ".join("-" * w for w in widths), *body])


def calibration_line(rep: dict[str, Any]) -> str:
    cal = rep["calibration"]
    kind = "measured" if cal["measured"] else "ESTIMATED (no measurement for this pair)"
    extra = ", with user overrides" if cal.get("overridden") else ""
    return (
        f"calibration: {kind}{extra}; {cal['source']}; model variant {rep['model_variant']}\n"
        + performance_line(rep["performance"])
    )


def performance_line(perf: dict[str, Any]) -> str:
    """Where the times come from, in a line or three (``performance`` of a report)."""
    if perf["source"] != "kernels":
        return f"performance: SPEC rooflines with the calibration; power: {perf['power']}"
    k, e = perf["kernels"], perf["engine_calibration"]
    d, p = perf["decode_line"], perf["prefill_curve"]
    return (
        f"performance: kernels, {k['framework']} {k['version']} tables of {k['gpu']} in "
        f"{k['folder']}; engine calibration: {e['source']} (fitted with {e['fitted_version']})"
        f"\n  decode t_D(B) = {d['alpha_s'] * 1e3:.3f} ms + {d['g_s_per_request'] * 1e3:.4f} "
        f"ms x B at {d['context_tokens']:,.0f} tokens, B in {d['batch_from']:,.0f}.."
        f"{d['batch_to']:,.0f}: within "
        f"{100 * d['worst_deviation']:.1f}% of the composed times"
        f"\n  prefill t_P(l) = {p['a_p_s_per_token'] * 1e6:.3f} us x l + "
        f"{p['b_p_s_per_token2'] * 1e9:.4f} ns x l^2, l up to {p['longest_prompt_tokens']:,.0f}: "
        f"within {100 * p['worst_deviation']:.1f}%"
        + (
            f" (measured to {p['extends_beyond_measured']:,.0f}, the form carries it beyond)"
            if p["extends_beyond_measured"]
            else ""
        )
        + f"; power: {perf['power']}"
    )
