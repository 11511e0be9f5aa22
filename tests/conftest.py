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
    from model.engine import installed_kernels

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

    from model.engine import installed_kernels

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
# servers"` is the quick run, `pytest` runs everything. Most modules mark their own
# tests; the slow tests below are marked here, by module and name (every parameter),
# each with the seconds it took on two cores.

SLOW_TESTS: dict[str, dict[str, float]] = {
    "tests/formulation/test_errors.py": {
        "test_time_limit_returns_a_clean_schedule_with_its_gap": 2.1,
    },
    "tests/formulation/test_guided.py": {
        "test_the_readme_demo_is_proven_within_its_gap_under_both_model_variants": 9.3,
        "test_a_restarted_ascent_still_bounds_the_optimum": 2.8,
        "test_guided_reports_only_bounds_and_feasible_schedules_as_they_come": 2.8,
        "test_column_generation_stops_at_a_bound_it_cannot_beat": 2.1,
    },
    "tests/formulation/test_interrupt.py": {
        "test_a_stopped_milp_keeps_the_incumbent_highs_sent": 34.4,
        "test_a_milp_past_its_deadline_is_ended_with_its_process": 15.8,
    },
    "tests/formulation/test_lagrange.py": {
        "test_a_milp_over_the_master_lp_support_follows_column_generation": 30.0,
        "test_dual_bound_never_exceeds_the_enumerated_optimum": 3.9,
        "test_volume_method_equals_exhaustive_enumeration": 3.4,
        "test_oracle_in_a_daemonic_process_runs_serially": 2.2,
    },
    "tests/formulation/test_shed.py": {
        "test_next_boundary_stops_instances_the_settings_cannot_cover": 4.8,
    },
    "tests/formulation/test_period.py": {
        "test_four_deployments_with_offsets_equal_brute_force": 31.4,
    },
    "tests/model/test_admission.py": {
        "test_one_prefill_server_capacity_against_the_simulator": 2.1,
    },
    "tests/model/test_latency.py": {
        "test_agrees_with_the_simulator_on_fixed_lengths": 5.2,
    },
    "tests/model/test_kernels.py": {  # on the published kernel tables
        "test_a_moe_model_composes_on_the_published_tables": 29.7,
        "test_b200_phases_carry_their_kernels_power": 23.6,
        "test_the_logits_all_gather_beyond_the_nccl_table_is_composed_in_pieces": 23.4,
        "test_sliding_window_models_on_the_published_tables": 21.2,
        "test_reader_parses_the_published_tables": 16.0,
        "test_fp8_releases_on_the_published_tables_use_their_fp8_gemm_and_moe_dtypes": 9.5,
        "test_qwen3_32b_on_h200_against_the_spec_rooflines": 8.6,
        "test_what_the_published_tables_cannot_compose_is_refused_with_the_reason": 4.4,
    },
    "tests/service/test_model_variant.py": {
        "test_schedule_response_names_each_deployments_variant": 16.3,  # loaded machine
    },
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`SLOW_TESTS` ``slow``; a browser test starts a server,
    so it is also ``servers``."""
    for item in items:
        module, _, name = item.nodeid.partition("::")
        if name.split("[")[0] in SLOW_TESTS.get(module, {}):
            item.add_marker("slow")
        if item.get_closest_marker("browser") is not None:
            item.add_marker("servers")
