"""Readers of serving measurements (model.measured.measurements): the published ML.ENERGY files
as they are, the generic CSV, and clear errors for bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model.errors import InputError
from model.measured.measurements import CSV_REQUIRED, read_measurements
from tests.conftest import shared_data_file

HEADER = "model,gpu,tp,batch,itl_ms,prompt_tokens,output_tokens,power_w,stack,task\n"


def test_reads_a_published_mlenergy_file_as_it_is() -> None:
    path = shared_data_file("mlenergy/Qwen__Qwen3-8B__lm-arena-chat.json")
    raw = json.loads(path.read_text())
    rows = read_measurements([path])
    assert len(rows) == len(raw["configurations"])
    for r, c in zip(rows, raw["configurations"], strict=True):
        assert r.model == "Qwen/Qwen3-8B"
        assert r.gpu == {"H100": "h100-sxm", "B200": "b200"}[c["gpu_model"]]
        assert r.tp == c["parallelization"]["tensor_parallel"]
        assert r.batch == c["avg_batch_size"]
        assert r.itl_s == pytest.approx(c["median_itl_ms"] / 1e3)
        # the file gives power summed over the server's GPUs: per GPU here
        assert r.power_w == pytest.approx(c["avg_power_watts"] / c["num_gpus"])
        assert r.prompt_tokens is None  # ML.ENERGY files give no prompt lengths
        assert r.task == "lm-arena-chat" and r.precision == "bf16" and r.architecture == "dense"
    # the output histogram weights long requests: E[l^2]/E[l] exceeds the mean
    assert rows[0].output_weighted_tokens > rows[0].output_tokens


def test_every_published_file_reads(shared_data_dir: Path) -> None:
    files = sorted((shared_data_dir / "mlenergy").glob("*.json"))
    if not files:
        pytest.skip("no ML.ENERGY files")
    rows = read_measurements(files)
    total = sum(len(json.loads(f.read_text())["configurations"]) for f in files)
    assert len(rows) == total
    assert {r.precision for r in rows} >= {"bf16", "fp8", "mxfp4"}
    assert {r.architecture for r in rows} == {"dense", "moe", "hybrid"}


def test_generic_csv(tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    p.write_text(HEADER + "qwen3-8b,H100,1,32,10.5,900,300,500,vllm,chat\n")
    (r,) = read_measurements([p])
    assert (r.model, r.gpu, r.tp, r.ep, r.batch) == ("qwen3-8b", "h100-sxm", 1, 1, 32.0)
    assert r.itl_s == pytest.approx(0.0105) and r.prompt_tokens == 900 and r.power_w == 500


@pytest.mark.parametrize(
    ("text", "where", "field"),
    [
        ("model,gpu,tp,batch,itl_ms,output_tokens\n", "header", "prompt_tokens"),
        (HEADER + "qwen3-8b,h100,1,32,10,900,300,-5,vllm,chat\n", "line 2", "power_w"),
        (HEADER + "qwen3-8b,h100,1,32,abc,900,300,500,vllm,chat\n", "line 2", "itl_ms"),
        (HEADER + "qwen3-8b,tpu,1,32,10,900,300,500,vllm,chat\n", "line 2", "gpu"),
        (HEADER + "qwen3-8b,h100,1.5,32,10,900,300,500,vllm,chat\n", "line 2", "tp"),
        (HEADER.replace("task", "colour") + "x,h100,1,1,1,1,1,1,v,c\n", "header", "colour"),
        (HEADER, "", "rows"),
        (
            HEADER.replace("task", "task,ep") + "qwen3-8b,h100,2,32,10,900,300,500,v,c,3\n",
            "line 2",
            "ep",
        ),
    ],
)
def test_bad_csv_names_file_row_and_field(
    tmp_path: Path, text: str, where: str, field: str
) -> None:
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        read_measurements([p])
    assert e.value.field.startswith("bad.csv")
    assert where in e.value.field and field in e.value.field


def test_bad_mlenergy_row_names_the_configuration(tmp_path: Path) -> None:
    conf = {"gpu_model": "H100", "num_gpus": 1, "avg_batch_size": 8, "median_itl_ms": 9.0}
    conf |= {"avg_power_watts": -3.0, "avg_output_len": 600}
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"model_id": "Qwen/Qwen3-8B", "configurations": [conf]}))
    with pytest.raises(InputError, match="m.json: configurations\\[0\\].avg_power_watts"):
        read_measurements([p])
    p.write_text(json.dumps({"model_id": "x"}))
    with pytest.raises(InputError, match="configurations"):
        read_measurements([p])
    conf |= {"avg_power_watts": 300.0, "num_gpus": 4, "parallelization": {"expert_parallel": 3}}
    p.write_text(json.dumps({"model_id": "Qwen/Qwen3-8B", "configurations": [conf]}))
    with pytest.raises(InputError, match="expert_parallel"):
        read_measurements([p])


def test_required_columns_are_documented() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "calibration.md").read_text()
    for col in CSV_REQUIRED:
        assert f"`{col}`" in doc


# vLLM's benchmark_serving.py result (keys and date format as it writes them) and an
# nvidia-smi log (--query-gpu=timestamp,name,index,power.draw --format=csv)
BENCH = {
    "date": "20261201-101000",
    "backend": "vllm",
    "model_id": "Qwen/Qwen3-8B",
    "dataset_name": "sharegpt",
    "duration": 60.0,
    "completed": 200,
    "total_input_tokens": 40_000,
    "total_output_tokens": 60_000,
    "output_throughput": 1000.0,
    "mean_itl_ms": 32.0,
    "median_itl_ms": 30.0,
    "output_lens": [200, 400] * 100,
}
SMI = (
    "timestamp, name, index, power.draw [W]\n"
    "2026/12/01 10:08:00.000, NVIDIA H100 80GB HBM3, 0, 100.00 W\n"  # before the run
    "2026/12/01 10:09:10.000, NVIDIA H100 80GB HBM3, 0, 500.00 W\n"
    "2026/12/01 10:09:10.000, NVIDIA H100 80GB HBM3, 1, 520.00 W\n"
    "2026/12/01 10:09:40.000, NVIDIA H100 80GB HBM3, 0, 540.00 W\n"
    "2026/12/01 10:09:40.000, NVIDIA H100 80GB HBM3, 1, 560.00 W\n"
)


def test_bench_serving_result_with_its_power_log(tmp_path: Path) -> None:
    res, log = tmp_path / "bench.json", tmp_path / "smi.csv"
    res.write_text(json.dumps(BENCH))
    log.write_text(SMI)
    (r,) = read_measurements([res, log])
    assert (r.model, r.gpu, r.stack, r.tp) == ("Qwen/Qwen3-8B", "h100-sxm", "vllm", 2)
    assert r.itl_s == pytest.approx(0.030)
    # running batch: 1,000 output tokens/s x 32 ms between a request's tokens
    assert r.batch == pytest.approx(32.0)
    assert r.prompt_tokens == 200 and r.output_tokens == 300
    assert r.output_weighted_tokens == pytest.approx((200**2 + 400**2) / 600)
    # the run is the minute before its date: the 10:08 sample is left out
    assert r.power_w == pytest.approx((500 + 520 + 540 + 560) / 4)
    (named,) = read_measurements([res, log], gpu="h200", tp=2)
    assert (named.gpu, named.tp) == ("h200", 2)
    # a log of more GPUs than the run used would average idle ones in
    with pytest.raises(InputError) as e:
        read_measurements([res, log], tp=1)
    assert e.value.field == "bench.json: result.tp"
    bom = tmp_path / "m.csv"  # as a spreadsheet saves it
    bom.write_text("\ufeff" + HEADER + "qwen3-8b,H100,1,32,10.5,900,300,500,vllm,chat\n")
    (r,) = read_measurements([bom])
    assert r.model == "qwen3-8b"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"date": "yesterday"}, "bench.json: result.date"),
        ({"date": "20261201-120000"}, "bench.json: result.date"),  # no sample in the run
        ({"median_itl_ms": None}, "bench.json: result.median_itl_ms"),
        ({"completed": 0}, "bench.json: result.completed"),
    ],
)
def test_bad_bench_serving_results_are_named(
    tmp_path: Path, change: dict[str, object], field: str
) -> None:
    res, log = tmp_path / "bench.json", tmp_path / "smi.csv"
    res.write_text(json.dumps(BENCH | change))
    log.write_text(SMI)
    with pytest.raises(InputError) as e:
        read_measurements([res, log])
    assert e.value.field == field


def test_a_power_log_alone_or_broken_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "smi.csv"
    log.write_text(SMI)
    with pytest.raises(InputError, match="needs bench_serving results"):
        read_measurements([log])
    log.write_text(SMI.replace("540.00 W", "lots"))
    with pytest.raises(InputError) as e:
        read_measurements([log])
    assert e.value.field == "smi.csv: line 5.power.draw"


# dcgm-exporter's power through Prometheus: the JSON of
# /api/v1/query_range?query=DCGM_FI_DEV_POWER_USAGE (format of the Prometheus HTTP API;
# labels as dcgm-exporter sets them). The run of BENCH, 20261201-101000 local time on a
# machine at UTC+01:00, is 09:09:00 to 09:10:00 UTC = unix 1796116140 to 1796116200.
def _series(gpu: str, values: list[list[object]]) -> dict[str, object]:
    return {
        "metric": {
            "__name__": "DCGM_FI_DEV_POWER_USAGE",
            "gpu": gpu,
            "UUID": f"GPU-{gpu}",
            "modelName": "NVIDIA H100 80GB HBM3",
            "Hostname": "node-1",
        },
        "values": values,
    }


DCGM = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [
            _series("0", [[1796116080, "100"], [1796116150, "500"], [1796116180, "540"]]),
            _series("1", [[1796116150, "520.5"], [1796116180, "559.5"]]),
        ],
    },
}


def test_bench_serving_result_with_dcgm_power_from_prometheus(tmp_path: Path) -> None:
    res, log = tmp_path / "bench.json", tmp_path / "dcgm.json"
    res.write_text(json.dumps(BENCH))
    log.write_text(json.dumps(DCGM))
    (r,) = read_measurements([res, log], utc_offset="+01:00")
    assert (r.gpu, r.tp) == ("h100-sxm", 2)
    # the sample a minute before the run (09:08 UTC) is left out
    assert r.power_w == pytest.approx((500 + 540 + 520.5 + 559.5) / 4)
    # without the offset the run cannot be placed in a UTC log: refused, not guessed
    with pytest.raises(InputError, match="utc-offset") as e:
        read_measurements([res, log])
    assert e.value.field == "bench.json: result.date"
    # the wrong offset puts the run where the log has no sample
    with pytest.raises(InputError, match="no power sample"):
        read_measurements([res, log], utc_offset="-05:00")
    with pytest.raises(InputError) as e:
        read_measurements([res, log], utc_offset="1 hour")
    assert e.value.field == "utc_offset"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"status": "error"}, "dcgm.json: status"),
        ({"data": {"resultType": "vector", "result": []}}, "dcgm.json: data.resultType"),
        (
            {"data": {"resultType": "matrix", "result": [_series("x", [[1, "1"]])]}},
            "dcgm.json: data.result[0].metric.gpu",
        ),
        (
            {"data": {"resultType": "matrix", "result": [_series("0", [[1, "-3"]])]}},
            "dcgm.json: data.result[0].values[0].power",
        ),
        (
            {
                "data": {
                    "resultType": "matrix",
                    "result": [{"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0"}}],
                }
            },
            "dcgm.json: data.result[0].metric.__name__",
        ),
    ],
)
def test_bad_dcgm_logs_are_named(tmp_path: Path, change: dict[str, object], field: str) -> None:
    res, log = tmp_path / "bench.json", tmp_path / "dcgm.json"
    res.write_text(json.dumps(BENCH))
    log.write_text(json.dumps(DCGM | change))
    with pytest.raises(InputError) as e:
        read_measurements([res, log], utc_offset="+01:00")
    assert e.value.field == field
