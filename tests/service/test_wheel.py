"""The Docker image's install and start steps, without a Docker engine.

docker/Dockerfile copies pyproject.toml, README.md, model/, formulation/ and service/,
builds a wheel, installs it into a fresh virtual environment and runs ``pdwatt serve``
with PDWATT_HOST and PDWATT_PORT from the environment. This test does the same in a
temporary directory (the wheel's dependencies come from the package index, so it takes
a few minutes the first time), then checks that the installed server answers
/healthz, /v1/capacity (packaged data) and /v1/schedule (the solver in a worker process),
and that it shuts down cleanly on SIGTERM.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.service.conftest import free_port, small_schedule, stop_server, wait_healthy

pytestmark = pytest.mark.servers  # builds a wheel and starts the installed server

REPO = Path(__file__).resolve().parents[2]
COPIED = ["pyproject.toml", "README.md", "model", "formulation", "service"]  # as the Dockerfile
INSTALL_TIMEOUT_S = 1200


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_wheel_installs_and_serves(tmp_path: Path) -> None:
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    assert 'CMD ["pdwatt", "serve"]' in dockerfile
    assert "PDWATT_HOST=0.0.0.0 PDWATT_PORT=8000" in dockerfile
    copied = [
        src
        for line in dockerfile.splitlines()
        if line.startswith("COPY ") and "--from" not in line
        for src in line.split()[1:-1]
    ]
    assert sorted(copied) == sorted(COPIED), copied

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PDWATT_", "PYTHON"))}
    env.pop("VIRTUAL_ENV", None)

    # build stage: the copied sources only, so nothing else in the work tree can leak in
    src = tmp_path / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in COPIED:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    dist = tmp_path / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), "."],
        src,
        env,
        INSTALL_TIMEOUT_S,
    )
    wheels = list(dist.glob("pdwatt-*.whl"))
    assert len(wheels) == 1, wheels
    # every Python module of the copied packages ships in the wheel (a subpackage left
    # out of pyproject's list would install without it)
    with zipfile.ZipFile(wheels[0]) as whl:
        names = set(whl.namelist())
    modules = {
        str(p.relative_to(REPO))
        for top in ("model", "formulation", "service")
        for p in (REPO / top).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert modules <= names, sorted(modules - names)
    # the console and Swagger UI ship in the wheel: every file of service/console/static
    packed = {n for n in names if n.startswith("service/console/static/")}
    static = REPO / "service" / "console" / "static"
    shipped = {f"service/console/static/{p.relative_to(static)}" for p in static.rglob("*")}
    assert packed == {p for p in shipped if not (REPO / p).is_dir()}

    # runtime stage: a fresh virtual environment with the wheel and its dependencies
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    bin_dir = env_dir / "bin"
    run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheels[0])],
        tmp_path,
        env,
        INSTALL_TIMEOUT_S,
    )
    where = run(
        [str(bin_dir / "python"), "-c", "import service, model; print(service.__file__)"],
        tmp_path,
        env,
        60,
    )
    assert Path(where.strip()).is_relative_to(env_dir), where  # the installed copy

    port = free_port()
    run_env = {
        **env,
        "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        "PDWATT_HOST": "127.0.0.1",
        "PDWATT_PORT": str(port),
        "PDWATT_WORKERS": "1",
        "MPLCONFIGDIR": str(tmp_path / "mpl"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    log = tmp_path / "server.log"
    workdir = tmp_path / "run"
    workdir.mkdir()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            ["pdwatt", "serve"], cwd=workdir, env=run_env, stdout=fh, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, 60)
        assert httpx.get(f"{base}/healthz", timeout=5).json() == {"status": "ok"}
        r = httpx.post(
            f"{base}/v1/capacity",
            json={"model": "qwen3-32b", "gpu": "h200", "workload": "fixed:4096:256"}
            | {"n_p": 3, "n_d": 1},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert r.json()["calibration"]["measured"] is True
        r = httpx.post(f"{base}/v1/schedule", json=small_schedule(), timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["status"] in {"optimal", "time_limit"}
        # /docs and the console from the installed package, nothing from another host
        docs = httpx.get(f"{base}/docs", timeout=5).text
        assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", docs)
        assert assets and all(a.startswith("/static/swagger-ui/") for a in assets), assets
        for url in [*assets, "/ui/", "/ui/app.js", "/ui/vendor/vega/vega.min.js"]:
            assert httpx.get(f"{base}{url}", timeout=5).status_code == 200, url
    except BaseException:
        stop_server(proc)
        raise AssertionError(f"server log:\n{log.read_text(errors='replace')[-4000:]}") from None
    code = stop_server(proc)
    assert code == 0, f"exit status {code}; log:\n{log.read_text(errors='replace')[-3000:]}"
