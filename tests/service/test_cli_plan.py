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
    assert out.startswith("status ")
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
