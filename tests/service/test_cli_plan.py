"""The `pdwatt plan` command (SPEC 6, 6.1)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from service.cli.app import main
from tests.service.contract import TOTALS_KEYS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DEPLOYMENT_FLOATS = ("demand_rps", "served_rps", "capacity_rps", "power_w")


def small_request() -> dict[str, Any]:
    def dep(name: str, workload: str, demand: list[float]) -> dict[str, Any]:
        return {
            "name": name,
            "model": "qwen3-32b",
            "gpu": "h200",
            "workload": workload,
            "demand_rps": demand,
            "unserved_penalty_usd_per_request": 1e-4,
            "headroom": 0.9,
            "max_gpus": 4,
            "initial": {"n_p": 1, "n_d": 1},
        }

    return {
        "period_minutes": 15,
        "site": {
            "gpu_inventory": {"h200": 6},
            "pue": 1.2,
            "idle_gpu_power_w": 120,
            "carbon_price_usd_per_tonne": 50,
        },
        "deployments": [
            dep("chat", "fixed:1024:256", [4.0, 12.0, 15.0, 6.0]),
            dep("code", "fixed:4096:256", [1.0, 2.0, 3.0, 0.5]),
        ],
        "grid": {
            "power_cap_w": [6000.0, 6000.0, 3000.0, 6000.0],
            "price_usd_per_mwh": [50.0, 80.0, 150.0, 60.0],
            "carbon_g_per_kwh": 300.0,
        },
        "transitions": {
            "start_cost_usd": 0.01,
            "stop_cost_usd": 0.0,
            "max_instance_changes_per_period": 2,
        },
        "solver": {"mip_gap": 1e-9, "time_limit_s": 60},
    }


def write(tmp_path: Path, body: Any, name: str = "request.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    code, out, err = run(capsys, argv)
    assert code == 0, err
    return json.loads(out)


def is_float(v: Any) -> bool:
    return isinstance(v, float)


def check_totals(t: dict[str, Any]) -> None:
    for key in TOTALS_KEYS:
        assert is_float(t[key]), key


def test_plan_json_has_the_contract_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = small_request()
    resp = run_json(capsys, ["plan", str(write(tmp_path, body)), "--json"])
    assert resp["status"] in {"optimal", "time_limit"}
    for key in ("mip_gap", "solve_time_s", "objective_usd"):
        assert is_float(resp[key]), key
    assert len(resp["periods"]) == 4
    for i, p in enumerate(resp["periods"]):
        assert p["index"] == i and isinstance(p["index"], int)
        assert is_float(p["power_w"]) and is_float(p["power_cap_w"])
        assert p["power_cap_w"] == body["grid"]["power_cap_w"][i]
        assert p["power_w"] <= p["power_cap_w"] * (1 + 1e-6)
        assert set(p["deployments"]) == {"chat", "code"}
        for name, d in p["deployments"].items():
            assert isinstance(d["n_p"], int) and isinstance(d["n_d"], int)
            for key in DEPLOYMENT_FLOATS:
                assert is_float(d[key]), key
            raw = next(x for x in body["deployments"] if x["name"] == name)
            assert d["demand_rps"] == raw["demand_rps"][i]
    check_totals(resp["totals"])
    assert resp["totals"]["objective_usd"] == resp["objective_usd"]
    assert set(resp["baselines"]) >= {"static_peak", "greedy"}
    for b in resp["baselines"].values():
        check_totals(b)
        assert isinstance(b["cap_violations"], int) and not isinstance(b["cap_violations"], bool)


def test_plan_csv_has_one_row_per_period_and_deployment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_csv = tmp_path / "plan.csv"
    resp = run_json(
        capsys, ["plan", str(write(tmp_path, small_request())), "--json", "--csv", str(out_csv)]
    )
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text(encoding="utf-8"))))
    assert len(rows) == 4 * 2
    assert {(int(r["period"]), r["deployment"]) for r in rows} == {
        (t, n) for t in range(4) for n in ("chat", "code")
    }
    for r in rows:
        per = resp["periods"][int(r["period"])]
        d = per["deployments"][r["deployment"]]
        assert (int(r["n_p"]), int(r["n_d"])) == (d["n_p"], d["n_d"])
        assert float(r["served_rps"]) == pytest.approx(d["served_rps"], abs=1e-6)
        assert float(r["site_power_w"]) == pytest.approx(per["power_w"], abs=1e-3)


def test_plan_human_output_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "plan.png"
    code, out, err = run(
        capsys, ["plan", str(write(tmp_path, small_request())), "--plot", str(png)]
    )
    assert code == 0, err
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert "status" in out and "static_peak" in out and "greedy" in out
    assert str(png) in out


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("deployments", 0, "demand_rps", 2), -1.0, "deployments[0].demand_rps[2]"),
        (("grid", "power_cap_w"), [1.0, 2.0], "grid.power_cap_w"),
        (("colour",), "blue", "colour"),
        (("deployments", 1, "gpu"), "b200", "deployments[1].gpu"),
        (("deployments", 0, "headroom"), 0.0, "deployments[0].headroom"),
    ],
)
def test_bad_request_exits_2_naming_the_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    path: tuple[Any, ...],
    value: Any,
    field: str,
) -> None:
    body = small_request()
    obj: Any = body
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value
    code, out, err = run(capsys, ["plan", str(write(tmp_path, body)), "--json"])
    assert code == 2
    assert err.startswith(f"error: {field}: ")
    assert "Traceback" not in err and out == ""


def test_unreadable_or_missing_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    for argv in (["plan", str(bad)], ["plan", str(tmp_path / "absent.json")], ["plan"]):
        code, _, err = run(capsys, argv)
        assert code == 2, argv
        assert err.startswith("error: FILE: "), err


def test_infeasible_request_is_an_error_naming_the_period(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = small_request()
    body["grid"]["power_cap_w"] = [6000.0, 100.0, 6000.0, 6000.0]  # below the idle site
    code, out, err = run(capsys, ["plan", str(write(tmp_path, body)), "--json"])
    assert code != 0
    assert err.startswith("error: ") and "period" in err and "1" in err
    assert "Traceback" not in err and out == ""


@pytest.mark.slow
def test_demo_prints_a_summary_and_draws_the_chart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    png = tmp_path / "demo.png"
    code, out, err = run(capsys, ["plan", "--demo", "--time-limit", "5", "--plot", str(png)])
    assert code == 0, err
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert out.startswith("site: 64 H200 GPUs; 3 deployments") and "\nstatus " in out
    assert "site cap 32 kW, cut to 24 kW 17:00-20:00" in out
    for word in ("objective", "schedule", "static_peak", "greedy", "chat", "code", "long-context"):
        assert word in out, word
    assert f"chart written to {png}" in out
    assert not (tmp_path / "pdwatt-demo.png").exists()


def h100_request() -> dict[str, Any]:
    """small_request on H100s, one deployment on measured kernels."""
    body = small_request()
    body["site"]["gpu_inventory"] = {"h100-sxm": 6}
    for dep in body["deployments"]:
        dep["gpu"] = "h100-sxm"
    body["deployments"][0]["performance"] = "kernels"
    return body


def test_plan_kernels_need_a_kernel_database(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_kernel_package: None,
) -> None:
    monkeypatch.delenv("PDWATT_KERNELS", raising=False)
    code, _, err = run(capsys, ["plan", str(write(tmp_path, h100_request())), "--json"])
    assert code == 2
    assert "error: --kernels: --performance kernels needs a kernel database" in err
    # no deployment uses kernels: the kernel options are refused, not ignored
    code, _, err = run(
        capsys, ["plan", str(write(tmp_path, small_request())), "--kernels", str(tmp_path)]
    )
    assert code == 2 and "error: --kernels: only used with --performance kernels" in err


def test_plan_passes_the_choice_per_deployment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.conftest import kernel_tables

    root = kernel_tables()
    argv = ["plan", str(write(tmp_path, h100_request())), "--json", "--kernels", str(root)]
    resp = run_json(capsys, argv)
    perf = [d["performance"] for d in resp["deployments"]]
    assert [p["source"] for p in perf] == ["kernels", "spec"]
    assert perf[0]["kernels"]["framework"] == "vllm"
    assert perf[0]["decode_line"]["context_tokens"] == 1024 + 128  # fixed:1024:256
    # --performance fills the deployments that name none
    both = run_json(capsys, [*argv, "--performance", "kernels"])
    assert [d["performance"]["source"] for d in both["deployments"]] == ["kernels", "kernels"]
    assert both["objective_usd"] != resp["objective_usd"]


# ------------------------------------------------------------ a new user's first runs


def test_an_output_that_cannot_be_written_is_refused_before_the_solve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The request below cannot be solved (its cap is under the idle site): the error is
    the output's, so nothing was solved, and no traceback."""
    body = small_request()
    body["grid"]["power_cap_w"] = [6000.0, 100.0, 6000.0, 6000.0]
    request = str(write(tmp_path, body))
    for option, path, reason in (
        ("--csv", tmp_path / "absent" / "plan.csv", "does not exist"),
        ("--csv", tmp_path, "is a directory"),
        ("--plot", tmp_path / "absent" / "plan.png", "does not exist"),
        ("--plot", tmp_path / "plan.xyz", "cannot draw a .xyz file"),
    ):
        code, out, err = run(capsys, ["plan", request, option, str(path)])
        assert code == 2, (option, path)
        assert err.startswith(f"error: {option}: ") and reason in err, err
        assert "Traceback" not in err and out == ""


def test_a_file_that_fails_after_the_solve_keeps_the_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The disk can change between the check and the write: the result is still
    printed, the file's error named, and the status is 1."""
    import argparse

    from service.cli.solving import write_output

    a = argparse.Namespace(json=False, csv=str(tmp_path))  # a folder: open() fails
    write_output(a, "--csv", lambda: open(a.csv, "w").close(), "per-period table")
    _, err = capsys.readouterr()
    assert err.startswith(f"error: --csv: cannot write {tmp_path}: ")
    assert a.exit_status == 1


def test_a_series_of_another_length_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The horizon is the length most series share: the odd one out is named, whether a
    deployment's demand (the first one's too) or a grid series."""
    for path, field in (
        (("deployments", 0, "demand_rps"), "deployments[0].demand_rps"),
        (("deployments", 1, "demand_rps"), "deployments[1].demand_rps"),
        (("grid", "price_usd_per_mwh"), "grid.price_usd_per_mwh"),
    ):
        body = small_request()
        obj: Any = body
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = obj[path[-1]][:3]
        code, _, err = run(capsys, ["plan", str(write(tmp_path, body)), "--json"])
        assert code == 2
        assert err.startswith(f"error: {field}: has 3 values but the horizon has 4 periods")


def test_a_missing_trace_is_named_with_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path as given, folder and all (the folder may be what is wrong)."""
    monkeypatch.chdir(tmp_path)
    body = small_request()
    body["deployments"][1]["workload"] = "trace:traces/requests.csv"
    code, _, err = run(capsys, ["plan", str(write(tmp_path, body)), "--json"])
    assert code == 2
    assert err == "error: deployments[1].workload: trace: file traces/requests.csv not found\n"
    missing = tmp_path / "traces" / "requests.csv"
    argv = ["capacity", "--workload", f"trace:{missing}", "--np", "1", "--nd", "1"]
    code, _, err = run(capsys, argv)
    assert code == 2 and err == f"error: workload: trace: file {missing} not found\n"


def test_the_highs_banner_is_not_printed(tmp_path: Path) -> None:
    """In a process of its own (HiGHS prints its banner once per process): under
    ``--json`` standard error stays empty, standard output is the document."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli",
            "plan",
            str(write(tmp_path, small_request())),
            "--json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "optimal"
    assert "HiGHS" not in proc.stderr and proc.stderr == ""


def test_the_summary_says_what_was_solved() -> None:
    """From the request: the GPUs, the deployments, the horizon and the cap with its
    cut (a changed request changes the text)."""
    from formulation.demo import demo_request
    from formulation.problem import problem_from_dict
    from service.cli.plan import describe_problem

    text = describe_problem(problem_from_dict(demo_request()))
    for part in (
        "64 H200 GPUs",
        "3 deployments: chat (qwen3-32b, azure-conv-2023); code",
        "96 periods x 15 min (24 h)",
        "site cap 32 kW, cut to 24 kW 17:00-20:00",
    ):
        assert part in text, part
    body = demo_request()
    body["deployments"] = body["deployments"][:1]
    body["site"]["gpu_inventory"] = {"h200": 16}
    body["grid"]["power_cap_w"] = 20_000.0
    text = describe_problem(problem_from_dict(body))
    assert "16 H200 GPUs; 1 deployment: chat" in text and text.endswith("site cap 20 kW")


def test_an_infeasible_baseline_is_marked_wherever_costs_are_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Here static_peak costs less than the schedule by breaking the cap and the
    transition limits: the response says it is infeasible and the table gives no saving."""
    body = small_request()
    body["transitions"]["max_instance_changes_per_period"] = 1
    body["deployments"][0]["demand_rps"] = [2.0, 30.0, 30.0, 2.0]
    body["grid"]["power_cap_w"] = 6000.0
    resp = run_json(capsys, ["plan", str(write(tmp_path, body)), "--json"])
    for b in resp["baselines"].values():
        broken = b["cap_violations"] + b["limit_violations"] + b["inventory_violations"]
        assert b["feasible"] is (broken == 0)
    peak = resp["baselines"]["static_peak"]
    assert not peak["feasible"] and peak["objective_usd"] < resp["objective_usd"]
    code, out, err = run(capsys, ["plan", str(write(tmp_path, body))])
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("static_peak")}
    assert rows["static_peak"].split()[1] == "*" and rows["static_peak"].endswith("infeasible")
    assert "%" not in rows["static_peak"]


def test_the_summary_shows_where_requests_go_unserved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 2-hour table averages over its window (not its first period) and counts the
    unserved requests; a line per deployment says where they are."""
    body = small_request()
    resp = run_json(capsys, ["plan", str(write(tmp_path, body)), "--json"])
    lost = {
        n: [
            (p["deployments"][n]["demand_rps"] - p["deployments"][n]["served_rps"]) * 900
            for p in resp["periods"]
        ]
        for n in ("chat", "code")
    }
    assert lost["chat"][0] == 0 and lost["chat"][2] > 1000  # the cut in period 2
    code, out, _ = run(capsys, ["plan", str(write(tmp_path, body))])
    assert code == 0
    row = next(line for line in out.splitlines() if line.strip().startswith("00:00"))
    total = sum(sum(v) for v in lost.values())
    assert row.split()[-1] == f"{total:,.0f}"
    chat = resp["periods"]
    served = sum(p["deployments"]["chat"]["served_rps"] for p in chat) / 4
    demand = sum(p["deployments"]["chat"]["demand_rps"] for p in chat) / 4
    assert f"{served:6.1f}/{demand:<6.1f}".strip() in row
    assert f"  chat: {sum(lost['chat']):,.0f} requests in period 2 (00:30-00:45)" in out
