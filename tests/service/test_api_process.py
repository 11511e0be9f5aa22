"""The API process answers without a solver: a fresh Python that imports the app
(``service.main``) and answers ``/healthz``, its lifespan run, has loaded neither Pyomo
nor HiGHS, nor ``scipy.optimize`` (which loads SciPy's own HiGHS; ``scipy.stats``
imports it). Solves run in solver workers, which import them with
:mod:`formulation.solve`; the check is shown not to be vacuous by importing that module
in the same process afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: what the API process never imports: the solvers, and SciPy's optimizers with SciPy's HiGHS
SOLVER_MODULES = ("pyomo", "highspy", "scipy.optimize")

CHILD = f"""
import json, sys
from fastapi.testclient import TestClient
import service.main

with TestClient(service.main.app) as client:
    health = client.get("/healthz").json()
loaded = sorted(m for m in {SOLVER_MODULES!r} if m in sys.modules)
import formulation.solve
after_solve = sorted(m for m in {SOLVER_MODULES!r} if m in sys.modules)
print(json.dumps({{"health": health, "loaded": loaded, "after_solve": after_solve}}))
"""

pytestmark = pytest.mark.servers  # starts a Python process (and the app's solver pool)


def test_the_api_process_answers_without_pyomo_highspy_or_scipy_optimize(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PDWATT_")}
    env |= {"PDWATT_DATABASE_URL": f"sqlite:///{tmp_path}/pdwatt.db", "PDWATT_WORKERS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["health"] == {"status": "ok"}
    assert got["loaded"] == [], f"the API process imported {got['loaded']}"
    assert got["after_solve"] == sorted(SOLVER_MODULES)  # the check sees them when loaded
