"""Naming a Ray cluster where Ray cannot be imported: ``--ray`` exits 2 saying how to
install it, and the service and ``pdwatt worker`` refuse to start with
``PDWATT_RAY_ADDRESS`` set. No cluster is started here: the Ray tests are in
tests/formulation/test_ray.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from formulation.processes.executor import RAY_EXTRA, ray_address, ray_missing
from model.errors import InputError
from service.cli.app import main
from service.runtime.settings import get_settings


@pytest.fixture
def without_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``import ray`` fails, as where it is not installed."""
    monkeypatch.setitem(sys.modules, "ray", None)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_ray_missing_says_how_to_install_it(without_ray: None) -> None:
    reason = ray_missing()
    assert reason is not None and RAY_EXTRA in reason


@pytest.mark.parametrize("command", [["plan", "--demo"], ["dr", "--demo"], ["flex", "--demo"]])
def test_ray_option_without_ray_exits_2(
    command: list[str], without_ray: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--ray", "auto"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --ray: Ray is not installed")
    assert RAY_EXTRA in err
    assert ray_address() is None  # nothing was solved, nothing named


@pytest.mark.parametrize("command", [["serve"], ["worker"], ["plan", "--demo"]])
def test_the_ray_setting_without_ray_refuses_to_start(
    command: list[str],
    without_ray: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PDWATT_RAY_ADDRESS", "auto")
    monkeypatch.setenv("PDWATT_REDIS_URL", "redis://127.0.0.1:1/0")  # never reached
    with pytest.raises(InputError) as e:
        get_settings()
    assert e.value.field == "PDWATT_RAY_ADDRESS" and RAY_EXTRA in e.value.reason
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: PDWATT_RAY_ADDRESS: Ray is not installed")
