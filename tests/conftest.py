"""Shared test helpers.

The public request traces used by the reference tests are not part of the
repository (the product ships their moments only). They are looked up in the
directory named by the environment variable `PDWATT_DATA_DIR`, else in
`shared/data` next to the repository root; tests that need them are skipped
when they are absent.
"""

from __future__ import annotations

import os
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


@pytest.fixture(name="shared_data_dir")
def _shared_data_dir_fixture() -> Path:
    """Fixture form of `shared_data_dir()`."""
    return shared_data_dir()
