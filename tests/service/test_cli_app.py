"""The command line as a new user first meets it: ``pdwatt --version``, what
``pdwatt serve`` says when it starts, and a configuration without instances."""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest
from fastapi.routing import APIRoute
from starlette.routing import Mount

from service.cli.app import main
from service.cli.serve import start_line


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"pdwatt {version('pdwatt')}\n"


def test_the_start_line_names_the_console_and_the_docs() -> None:
    """Both addresses it names are the application's own."""
    from service.main import app

    line = start_line("127.0.0.1", 8000)
    assert "console: http://127.0.0.1:8000/ui/" in line
    assert "docs: http://127.0.0.1:8000/docs" in line
    paths = {r.path for r in app.routes if isinstance(r, APIRoute | Mount)}
    assert {"/ui", "/docs"} <= paths


def test_a_configuration_without_instances_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """0P0D has no capacity and no bottleneck to report; one phase alone is a
    configuration with capacity 0, its missing phase the bottleneck."""
    code = main(["capacity", "--np", "0", "--nd", "0"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == "error: n_p: n_p and n_d are both 0: a configuration needs instances\n"
    for n_p, n_d, bottleneck in ((0, 2, "prefill"), (2, 0, "decode")):
        assert main(["capacity", "--np", str(n_p), "--nd", str(n_d), "--json"]) == 0
        rep = json.loads(capsys.readouterr().out)
        assert rep["capacity_rps"] == 0.0 and rep["bottleneck"] == bottleneck


def test_an_option_before_the_command_is_named(capsys) -> None:
    """``pdwatt --bogus`` said only that a command is required."""
    from service.cli.app import main

    with pytest.raises(SystemExit) as e:
        main(["--bogus"])
    assert e.value.code == 2
    assert "unrecognized argument '--bogus': the command comes first" in capsys.readouterr().err
