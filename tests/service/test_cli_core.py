"""The `pdwatt capacity` and `pdwatt front` commands (SPEC 6.1)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.cli.app import main
from tests.conftest import kernel_tables
from tests.service.contract import CAPACITY_3P1D, CAPACITY_FLOATS

# SPEC 2.1-2.3 by hand for Qwen3-32B on H200, fixed:4096:256.
A_P = 2 * 32.8e9 / (989e12 * 0.67)
B_P = 2.17 * 64 * 8192 / (989e12 * 0.67)
MU_P = 1 / (A_P * 4096 + B_P * 4096**2)
ALPHA = 65.6e9 / (4.8e12 * 0.77) + 1e-3
G = 262144 * 4224 / (4.8e12 * 0.77) + 0.062e-3
B_MAX = 233_840 / (4224 + 512)
MU_D_MAX = B_MAX / (255 * (ALPHA + G * B_MAX))

#: Qwen3-32B on H200, fixed:4096:256, 3 prefill and 1 decode instance, as JSON
QWEN3_32B_H200 = [*CAPACITY_3P1D, "--model", "qwen3-32b", "--gpu", "h200", "--json"]
# the hand computation above is SPEC 2 (the paper variant)
CAPACITY = [*QWEN3_32B_H200, "--model-variant", "paper"]


def run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, argv):
    code, out, err = run(capsys, argv)
    assert code == 0, err
    return json.loads(out)


def test_capacity_json_has_the_contract_keys(capsys):
    rep = run_json(capsys, CAPACITY)
    assert type(rep["n_p"]) is int and rep["n_p"] == 3
    assert type(rep["n_d"]) is int and rep["n_d"] == 1
    for key in CAPACITY_FLOATS:
        assert type(rep[key]) is float, key
    assert type(rep["kv_pool_tokens"]) is int
    assert rep["kv_pool_tokens"] == 233_840  # SPEC 2.1
    assert rep["ctx_tokens"] == 4224.0  # SPEC 2.4, fixed lengths
    assert rep["mu_p_rps"] == pytest.approx(MU_P, rel=1e-12)
    assert rep["mu_d_max_rps"] == pytest.approx(MU_D_MAX, rel=1e-12)
    assert rep["calibration"]["measured"] is True
    # SPEC 2.5: n_D mu_D < n_P mu_P, so capacity = n_D mu_D
    assert rep["capacity_rps"] == pytest.approx(rep["mu_d_rps"], rel=1e-12)
    assert rep["capacity_rps"] < 3 * MU_P
    # SPEC 2.6: power at capacity
    mu = rep["capacity_rps"]
    expected = 3 * min(133 + 566 * mu / (3 * MU_P), 692) + min(448 + 458 * mu / MU_D_MAX, 678)
    assert rep["power_w"] == pytest.approx(expected, rel=1e-12)


def test_capacity_at_a_given_load(capsys):
    at_cap = run_json(capsys, CAPACITY)
    at_one = run_json(capsys, [*CAPACITY, "--load", "1"])
    assert at_one["power_w"] < at_cap["power_w"]
    assert at_one["capacity_rps"] == at_cap["capacity_rps"]
    # SPEC 2.6 at lambda = 1 req/s
    expected = 3 * min(133 + 566 / (3 * MU_P), 692) + min(448 + 458 / MU_D_MAX, 678)
    assert at_one["power_w"] == pytest.approx(expected, rel=1e-12)
    # a load above capacity is served at capacity
    over = run_json(capsys, [*CAPACITY, "--load", "1000"])
    assert over["power_w"] == at_cap["power_w"]


def test_capacity_human_output(capsys):
    code, out, _ = run(capsys, [a for a in CAPACITY if a != "--json"])
    assert code == 0
    assert "3P1D" in out and "capacity" in out and "measured" in out
    assert "model variant paper" in out


def test_capacity_without_decode_work_is_valid_json(capsys):
    rep = run_json(
        capsys, ["capacity", "--workload", "fixed:512:1", "--np", "2", "--nd", "1", "--json"]
    )
    mu_p = 1 / (A_P * 512 + B_P * 512**2)
    assert rep["capacity_rps"] == pytest.approx(2 * mu_p, rel=1e-12)
    assert rep["mu_d_rps"] is None and rep["mu_d_max_rps"] is None  # infinite: no decode work


def test_front_json(capsys):
    rep = run_json(capsys, ["front", "--max-gpus", "8", "--json"])
    configs, front = rep["configs"], rep["front"]
    assert len(configs) == 28  # n_P, n_D >= 1, n_P + n_D <= 8: 1 + 2 + ... + 7
    assert {(c["n_p"], c["n_d"]) for c in configs} == {
        (p, d) for p in range(1, 8) for d in range(1, 8) if p + d <= 8
    }
    assert front
    caps = [c["capacity_rps"] for c in front]
    assert caps == sorted(caps)
    for c in front:
        assert c in configs
        # SPEC 2.7: no configuration dominates a front point
        assert not any(
            o["capacity_rps"] >= c["capacity_rps"]
            and o["power_w"] <= c["power_w"]
            and (o["capacity_rps"] > c["capacity_rps"] or o["power_w"] < c["power_w"])
            for o in configs
        )
    # every configuration off the front is dominated by one on it
    on_front = {(c["n_p"], c["n_d"]) for c in front}
    for o in configs:
        if (o["n_p"], o["n_d"]) not in on_front:
            assert any(
                c["capacity_rps"] >= o["capacity_rps"] and c["power_w"] <= o["power_w"]
                for c in front
            )


def test_front_selections(capsys):
    rep = run_json(
        capsys, ["front", "--max-gpus", "8", "--required-rps", "3", "--budget-w", "4000", "--json"]
    )
    front = rep["front"]
    chosen = rep["min_power_for_rate"]["config"]
    ok = [c for c in front if c["capacity_rps"] >= 3]
    assert chosen == min(ok, key=lambda c: c["power_w"])
    best = rep["max_capacity_under_budget"]["config"]
    within = [c for c in front if c["power_w"] <= 4000]
    assert best == max(within, key=lambda c: c["capacity_rps"])


def test_front_plot_writes_a_png(capsys, tmp_path):
    target = tmp_path / "front.png"
    code, out, err = run(capsys, ["front", "--max-gpus", "8", "--plot", str(target)])
    assert code == 0, err
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "chart written" in out


def test_estimated_calibration_is_flagged(capsys):
    rep = run_json(
        capsys,
        [
            "capacity",
            "--model",
            "qwen3-8b",
            "--gpu",
            "a100-80gb",
            "--workload",
            "fixed:1024:256",
            "--np",
            "1",
            "--nd",
            "1",
            "--json",
        ],
    )
    assert rep["calibration"]["measured"] is False
    assert rep["calibration"]["source"].startswith("ESTIMATED")
    assert rep["capacity_rps"] > 0


def test_unknown_model_is_an_input_error(capsys):
    code, out, err = run(capsys, ["capacity", "--model", "no-such-model", "--np", "1", "--nd", "1"])
    assert code == 2
    assert out == ""
    assert "model" in err
    for known in ("qwen3-32b", "llama-3.1-70b", "mistral-small-24b"):
        assert known in err


def test_bad_set_field_names_the_field(capsys):
    argv = [*CAPACITY, "--set", "calibration.not_a_field=1"]
    code, out, err = run(capsys, argv)
    assert code == 2
    assert out == ""
    assert "not_a_field" in err


def test_missing_trace_file(capsys, tmp_path):
    missing = tmp_path / "absent.csv"
    code, _, err = run(
        capsys, ["capacity", "--workload", f"trace:{missing}", "--np", "1", "--nd", "1", "--json"]
    )
    assert code == 2
    assert "trace" in err and "absent.csv" in err


def test_model_that_does_not_fit_is_reported(capsys):
    code, _, err = run(
        capsys, ["capacity", "--model", "llama-3.1-70b", "--np", "1", "--nd", "1", "--json"]
    )
    assert code == 2
    assert "model" in err
    rep = run_json(
        capsys,
        [
            "capacity",
            "--model",
            "llama-3.1-70b",
            "--set",
            "serving.tensor_parallel=2",
            "--np",
            "1",
            "--nd",
            "1",
            "--json",
        ],
    )
    assert rep["gpus"] == 4
    assert rep["calibration"]["overridden"] is True


@pytest.mark.servers
def test_console_script_prints_json():
    script = shutil.which("pdwatt", path=str(Path(sys.executable).parent))
    cmd = [script] if script else [sys.executable, "-m", "service.cli"]
    proc = subprocess.run(
        [*cmd, *CAPACITY], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["n_p"] == 3 and rep["n_d"] == 1
    assert rep["kv_pool_tokens"] == 233_840
    assert rep["mu_p_rps"] == pytest.approx(MU_P, rel=1e-12)


@pytest.mark.slow
def test_sliding_window_models_plan_without_the_simulator(capsys):
    """Gemma 3 keeps a 1,024-token window in five layers of six: its front with latency
    targets is decided by the analytic figures alone (the simulator does not describe
    sliding windows), and simulating it is refused with the reason."""
    args = ["front", "--model", "gemma-3-12b", "--gpu", "h100-sxm", "--workload"]
    args += ["fixed:1000:200", "--max-gpus", "4", "--ttft-p99", "5", "--tpot-p99", "0.1"]
    out = run_json(capsys, [*args, "--json"])
    assert out["slo"]["method"] == "analytic" and out["slo"]["simulated"] == 0
    assert "used anyway" in out["slo"]["rule"] and out["slo"]["checked"] >= 1
    sim = ["simulate", "--model", "gemma-3-12b", "--gpu", "h100-sxm", "--np", "1", "--nd", "1"]
    sim += ["--workload", "fixed:1000:200"]
    code = main([*sim, "--rate", "1"])
    err = capsys.readouterr().err
    assert code != 0 and "sliding-window" in err and "Traceback" not in err


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(_json_values)
def test_compact_pieces_join_to_the_compact_document(doc: Any) -> None:
    from service.cli.app import compact_chunks

    assert "".join(compact_chunks(doc)) == json.dumps(doc, allow_nan=False)


def test_large_json_output_is_compact_and_the_same_document(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from service.cli import app

    argv = ["front", "--max-gpus", "6", "--json"]
    assert main(argv) == 0
    indented = capsys.readouterr().out
    assert indented.startswith("{\n  ")  # small: indented for reading
    monkeypatch.setattr(app, "INDENT_LIMIT_CHARS", len(indented) // 4)
    assert main(argv) == 0
    compact = capsys.readouterr().out
    assert compact.count("\n") == 1 and len(compact) < len(indented)
    assert json.loads(compact) == json.loads(indented)


# ---- --performance kernels -------------------------------------------------------------


H100_KERNELS = [*CAPACITY_3P1D, "--gpu", "h100-sxm", "--performance", "kernels"]


def test_kernels_need_a_kernel_database(capsys, monkeypatch, tmp_path, no_kernel_package):
    monkeypatch.delenv("PDWATT_KERNELS", raising=False)
    code, _, err = run(capsys, H100_KERNELS)
    assert code == 2
    assert "error: --kernels: --performance kernels needs a kernel database" in err
    assert "aiconfigurator-core package, which ships one, is not installed" in err
    code, _, err = run(capsys, [*H100_KERNELS, "--kernels", str(tmp_path)])
    assert code == 2
    assert "error: --kernels:" in err and "is not a kernel database" in err
    code, _, err = run(capsys, [*H100_KERNELS, "--kernels", str(tmp_path / "absent")])
    assert code == 2 and "error: --kernels:" in err and "does not exist" in err
    # from the environment, the error says so
    monkeypatch.setenv("PDWATT_KERNELS", str(tmp_path))
    code, _, err = run(capsys, H100_KERNELS)
    assert code == 2 and "--kernels (from PDWATT_KERNELS)" in err


def test_kernel_options_are_refused_under_spec(capsys, tmp_path):
    for extra in (
        ["--kernels", str(tmp_path)],
        ["--framework", "sglang"],
        ["--kernel-version", "h100-sxm=0.24.0"],
    ):
        code, _, err = run(capsys, [*CAPACITY, *extra])
        assert code == 2
        assert f"error: {extra[0]}: only used with --performance kernels" in err


@pytest.mark.slow
def test_capacity_with_kernels_on_qwen3_32b_h100(capsys, monkeypatch):
    root = kernel_tables()
    rep = run_json(capsys, [*H100_KERNELS, "--kernels", str(root), "--json"])
    perf = rep["performance"]
    assert perf["source"] == "kernels"
    assert perf["kernels"]["folder"] == root.name
    assert perf["kernels"]["framework"] == "vllm"
    # the version the shipped engine calibration was fitted with
    assert perf["kernels"]["version"] == perf["engine_calibration"]["fitted_version"]
    assert 0 <= perf["decode_line"]["worst_deviation"] < 0.05
    assert perf["prefill_curve"]["longest_prompt_tokens"] == 4096.0
    assert rep["capacity_rps"] > 0
    spec = run_json(capsys, [a for a in H100_KERNELS if a not in ("--performance", "kernels")]
                    + ["--json"])  # fmt: skip
    assert spec["performance"]["source"] == "spec"
    assert spec["capacity_rps"] != rep["capacity_rps"]
    # PDWATT_KERNELS is the default folder; the text output names the source
    monkeypatch.setenv("PDWATT_KERNELS", str(root))
    code, out, err = run(capsys, H100_KERNELS)
    assert code == 0, err
    assert "performance: kernels, vllm" in out and "decode t_D(B)" in out
    # another version of the tables, named per GPU
    other = run_json(capsys, [*H100_KERNELS, "--kernel-version", "h100-sxm=0.24.0", "--json"])
    assert other["performance"]["kernels"]["version"] == "0.24.0"
    code, _, err = run(capsys, [*H100_KERNELS, "--kernel-version", "h100-sxm=9.9"])
    assert code == 2 and "error: --kernel-version: no h100-sxm tables of version '9.9'" in err


def test_the_default_workload_composes_on_h100(capsys):
    """azure-conv-2023's longest prompt (14,088 tokens) is beyond H100 vLLM 0.14.0's
    GEMM table (8,192 tokens), but a prefill's GEMMs are taken from one full chunk and
    only its attention at the prompt's length, which that table measures."""
    root = kernel_tables()
    argv = [*H100_KERNELS, "--kernels", str(root)]
    argv[argv.index("fixed:4096:256")] = "azure-conv-2023"
    code, out, _ = run(capsys, argv)
    assert code == 0
    assert "l up to 14,088: within" in out
    assert "carries it beyond" not in out
