"""What the ``pdwatt`` sub-commands share: the deployment options, the deployment they
describe, and the plain-text table helpers."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

from model.capacity import DEFAULT_VARIANT, MODEL_VARIANTS
from model.catalog import load_override_file, parse_set_flags
from model.operations import SpecRequest, resolve_spec
from service.cli.calibrate import calibration_for_gpu


def add_variant_arg(p: argparse.ArgumentParser, per_deployment: bool = False) -> None:
    """``--model-variant``: the memory balance every command's capacities come from."""
    p.add_argument(
        "--model-variant",
        choices=MODEL_VARIANTS,
        help="memory balance: paper (SPEC 2.5) or admission (docs/admission.md); default "
        + DEFAULT_VARIANT
        + (" (for deployments that do not name their own model_variant)" if per_deployment else ""),
    )


def add_spec_args(
    p: argparse.ArgumentParser, workload_help: str | None = None, variant: bool = True
) -> None:
    """The deployment options shared by the sub-commands (``variant``: the memory balance
    option, for the commands whose numbers come from it)."""
    p.add_argument("--model", default="qwen3-32b", help="model name (default: qwen3-32b)")
    p.add_argument("--gpu", default="h200", help="GPU name (default: h200)")
    p.add_argument(
        "--workload",
        default="azure-conv-2023",
        help=workload_help
        or "fixed:IN:OUT, a preset (azure-conv-2023, azure-code-2023, mooncake), "
        "trace:PATH (CSV or Mooncake JSONL) or moments:PATH.json (default: azure-conv-2023)",
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
    if variant:
        add_variant_arg(p)
    p.add_argument("--json", action="store_true", help="machine output (same as the HTTP API)")


def spec_from_args(a: argparse.Namespace) -> tuple[Any, bool]:
    """The deployment the options describe, and whether any field was overridden."""
    overrides: dict[str, dict[str, Any]] = {}
    if a.override:
        for sec, vals in load_override_file(a.override).items():
            overrides.setdefault(sec, {}).update(vals)
    for sec, vals in parse_set_flags(a.sets).items():
        overrides.setdefault(sec, {}).update(vals)
    if a.dispatch:
        overrides.setdefault("serving", {})["dispatch"] = a.dispatch
    base = None
    if getattr(a, "calibration", None):
        base = calibration_for_gpu(a.calibration, a.gpu)
    req = SpecRequest(
        model=a.model,
        gpu=a.gpu,
        workload=a.workload,
        overrides=overrides,
        read_files=True,
        calibration=base,
        model_variant=getattr(a, "model_variant", None) or DEFAULT_VARIANT,
    )
    return resolve_spec(req), bool(overrides)


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
    return f"calibration: {kind}{extra}; {cal['source']}; model variant {rep['model_variant']}"
