"""The decisions table: pdwatt's pick among the measured disaggregated configurations of
each group of aiconfigurator-core's measured serving results, judged by its measured
throughput per GPU against the group's best (model/measured/decisions.py,
docs/decisions-silicon.md).

    python scripts/silicon_decisions.py [FILE] [--markdown OUT.md] [--json OUT.json]

FILE defaults to the installed aiconfigurator-core package's ``silicon_sample.csv``.
Each group is ranked twice: under SPEC's rooflines with the catalog's calibration
(``spec``) and under the package's measured kernels for the row's framework
(``kernels``; with the shipped engine calibration of the GPU and framework where there
is one, else the kernel time alone, said in the table). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from model.catalog import find_release, load_model
from model.errors import InputError, NotFoundError
from model.latency_targets import LatencyTargets
from model.measured.decisions import TOLERANCE, Config, Group, capacity_per_gpu, groups_of, judge
from model.measured.silicon import SYSTEM_GPUS, installed_silicon, read_silicon
from model.operations import SpecRequest, resolve_spec
from model.performance.engine import (
    EngineCalibration,
    EngineOverheads,
    choose_version,
    installed_kernels,
    shipped_calibration,
)
from model.spec import DeploymentSpec


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def engine_of(gpu: str, framework: str, folder: str) -> tuple[EngineCalibration, str]:
    """The shipped engine calibration of the pair, or none (the kernel time alone)."""
    try:
        return shipped_calibration(gpu, framework), "shipped overheads"
    except InputError:
        version, _ = choose_version(folder, gpu, framework, None, "")
        source = f"none: the kernel time alone (no engine calibration for {gpu} {framework})"
        alone = EngineCalibration(gpu, framework, version, EngineOverheads(), source)
        return alone, "kernels alone"


def spec_maker(
    key: tuple, performance: str, folder: str | None
) -> tuple[Callable[[Config], DeploymentSpec] | str, str]:
    """How to build a group's deployment at a configuration, or why the group cannot be
    expressed; and what the times come from."""
    model_path, system, backend, precision, isl, osl = key
    try:
        model = load_model(model_path)
    except NotFoundError:
        return f"model {model_path} not in the catalog", ""
    gpu = SYSTEM_GPUS.get(system)
    if gpu is None:
        return f"gpu {system} not in the catalog", ""
    released = {1.0: "fp8", 2.0: "bf16"}.get(model.bytes_per_param, "")
    if precision == "fp4" and model.precision == "mxfp4":
        pass  # the checkpoint's own MXFP4 experts (gpt-oss)
    elif precision == "fp4" and model.experts:
        release = find_release(model, "nvfp4")
        if release is None:
            return f"precision fp4: the catalog has no NVFP4 release of {model.name}", ""
        model = release  # as the validation reads the row (docs/validation-silicon.md, 3)
    elif precision and precision != released:
        return f"precision {precision}: the catalog's release of {model.name} is {released}", ""
    extra: dict[str, Any] = {}
    how = "SPEC rooflines"
    if performance == "kernels":
        assert folder is not None
        engine, how = engine_of(gpu, backend, folder)
        extra = {"performance": "kernels", "framework": backend, "engine": engine}

    def make(c: Config) -> DeploymentSpec:
        serving: dict[str, Any] = {"prefill_shape": c.prefill.text, "decode_shape": c.decode.text}
        if c.draft:
            serving["mtp_draft_tokens"] = c.draft
        return resolve_spec(
            SpecRequest(model.name, gpu, f"fixed:{isl}:{osl}", {"serving": serving}, **extra)
        )

    return make, how


def predictor(
    make: Callable[[Config], DeploymentSpec],
) -> Callable[[Config, LatencyTargets], float]:
    """pdwatt's capacity per GPU of a configuration, the deployment made by ``make``."""
    return lambda c, goals: capacity_per_gpu(make(c), c, goals)


def group_record(g: Group, how: str) -> dict[str, Any]:
    pick, best = g.pick, g.best
    return {
        "group": dict(
            zip(("model", "system", "framework", "precision", "isl", "osl"), g.key, strict=True)
        ),
        "times": how,
        "tpot_target_ms": g.tpot_target_s * 1e3,
        "configurations": len(g.choices),
        "best": {"config": best.config.text, "measured_rps_per_gpu": best.measured_best},
        "pick": None
        if pick is None
        else {
            "config": pick.config.text,
            "measured_rps_per_gpu": pick.measured_best,
            "predicted_rps_per_gpu": pick.predicted,
        },
        "ratio": g.ratio,
        "within_tolerance": None if g.ratio is None else g.ratio >= 1.0 - TOLERANCE,
        "refused": [{"config": c.config.text, "reason": c.reason} for c in g.choices if c.reason],
    }


def markdown(records: list[dict[str, Any]]) -> str:
    head = (
        "| model | GPU | framework | ISL/OSL | configs | TPOT target ms | measured best "
        "| times | pdwatt's pick | its measured / best |\n"
        "|---|---|---|---|---:|---:|---|---|---|---:|\n"
    )
    lines = []
    for r in records:
        g = r["group"]
        pick = r["pick"]
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.0%}"
        if r["within_tolerance"]:
            ratio += " ✓"
        lines.append(
            f"| {g['model']} | {g['system']} | {g['framework']} | {g['isl']}/{g['osl']} | "
            f"{r['configurations']} | {r['tpot_target_ms']:.1f} | {r['best']['config']} | "
            f"{r['times']} | {pick['config'] if pick else '-'} | {ratio} |"
        )
    return head + "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", help="a silicon_sample.csv (default: the package's)")
    ap.add_argument("--markdown", metavar="OUT.md")
    ap.add_argument("--json", metavar="OUT.json")
    a = ap.parse_args()
    path = a.file or installed_silicon()
    if path is None:
        ap.error("no FILE given and the aiconfigurator-core package is not installed")
    rows = read_silicon(path)
    folder = installed_kernels()
    groups = groups_of(rows)
    _say(f"{len(rows)} rows, {len(groups)} disaggregated groups of >= 5 configurations")
    records, skipped = [], []
    for key, members in groups:
        for performance in ("spec", "kernels"):
            if performance == "kernels" and folder is None:
                continue
            made, how = spec_maker(key, performance, folder)
            if isinstance(made, str):
                skipped.append({"group": list(key), "reason": made})
                break
            _say(f"{key} under {performance}")
            group = judge(key, members, predictor(made))
            records.append(group_record(group, how) | {"performance": performance})
    judged = [r for r in records if r["ratio"] is not None]
    for perf in ("spec", "kernels"):
        mine = [r for r in judged if r["performance"] == perf]
        ok = sum(1 for r in mine if r["within_tolerance"])
        _say(f"{perf}: {ok} of {len(mine)} groups within {TOLERANCE:.0%} of the measured best")
    doc = {"groups": records, "skipped_groups": skipped, "tolerance": TOLERANCE}
    if a.json:
        Path(a.json).write_text(json.dumps(doc, indent=1))
    text = markdown(records)
    if a.markdown:
        Path(a.markdown).write_text(text)
    print(text)
    for s in skipped:
        print(f"not judged: {' '.join(map(str, s['group']))}: {s['reason']}")


if __name__ == "__main__":
    main()
