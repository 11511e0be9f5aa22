"""What the commands that solve schedules share (``pdwatt plan``, ``dr``, ``flex``): the
request document, read from a file or the built-in demo with the command line's
defaults; the host options (memory budget, kernel database); and the progress lines
(``pdwatt simulate`` prints them too)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from formulation.demo import demo_request
from formulation.problem import Host, deployment_dicts, fill_model_variant, fill_performance
from model import jsondoc
from model.errors import InputError
from service.cli.common import add_performance_args, add_variant_arg, kernel_options


class Progress:
    """Prints each phase and, while a phase runs long, the elapsed time (to stderr)."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.t0 = time.perf_counter()
        self.last = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)

    def __enter__(self) -> Progress:
        if not self.quiet:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def _tick(self) -> None:
        while not self._stop.wait(5.0):
            print(f"  ... {time.perf_counter() - self.t0:5.1f} s  {self.last}", file=sys.stderr)

    def __call__(self, msg: str) -> None:
        self.last = msg
        if not self.quiet and not msg.startswith("decomposition: round"):
            print(f"[{time.perf_counter() - self.t0:5.1f} s] {msg}", file=sys.stderr)


def check_output(path: str | None, option: str, chart: bool = False) -> None:
    """Refuse, before any solve, an output ``path`` that cannot be written: its folder
    missing or not writable, the path a folder or a read-only file, or (``chart``) a file
    type the chart cannot be drawn as. The error names ``option``."""
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise InputError(option, f"{path} is a directory, not a file")
    if not os.path.isdir(folder):
        raise InputError(option, f"cannot write {path}: folder {folder} does not exist")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise InputError(option, f"cannot write {path}: the file is read-only")
    if not os.path.exists(path) and not os.access(folder, os.W_OK):
        raise InputError(option, f"cannot write {path}: folder {folder} is not writable")
    if chart:
        from matplotlib.backend_bases import FigureCanvasBase

        kind = os.path.splitext(path)[1].lstrip(".").lower()
        types = FigureCanvasBase.get_supported_filetypes()
        if kind and kind not in types:
            raise InputError(
                option,
                f"cannot draw a .{kind} file: the chart is written as "
                + ", ".join(f".{t}" for t in sorted(types)),
            )


def write_output(
    a: argparse.Namespace, option: str, write: Callable[[], None], what: str, path: str = ""
) -> None:
    """Run ``write`` (a file the result goes to, after the solve); says where it went
    unless ``--json``. A file that still cannot be written (checked before the solve by
    :func:`check_output`; the disk may have changed since) is reported naming ``option``
    and the command ends with status 1, the result still printed."""
    path = path or getattr(a, option.lstrip("-"))
    try:
        write()
    except OSError as e:
        print(f"error: {option}: cannot write {path}: {e.strerror or e}", file=sys.stderr)
        a.exit_status = 1
        return
    if not a.json:
        print(f"{what} written to {path}")


def load_body(a: argparse.Namespace) -> dict[str, Any]:
    if a.demo:
        body = demo_request()
        if a.time_limit is not None:
            body["solver"]["time_limit_s"] = a.time_limit
        return with_defaults(body, a)
    if not a.file:
        raise InputError("FILE", "give a schedule request file (JSON) or --demo")
    body = jsondoc.read(a.file, "FILE")
    if a.time_limit is not None and isinstance(body, dict):
        body.setdefault("solver", {})["time_limit_s"] = a.time_limit
    return with_defaults(body, a)


def fleet_demo_body(a: argparse.Namespace) -> dict[str, Any]:
    """The built-in example fleet (``--fleet-demo``), with ``--time-limit`` and the
    deployments' defaults applied."""
    from formulation.fleet.demo import fleet_demo_request

    if a.file or a.demo:
        raise InputError("--fleet-demo", "give a request file, --demo or --fleet-demo, not both")
    body = fleet_demo_request()
    if a.time_limit is not None:
        body["solver"]["time_limit_s"] = a.time_limit
    return dict(with_defaults(body, a))


def with_defaults(body: Any, a: argparse.Namespace) -> Any:
    """``body`` with ``--model-variant`` and ``--performance`` on each deployment that
    does not name its own, and ``--framework`` on each one using kernels that names none."""
    body = with_model_variant(body, getattr(a, "model_variant", None))
    if getattr(a, "performance", None) is not None:
        body = fill_performance(body, a.performance)
    if getattr(a, "framework", None) is not None:
        for dep in deployment_dicts(body):
            if dep.get("performance") == "kernels":
                dep.setdefault("framework", a.framework)
    return body


def with_model_variant(body: Any, variant: str | None) -> Any:
    """``body`` with ``--model-variant`` on each deployment that does not name its own."""
    return body if variant is None else fill_model_variant(body, variant)


def add_host_args(p: argparse.ArgumentParser) -> None:
    """``--max-memory-mb``, ``--ray``, ``--model-variant`` and the performance options:
    the flags of every command that solves schedules."""
    add_variant_arg(p, per_deployment=True)
    add_performance_args(p, per_deployment=True)
    p.add_argument(
        "--max-memory-mb",
        type=float,
        help="refuse a solve estimated to need more memory (default: "
        "PDWATT_MAX_SOLVE_MEMORY_MB, 4096)",
    )
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the solve's parallel work on the Ray cluster at ADDRESS ('auto': the "
        "cluster this machine is part of; host:port; ray://host:10001); default: "
        "PDWATT_RAY_ADDRESS, else processes on this machine. Needs pip install 'pdwatt[ray]'",
    )


def use_cluster(a: argparse.Namespace) -> None:
    """Join the Ray cluster of ``--ray`` (else ``PDWATT_RAY_ADDRESS``) for this process's
    solves; an InputError naming the option when Ray is not installed or no cluster
    answers."""
    from formulation.processes.executor import use_ray
    from service.runtime.settings import get_settings

    if a.ray is not None:
        use_ray(a.ray, "--ray")
    elif get_settings().ray_address is not None:
        use_ray(get_settings().ray_address, "PDWATT_RAY_ADDRESS")


def host_from_args(a: argparse.Namespace, body: Any) -> Host:
    """The command line reads the user's own workload files; memory budget from the flag
    or the same setting the service uses; the kernel database (``--kernels``, else
    ``$PDWATT_KERNELS``) when a deployment of ``body`` uses kernels."""
    from service.runtime.settings import get_settings

    use_cluster(a)
    budget = a.max_memory_mb
    if budget is None:
        budget = get_settings().max_solve_memory_mb
    if budget <= 0:
        raise InputError("--max-memory-mb", f"must be > 0, got {budget:g}")
    uses = any(d.get("performance") == "kernels" for d in deployment_dicts(body))
    folder, versions = kernel_options(a, uses)
    return Host(
        read_files=True,
        memory_budget_mb=budget,
        kernels=folder,
        kernel_versions=tuple(sorted(versions.items())),
    )
