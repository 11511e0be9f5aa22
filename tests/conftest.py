"""Shared test helpers.

The public request traces used by the reference tests are not part of the
repository (the product ships their moments only). They are looked up in the
directory named by the environment variable `PDWATT_DATA_DIR`, else in
`shared/data` next to the repository root; tests that need them are skipped
when they are absent.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

DATA_DIR_ENV = "PDWATT_DATA_DIR"


def shared_data_dir() -> Path:
    """The directory of the public traces (see the module docstring); skips the test if absent."""
    env = os.environ.get(DATA_DIR_ENV)
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    if not path.is_dir():
        pytest.skip(f"trace data directory not found (set {DATA_DIR_ENV})")
    return path


def shared_data_file(name: str) -> Path:
    """One file of the trace data directory; skips the test if it is absent."""
    path = shared_data_dir() / name
    if not path.is_file():
        pytest.skip(f"trace file {name} not found in the data directory")
    return path


def kernel_tables() -> Path:
    """The published AIConfigurator kernel tables; skips the test if they are absent."""
    path = shared_data_dir() / "aiconfigurator"
    if not path.is_dir():
        pytest.skip("the AIConfigurator kernel tables are not in the data directory")
    return path


def installed_kernel_tables() -> Path:
    """The kernel tables the installed aiconfigurator-core package ships; skips the test
    when it is not installed (its wheels are for Linux on x86_64 and aarch64)."""
    from model.performance.engine import installed_kernels

    folder = installed_kernels()
    if folder is None:
        pytest.skip("the aiconfigurator-core package is not installed")
    return Path(folder)


@pytest.fixture
def no_kernel_package(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as if aiconfigurator-core were not installed: ``None`` in
    ``sys.modules`` is how Python marks a module that cannot be imported, and
    ``importlib.util.find_spec`` answers None for it."""
    import sys

    from model.performance.engine import installed_kernels

    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)
    installed_kernels.cache_clear()
    yield
    installed_kernels.cache_clear()


@pytest.fixture(name="shared_data_dir")
def _shared_data_dir_fixture() -> Path:
    """Fixture form of `shared_data_dir()`."""
    return shared_data_dir()


# --------------------------------------------------------------------------
# Test tiers (markers registered in pyproject.toml): `pytest -m "not slow and not
# servers"` is the quick run, `pytest` runs everything. A slow test is marked in its own
# module, `@pytest.mark.slow` (with the seconds it took on two cores) or the module's
# `pytestmark`, and nowhere else (tests/test_tiers.py checks).


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A browser test starts a server, so it is also ``servers``."""
    for item in items:
        if item.get_closest_marker("browser") is not None:
            item.add_marker("servers")
