"""`pdwatt calibrate` and `pdwatt predict` on a generic CSV written by the model itself."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest

from model.catalog import load_calibration
from service.cli.app import main
from tests.model.test_calibrate import TRUE, synthetic
from tests.service.conftest import REPO


def _write_csv(path: Path, gpu: str = "H100") -> None:
    rows = synthetic(noise=0.005, seed=3)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["model", "gpu", "tp", "batch", "itl_ms", "prompt_tokens", "output_tokens"]
            + ["power_w", "stack", "task", "context_tokens"]
        )
        for r in rows:
            # the synthetic rows' context: prompt 700 + weighted output 900 / 2
            w.writerow(
                [
                    r.model,
                    gpu,
                    r.tp,
                    r.batch,
                    r.itl_s * 1e3,
                    700,
                    r.output_tokens,
                    r.power_w,
                    "vllm",
                    "chat",
                    1150,
                ]
            )


def _calibrated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    """A CSV of model-made measurements and the calibration file fitted to it."""
    data = tmp_path / "runs.csv"
    _write_csv(data)
    cal = tmp_path / "cal.json"
    assert main(["calibrate", str(data), "-o", str(cal)]) == 0
    capsys.readouterr()
    return data, cal


def test_calibrate_then_predict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "runs.csv"
    _write_csv(data)
    cal = tmp_path / "cal.json"
    chart = tmp_path / "fit.png"
    assert main(["calibrate", str(data), "-o", str(cal), "--chart", str(chart)]) == 0
    out = capsys.readouterr().out
    assert "h100-sxm / vllm: 35 rows" in out and "calibration written" in out
    assert chart.stat().st_size > 10_000
    doc = json.loads(cal.read_text())
    c = doc["calibrations"][0]["calibration"]
    assert c["mbu"] == pytest.approx(TRUE["mbu"], rel=0.05)
    assert c["measured"] is True
    assert main(["predict", str(data), "--calibration", str(cal), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert len(res["rows"]) == 35
    row = res["rows"][0]
    assert set(row) >= {"model", "gpu", "tp", "ep", "batch", "itl_ms", "power_w"}
    assert row["itl_ms"]["predicted"] == pytest.approx(row["itl_ms"]["measured"], rel=0.03)
    assert res["summary"]["all"]["itl_ms"]["median_abs_error"] < 0.01


def test_predict_defaults_to_the_shipped_calibration_of_each_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``pdwatt predict FILE`` needed ``--calibration``; without it, each row is
    predicted with the calibration every other command uses for its model and GPU."""
    data = tmp_path / "runs.csv"
    _write_csv(data)
    assert main(["predict", str(data), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert len(res["rows"]) == 35
    assert {r["calibration"] for r in res["rows"]} == {"measured"}  # H100 ships one
    # the same numbers as the shipped calibration file given explicitly
    shipped = REPO / "model" / "data" / "measured_calibrations.json"
    assert main(["predict", str(data), "--calibration", str(shipped), "--json"]) == 0
    explicit = json.loads(capsys.readouterr().out)
    for a, b in zip(res["rows"], explicit["rows"], strict=True):
        assert a["itl_ms"]["predicted"] == pytest.approx(b["itl_ms"]["predicted"], rel=1e-9)
        assert a["power_w"]["predicted"] == pytest.approx(b["power_w"]["predicted"], rel=1e-9)
    # a GPU with no measured set: the catalog's estimate, as plan and capacity use it
    _write_csv(data, gpu="H200")
    assert main(["predict", str(data)]) == 0
    out = capsys.readouterr().out
    assert "calibration: the shipped one of each model and GPU (h200 estimated" in out
    assert main(["predict", str(data), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert len(rows) == 35 and all(r["gpu"] == "h200" for r in rows)
    for r in rows:
        cal = load_calibration(r["model"], "h200")
        assert r["calibration"] == ("measured" if cal.measured else "estimated")
        assert r["itl_ms"]["predicted"] > 0


def test_predict_a_bench_serving_run_with_dcgm_power(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.model.test_measurements import BENCH, DCGM

    _, cal = _calibrated(tmp_path, capsys)
    res, log = tmp_path / "bench.json", tmp_path / "dcgm.json"
    res.write_text(json.dumps(BENCH))
    log.write_text(json.dumps(DCGM))
    args = ["predict", str(res), str(log), "--calibration", str(cal), "--json"]
    assert main(args) == 2  # a local date against a UTC log: the offset is asked for
    assert "--utc-offset" in capsys.readouterr().err
    assert main([*args, "--utc-offset", "+01:00"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert (row["gpu"], row["tp"]) == ("h100-sxm", 2)
    assert row["power_w"]["measured"] == pytest.approx((500 + 540 + 520.5 + 559.5) / 4)
    assert row["power_w"]["predicted"] > 0


def test_bad_inputs_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "runs.csv"
    data.write_text("model,gpu\nqwen3-8b,h100\n")
    assert main(["calibrate", str(data)]) == 2
    assert "runs.csv: header.tp: missing column" in capsys.readouterr().err
    _write_csv(data)
    cal = tmp_path / "cal.json"
    entry = {
        "gpu": "h100-sxm",
        "stack": "vllm",
        "calibration": dataclasses.asdict(load_calibration("qwen3-8b", "h100-sxm")) | {"mbu": -1},
    }
    cal.write_text(json.dumps({"format": "pdwatt-calibration/1", "calibrations": [entry]}))
    assert main(["predict", str(data), "--calibration", str(cal)]) == 2
    assert "cal.json.calibrations[0].calibration.mbu" in capsys.readouterr().err
    entry["gpu"] = "h100"
    cal.write_text(json.dumps({"format": "pdwatt-calibration/1", "calibrations": [entry]}))
    assert main(["predict", str(data), "--calibration", str(cal)]) == 2
    assert "cal.json.calibrations[0].gpu: unknown gpu 'h100'" in capsys.readouterr().err


def test_capacity_takes_a_calibration_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, cal = _calibrated(tmp_path, capsys)
    args = ["capacity", "--model", "qwen3-8b", "--gpu", "h100-sxm", "--np", "1", "--nd", "1"]
    assert main([*args, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*args, "--json", "--calibration", str(cal)]) == 0
    fitted = json.loads(capsys.readouterr().out)
    assert fitted["calibration"]["measured"] is True
    assert "fitted to 35 measurements" in fitted["calibration"]["source"]
    assert plain["calibration"]["source"].startswith("MEASURED decode for h100-sxm")
    # the decode side follows the file's fit (MBU 0.82 and its own decode compute term,
    # against the shipped H100 set): a different decode capacity
    assert fitted["mu_d_max_rps"] != pytest.approx(plain["mu_d_max_rps"], rel=1e-3)
    assert (
        main([*args[:3], "--gpu", "h200", "--np", "1", "--nd", "1", "--calibration", str(cal)]) == 2
    )
    assert "cal.json has no calibration for h200" in capsys.readouterr().err


@pytest.mark.slow
def test_plan_deployments_take_their_gpus_calibration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from formulation.demo import demo_request
    from service.cli.plan import with_calibration_file

    _, cal = _calibrated(tmp_path, capsys)
    body = demo_request()
    for dep in body["deployments"]:
        dep["gpu"] = "h100-sxm"
    body["deployments"][0]["overrides"] = {"calibration": {"mbu": 0.5}}
    out = with_calibration_file(body, str(cal))
    fitted = json.loads(cal.read_text())["calibrations"][0]["calibration"]
    first, second = (d["overrides"]["calibration"] for d in out["deployments"][:2])
    assert first["mbu"] == 0.5  # the deployment's own override wins
    assert second["mbu"] == fitted["mbu"] and second["source"] == fitted["source"]
    assert "overrides" not in body["deployments"][1]  # the request itself is not altered
    body["site"]["gpu_inventory"] = {"h100-sxm": 64}
    # the long-context deployment's longest request does not fit an 80 GB H100
    body["deployments"] = body["deployments"][:2]
    path = tmp_path / "site.json"
    path.write_text(json.dumps(body | {"solver": {"time_limit_s": 5}}))
    assert main(["plan", str(path), "--calibration", str(cal), "--json"]) == 0
    resp = json.loads(capsys.readouterr().out)
    assert resp["status"] in ("optimal", "time_limit")


def _kernel_db() -> Path:
    from tests.conftest import kernel_tables

    return kernel_tables()


def test_calibrate_with_kernels_recovers_engine_overheads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows made from the H100 vLLM 0.14.0 kernels plus known overheads: the fit over
    the same tables recovers the overheads, and predict with the file reproduces them."""
    from model.catalog import load_model
    from model.performance.engine import EngineOverheads, KernelSource, KernelTimes

    root = _kernel_db()
    true = EngineOverheads(t_iter_s=0.6e-3, t_req_s=35e-6, t_layer_s=12e-6)
    source = KernelSource(str(root), "vllm", (("h100-sxm", "0.14.0"),))
    data = tmp_path / "runs.csv"
    with data.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["model", "gpu", "tp", "batch", "itl_ms", "prompt_tokens"]
            + ["output_tokens", "stack", "context_tokens"]
        )
        for name, tp in (("qwen3-8b", 1), ("qwen3-32b", 1), ("llama-3.1-70b", 4)):
            kt = KernelTimes.of(source, load_model(name), "h100-sxm", tp, overheads=true)
            for b in (8, 32, 128):
                w.writerow(
                    [name, "h100", tp, b, kt.decode_s(b, 1500.0) * 1e3, 0, 200, "vllm", 1500]
                )
        # a row no iteration model describes (at 256 a third of the time of 128): the
        # consistency screen keeps it out of the fit, and predict marks it
        kt = KernelTimes.of(source, load_model("qwen3-8b"), "h100-sxm", 1, overheads=true)
        third = kt.decode_s(128, 1500.0) * 1e3 / 3
        w.writerow(["qwen3-8b", "h100", 1, 256, third, 0, 200, "vllm", 1500])
    cal = tmp_path / "kcal.json"
    args = ["calibrate", str(data), "--kernels", str(root), "--kernel-version", "h100-sxm=0.14.0"]
    assert main([*args, "-o", str(cal)]) == 0
    out = capsys.readouterr().out
    assert "h100-sxm / vllm 0.14.0 tables: 9 rows" in out
    assert "screened: 1 rows out" in out
    doc = json.loads(cal.read_text())
    assert doc["format"] == "pdwatt-engine-calibration/1"
    got = doc["calibrations"][0]["overheads"]
    for name, value in true.as_dict().items():
        assert got[name] == pytest.approx(value, rel=1e-3, abs=1e-8)
    assert main(["predict", str(data), "--calibration", str(cal), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert len(res["rows"]) == 10
    assert {r["performance"] for r in res["rows"]} == {"kernels"}
    (marked,) = [r for r in res["rows"] if "screened" in r]
    assert marked["batch"] == 256 and marked["screened_rule"] == "itl"
    assert res["summary"]["all"]["itl_ms"]["median_abs_error"] < 1e-6


def test_calibrate_with_kernels_names_a_bad_version_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "runs.csv"
    _write_csv(data)
    assert (
        main(["calibrate", str(data), "--kernels", str(tmp_path), "--kernel-version", "h100"]) != 0
    )
    assert "--kernel-version" in capsys.readouterr().err
