"""Workloads: moments, traces, presets and workload strings (SPEC 2.4, 2.5, 2.8, 6.1)."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.errors import InputError, NotFoundError
from model.workload import (
    Workload,
    file_sha256,
    list_presets,
    load_preset,
    load_trace,
    parse_workload,
    presets_summary,
)
from tests.conftest import shared_data_file

MOMENTS = ("mean_in", "e_in2", "e_in3", "e_in4", "mean_out", "e_out2", "e_in_out", "max_tokens")
THIRD = ("e_in2_out", "e_in_out2", "e_out3")

# ---- SPEC 2.4: residence-weighted context --------------------------------------------


def test_spec_2_4_toy_example() -> None:
    # SPEC 2.4 "Check": l_in uniform on {2, 4}, l_out = 3 gives ctx = 4.5.
    w = Workload.from_samples([2, 4], [3, 3], name="toy", source="SPEC 2.4")
    assert w.mean_in == 3.0
    assert w.e_in2 == 10.0  # (4 + 16) / 2
    assert w.e_in3 == 36.0  # (8 + 64) / 2
    assert w.e_in4 == 136.0  # (16 + 256) / 2
    assert w.e_out_m1 == 2.0
    assert w.ctx_tokens == 4.5
    assert w.n_requests == 2
    assert w.max_tokens == 7.0


@pytest.mark.parametrize(
    ("l_in", "l_out"),
    [(1024, 256), (2048, 256), (4096, 256), (8192, 256), (1, 2), (7, 3), (100_000, 4_001)],
)
def test_fixed_ctx_is_l_in_plus_half_l_out(l_in: int, l_out: int) -> None:
    # Every request holds l_in + l_out/2 on average over its l_out - 1 iterations (SPEC 2.4).
    w = Workload.fixed(l_in, l_out)
    assert w.ctx_tokens == l_in + l_out / 2
    assert w.name == f"fixed:{l_in}:{l_out}"
    assert w.var_in == 0.0
    assert w.var_out == 0.0
    assert w.cov_in_out == 0.0
    assert w.max_tokens == l_in + l_out


def test_fixed_4096_256_ctx_value() -> None:
    assert Workload.fixed(4096, 256).ctx_tokens == 4224.0


def test_ctx_matches_covariance_form() -> None:
    # SPEC 2.4, second line: E[l_in] + E[l_out]/2 + Cov/E[l_out-1] + Var(l_out)/(2 E[l_out-1]).
    rng = np.random.default_rng(7)
    l_in = rng.integers(1, 20_000, size=500)
    l_out = rng.integers(1, 900, size=500)
    w = Workload.from_samples(l_in, l_out, name="random")
    alt = w.mean_in + w.mean_out / 2 + w.cov_in_out / w.e_out_m1 + w.var_out / (2 * w.e_out_m1)
    assert w.ctx_tokens == pytest.approx(alt, rel=1e-9)
    exact = sum(
        Fraction(int(o) - 1) * (int(i) + Fraction(int(o), 2))
        for i, o in zip(l_in, l_out, strict=True)
    ) / sum(int(o) - 1 for o in l_out)
    assert w.ctx_tokens == pytest.approx(float(exact), rel=1e-12)


def test_l_out_one_requests_weigh_zero_in_ctx() -> None:
    # SPEC 2.5: requests with l_out = 1 "weigh 0 in ctx".
    w = Workload.from_samples([10, 100], [1, 3], name="mixed")
    assert w.ctx_tokens == 101.5


def test_all_l_out_one_has_no_ctx() -> None:
    w = Workload.from_samples([5, 9], [1, 1], name="prefill-only")
    assert w.e_out_m1 == 0.0
    assert math.isnan(w.ctx_tokens)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 200_000), st.integers(1, 5_000)), min_size=1, max_size=40))
def test_ctx_is_a_weighted_mean(pairs: list[tuple[int, int]]) -> None:
    # ctx is a mean of l_in + l_out/2 weighted by l_out - 1 >= 0, so it lies in their range.
    l_in = [i for i, _ in pairs]
    l_out = [o for _, o in pairs]
    w = Workload.from_samples(l_in, l_out, name="h")
    decoding = [i + o / 2 for i, o in pairs if o > 1]
    if not decoding:
        assert math.isnan(w.ctx_tokens)
    else:
        tol = 1e-9 * max(decoding)
        assert min(decoding) - tol <= w.ctx_tokens <= max(decoding) + tol
    assert w.var_in >= 0.0
    assert w.var_out >= 0.0
    assert Workload.from_dict(w.to_dict()) == w


def test_from_samples_moments_are_exact() -> None:
    # Sums of l^4 overflow int64 for l ~ 1e5; the moments must still be correctly rounded.
    l_in = [126_195, 99_999, 1, 65_537, 123_457]
    l_out = [2_000, 1, 17, 350, 999]
    w = Workload.from_samples(np.asarray(l_in), np.asarray(l_out), name="big")
    n = len(l_in)
    for k, attr in enumerate(("mean_in", "e_in2", "e_in3", "e_in4"), start=1):
        assert getattr(w, attr) == float(Fraction(sum(x**k for x in l_in), n))
    assert w.e_in_out == float(Fraction(sum(i * o for i, o in zip(l_in, l_out, strict=True)), n))
    assert w.max_tokens == 128_195.0
    pairs = list(zip(l_in, l_out, strict=True))
    assert w.e_in2_out == float(Fraction(sum(i * i * o for i, o in pairs), n))
    assert w.e_in_out2 == float(Fraction(sum(i * o * o for i, o in pairs), n))
    assert w.e_out3 == float(Fraction(sum(o**3 for _, o in pairs), n))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 5000), st.integers(1, 700)), min_size=1, max_size=12).filter(
        lambda p: any(o > 1 for _, o in p)
    )
)
def test_ctx_second_moment_over_iterations(pairs: list[tuple[int, int]]) -> None:
    """``ctx_e2_tokens2`` is the mean of ``(l_in + k)^2`` over every decode iteration
    ``k = 1..l_out - 1`` of every request (SPEC 2.4's iterations), counted one by one."""
    l_in = [i for i, _ in pairs]
    l_out = [o for _, o in pairs]
    w = Workload.from_samples(l_in, l_out, name="iters")
    contexts = [i + k for i, o in pairs for k in range(1, o)]
    assert w.ctx_e2_tokens2 == pytest.approx(
        float(Fraction(sum(c * c for c in contexts), len(contexts))), rel=1e-9
    )
    # its first moment is SPEC 2.4's ctx
    assert w.ctx_tokens == pytest.approx(float(Fraction(sum(contexts), len(contexts))), rel=1e-12)


def test_fixed_third_moments_and_ctx_second_moment() -> None:
    w = Workload.fixed(4096, 256)
    assert (w.e_in2_out, w.e_in_out2, w.e_out3) == (4096.0**2 * 256, 4096.0 * 256**2, 256.0**3)
    contexts = 4096 + np.arange(1, 256)
    assert w.ctx_e2_tokens2 == pytest.approx(float(np.mean(contexts.astype(float) ** 2)), rel=1e-12)
    assert math.isnan(Workload.fixed(4096, 1).ctx_e2_tokens2)  # no decode work


def test_third_moments_are_optional_all_or_none() -> None:
    full = Workload.from_samples([2, 4, 9], [3, 1, 40], name="rt").to_dict()
    bare = {k: v for k, v in full.items() if k not in THIRD}
    w = Workload.from_dict(bare)
    assert w.e_out3 is None and math.isnan(w.ctx_e2_tokens2)
    assert not set(THIRD) & set(w.to_dict())  # left out, not written as null
    assert set(THIRD) <= set(Workload.from_dict(full).to_dict())
    partial = {**bare, "e_in2_out": full["e_in2_out"], "e_out3": full["e_out3"]}
    with pytest.raises(InputError, match="e_in_out2") as err:
        Workload.from_dict(partial)
    assert err.value.field == "e_in_out2"


@pytest.mark.parametrize(
    ("field", "factor"),
    [("e_out3", 0.5), ("e_in2_out", 0.5), ("e_in_out2", 0.5), ("e_out3", 1e12)],
)
def test_third_moments_are_checked(field: str, factor: float) -> None:
    d = Workload.fixed(2048, 256).to_dict()
    d[field] *= factor
    with pytest.raises(InputError) as err:
        Workload.from_dict(d)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("l_in", "l_out", "field"),
    [
        ([1, 0], [3, 3], "l_in"),
        ([2, 2], [3, -1], "l_out"),
        ([2.5], [3], "l_in"),
        ([2], [3, 4], "l_out"),
        ([], [], "l_in"),
        ([True], [3], "l_in"),
    ],
)
def test_from_samples_rejects_bad_lengths(
    l_in: list[float], l_out: list[float], field: str
) -> None:
    with pytest.raises(InputError) as err:
        Workload.from_samples(l_in, l_out, name="bad")
    assert err.value.field == field


@pytest.mark.parametrize(("l_in", "l_out"), [(0, 256), (1024, 0), (-1, 3)])
def test_fixed_rejects_non_positive(l_in: int, l_out: int) -> None:
    with pytest.raises(InputError):
        Workload.fixed(l_in, l_out)


@pytest.mark.parametrize(
    "text", ["fixed:\u0664\u0660\u0669\u0666:256", "fixed: 4096 : 256", "fixed:4_096:256",
             "fixed:+4096:256", "fixed:4096:9" * 1 + "9" * 20],
)  # fmt: skip
def test_fixed_reads_ascii_digits_only(text: str) -> None:
    """int() reads other scripts' digits, spaces and underscores: "fixed:\u0664..." was
    answered as fixed:4096:256, a name other than the one sent."""
    with pytest.raises(InputError, match="digits 0-9") as err:
        parse_workload(text)
    assert err.value.field == "workload"
    assert parse_workload("fixed:4096:256").name == "fixed:4096:256"


# ---- explicit moments -----------------------------------------------------------------


def test_from_dict_round_trip() -> None:
    w = Workload.from_samples([2, 4, 9], [3, 1, 40], name="rt", source="test")
    d = w.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert Workload.from_dict(d) == w


def _valid_moments() -> dict[str, float]:
    return {k: v for k, v in Workload.fixed(2048, 256).to_dict().items() if k in MOMENTS}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("mean_in", 0.5),
        ("mean_out", 0.0),
        ("e_in2", 2048.0**2 * 0.99),
        ("e_out2", 100.0),
        ("e_in4", 2048.0**4 * 0.5),
        ("e_in3", 2048.0**3 * 0.5),
        ("mean_in", math.nan),
        ("e_in_out", math.inf),
        ("max_tokens", 100.0),
        ("e_in_out", 2048.0 * 256 * 3),
    ],
)
def test_from_dict_rejects_inconsistent_moments(field: str, value: float) -> None:
    d = _valid_moments()
    d[field] = value
    with pytest.raises(InputError) as err:
        Workload.from_dict(d)
    assert err.value.field in MOMENTS


def test_from_dict_names_missing_and_unknown_keys() -> None:
    d = _valid_moments()
    del d["e_in3"]
    with pytest.raises(InputError, match="e_in3") as err:
        Workload.from_dict(d)
    assert err.value.field == "e_in3"
    d = {**_valid_moments(), "e_in_2": 1.0}
    with pytest.raises(InputError, match="e_in_2"):
        Workload.from_dict(d)
    with pytest.raises(InputError):
        Workload.from_dict({**_valid_moments(), "mean_in": "2048"})


def test_from_dict_rejects_impossible_fourth_moment() -> None:
    # Hankel matrix of (1, l, l^2) not PSD although each 2x2 check passes:
    # l in {1, 3} equally likely has m = 2, 5, 14, 41; lowering m4 makes Var(l^2 - 4l) < 0.
    d = {
        "mean_in": 2.0,
        "e_in2": 5.0,
        "e_in3": 14.0,
        "e_in4": 40.0,
        "mean_out": 2.0,
        "e_out2": 4.0,
        "e_in_out": 4.0,
        "max_tokens": 5.0,
    }
    assert 40.0 >= 14.0**2 / 5.0  # the simple Cauchy-Schwarz bound holds
    with pytest.raises(InputError, match="positive semidefinite"):
        Workload.from_dict(d)
    Workload.from_dict({**d, "e_in4": 41.0})  # the true value is accepted


# ---- workload strings (SPEC 6.1) ------------------------------------------------------


def test_parse_fixed() -> None:
    assert parse_workload("fixed:4096:256") == Workload.fixed(4096, 256)
    assert parse_workload(" fixed:1024:256 ") == Workload.fixed(1024, 256)


@pytest.mark.parametrize(
    "spec",
    [
        "fixed:abc:256",
        "fixed:4096",
        "fixed:1:2:3",
        "fixed:0:256",
        "fixed:4096:-1",
        "fixed:4096.5:256",
        "fixed::",
    ],
)
def test_parse_fixed_rejects_bad_ints(spec: str) -> None:
    with pytest.raises(InputError) as err:
        parse_workload(spec)
    assert err.value.field == "workload"
    assert not isinstance(err.value, NotFoundError)


def test_parse_presets() -> None:
    for name in ("azure-conv-2023", "azure-code-2023", "mooncake"):
        assert name in list_presets()
        assert parse_workload(name) == load_preset(name)
        assert parse_workload(name.upper()).name == name
    assert parse_workload("fixed-4096-256") == Workload.fixed(4096, 256)


def test_parse_unknown_lists_presets_and_forms() -> None:
    with pytest.raises(NotFoundError) as err:
        parse_workload("azure-2099")
    assert err.value.field == "workload"
    assert "mooncake" in err.value.known
    assert "fixed:IN:OUT" in err.value.known
    assert "trace:PATH" in err.value.known
    with pytest.raises(NotFoundError):
        load_preset("nope")


def test_parse_trace_and_moments(tmp_path: Path) -> None:
    trace = tmp_path / "small.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0.0,2,3\n1.5,4,3\n")
    w = parse_workload(f"trace:{trace}", read_files=True)
    assert w.ctx_tokens == 4.5
    assert w.name == "trace:small.csv"
    assert file_sha256(trace) in w.source
    moments = tmp_path / "w.json"
    moments.write_text(json.dumps(_valid_moments()))
    m = parse_workload(f"moments:{moments}", read_files=True)
    assert m.ctx_tokens == 2048 + 128
    assert m.name == "moments:w.json"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="bad.json"):
        parse_workload(f"moments:{bad}", read_files=True)
    with pytest.raises(InputError, match="not found"):
        parse_workload(f"trace:{tmp_path / 'absent.csv'}", read_files=True)
    # without read_files (every request), the same strings are refused unread
    with pytest.raises(InputError, match="never read"):
        parse_workload(f"trace:{trace}")


def test_presets_summary_is_json_with_provenance() -> None:
    summary = presets_summary()
    text = json.dumps(summary, allow_nan=False)
    assert json.loads(text) == summary
    presets = summary["presets"]
    assert set(presets) == set(list_presets())
    assert presets["mooncake"]["provenance"]["upstream"]["license"] == "Apache-2.0"
    assert presets["azure-conv-2023"]["provenance"]["upstream"]["license"] == "CC-BY-4.0"
    assert presets["fixed-1024-256"]["ctx_tokens"] == 1152.0
    summary["presets"]["mooncake"]["provenance"]["rows"] = -1  # callers get a copy
    assert presets_summary()["presets"]["mooncake"]["provenance"]["rows"] == 12031


# ---- invalid trace files --------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        ("arrival_s,input_tokens\n0,5\n", ["missing column 'output_tokens'", "t.csv"]),
        ("input_tokens,output_tokens\n5,3\n0,3\n", ["data row 2", "input_tokens", ">= 1"]),
        ("input_tokens,output_tokens\n5,3\n6,-2\n", ["data row 2", "output_tokens", ">= 1"]),
        (
            "input_tokens,output_tokens\n5,3\n6,2.5\n",
            ["data row 2", "output_tokens", "not an integer"],
        ),
        ("input_tokens,output_tokens\n5,abc\n", ["data row 1", "output_tokens"]),
        ("input_tokens,output_tokens\n5,\n", ["data row 1", "output_tokens"]),
        ("input_tokens,output_tokens\n5,3\n7\n", ["data row 2", "output_tokens"]),
        ("", ["t.csv", "empty"]),
        ("input_tokens,output_tokens\n", ["t.csv", "no requests"]),
    ],
)
def test_invalid_csv_traces(tmp_path: Path, content: str, needles: list[str]) -> None:
    path = tmp_path / "t.csv"
    path.write_text(content)
    with pytest.raises(InputError) as err:
        load_trace(path)
    assert err.value.field == "trace"
    for needle in needles:
        assert needle in str(err.value)
    assert str(tmp_path) not in str(err.value)  # only the file name, not the server path


@pytest.mark.parametrize(
    ("lines", "needles"),
    [
        (
            ['{"input_length": 5, "output_length": 3}', '{"input_length": 5, "output_length"'],
            ["line 2", "not valid JSON"],
        ),
        (
            ['{"input_length": 5, "output_length": 3}', "", '{"input_length": 5}'],
            ["line 3", "output_length"],
        ),
        (['{"input_length": 0, "output_length": 3}'], ["line 1", "input_length", ">= 1"]),
        (['{"input_length": 5, "output_length": 1.5}'], ["line 1", "output_length"]),
        (['{"input_length": true, "output_length": 3}'], ["line 1", "input_length"]),
        (["[5, 3]"], ["line 1", "JSON object"]),
        ([""], ["no requests"]),
    ],
)
def test_invalid_jsonl_traces(tmp_path: Path, lines: list[str], needles: list[str]) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as err:
        load_trace(path)
    for needle in needles:
        assert needle in str(err.value)


def test_unsupported_extension(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(b"")
    with pytest.raises(InputError, match="t.parquet"):
        load_trace(path)


def test_mooncake_jsonl_loader(tmp_path: Path) -> None:
    # The Mooncake FAST'25 release format: one object per line, extra fields ignored.
    path = tmp_path / "conversation_trace.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]},
        {"timestamp": 0, "input_length": 7322, "output_length": 490, "hash_ids": [2]},
        {"timestamp": 3000, "input_length": 891, "output_length": 1, "hash_ids": []},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    l_in, l_out = load_trace(path)
    assert l_in.tolist() == [6758, 7322, 891]
    assert l_out.tolist() == [500, 490, 1]
    assert l_in.dtype == np.int64
    w = Workload.from_samples(l_in, l_out, name="m")
    assert w.mean_in == pytest.approx((6758 + 7322 + 891) / 3, rel=1e-15)
    assert w.max_tokens == 7812.0


def test_csv_loader_ignores_extra_columns_and_order(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("output_tokens,arrival_s,input_tokens,note\n3,0.0,2,a\n3,0.5,4,b\n")
    l_in, l_out = load_trace(path)
    assert l_in.tolist() == [2, 4]
    assert l_out.tolist() == [3, 3]


# ---- the public traces and the shipped presets (data README, SPEC 2.8) ----------------

# From the "Summary statistics" tables of the trace data README: rows, then
# (mean, std with ddof = 1) of input and output tokens, Cov (ddof = 1), corr.
README_STATS = {
    "azure_conv_2023.csv": (19_366, (1_154.70, 1_108.82), (211.13, 162.87), -20_290.3, -0.1124),
    "azure_code_2023.csv": (8_819, (2_047.85, 1_973.88), (27.88, 59.86), 136.2, 0.0012),
    "mooncake_conversation.csv": (
        12_031,
        (12_035.06, 15_801.00),
        (342.62, 249.92),
        283_844.0,
        0.0719,
    ),
    "mooncake_synthetic.csv": (
        3_993,
        (15_325.48, 18_382.46),
        (149.12, 178.17),
        -1_225_246.1,
        -0.3741,
    ),
}

PRESET_FILES = {
    "azure-conv-2023": "azure_conv_2023.csv",
    "azure-code-2023": "azure_code_2023.csv",
    "mooncake": "mooncake_conversation.csv",
}


@pytest.mark.parametrize("file_name", sorted(README_STATS))
def test_trace_matches_data_readme(file_name: str) -> None:
    rows, (mean_in, std_in), (mean_out, std_out), cov, corr = README_STATS[file_name]
    l_in, l_out = load_trace(shared_data_file(file_name))
    assert len(l_in) == len(l_out) == rows
    w = Workload.from_samples(l_in, l_out, name=file_name)
    sample = rows / (rows - 1)  # population -> sample (ddof = 1) variance
    # The README rounds means and stds to 2 decimals, Cov to 1 and corr to 4.
    assert w.mean_in == pytest.approx(mean_in, abs=0.01)
    assert w.mean_out == pytest.approx(mean_out, abs=0.01)
    assert math.sqrt(w.var_in * sample) == pytest.approx(std_in, abs=0.01)
    assert math.sqrt(w.var_out * sample) == pytest.approx(std_out, abs=0.01)
    assert w.cov_in_out * sample == pytest.approx(cov, abs=0.1)
    assert w.cov_in_out / math.sqrt(w.var_in * w.var_out) == pytest.approx(corr, abs=1e-4)


def _shipped_catalog() -> dict:
    path = Path(__file__).resolve().parents[2] / "model" / "data" / "workloads.json"
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("preset", sorted(PRESET_FILES))
def test_shipped_preset_equals_fresh_derivation(preset: str) -> None:
    path = shared_data_file(PRESET_FILES[preset])
    entry = _shipped_catalog()["presets"][preset]
    assert entry["provenance"]["source_file"] == path.name
    assert entry["provenance"]["source_sha256"] == file_sha256(path)
    l_in, l_out = load_trace(path)
    assert entry["provenance"]["rows"] == len(l_in)
    fresh = Workload.from_samples(l_in, l_out, name=preset)
    shipped = load_preset(preset)
    assert shipped.n_requests == fresh.n_requests == len(l_in)
    for attr in (*MOMENTS, *THIRD):
        assert getattr(shipped, attr) == pytest.approx(getattr(fresh, attr), rel=1e-12), attr
    # SPEC 2.8 / data README: the mooncake preset is the FAST'25 conversation trace,
    # whose release README states mean input 12,035 and mean output 343.
    if preset == "mooncake":
        assert round(shipped.mean_in) == 12_035
        assert round(shipped.mean_out) == 343


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", 1e300),  # beyond MAX_TOKENS
        ("e_in4", 1.2e308),  # > max_tokens**4 (2304**4)
        ("e_in2", 6.5e307),
        ("e_out2", 1e20),
        ("e_in_out", 1e52),
        ("mean_in", 1e16),
    ],
)
def test_huge_moments_are_refused_not_overflowed(field: str, value: float) -> None:
    """Every length is at most max_tokens, so E[l^k] <= max_tokens^k: huge moments are
    refused naming the field (they once overflowed the consistency checks)."""
    with pytest.raises(InputError) as err:
        Workload.from_dict({**_valid_moments(), field: value})
    assert err.value.field == field


def test_third_moments_on_their_bounds() -> None:
    """Fixed lengths sit on every Cauchy-Schwarz bound of the third moments (written out
    here from the second moments) and are accepted; just below one of them is refused,
    naming it."""
    d = Workload.fixed(2048, 256).to_dict()
    d["e_in_out2"] = d["e_in_out"] ** 2 / d["mean_in"]
    d["e_in2_out"] = d["e_in_out"] ** 2 / d["mean_out"]
    d["e_out3"] = d["e_out2"] ** 2 / d["mean_out"]
    ok = Workload.from_dict(d)
    assert ok.ctx_e2_tokens2 >= ok.ctx_tokens**2 * (1 - 1e-9)
    d["e_in2_out"] *= 1.0 - 1e-3
    with pytest.raises(InputError) as err:
        Workload.from_dict(d)
    assert err.value.field == "e_in2_out"
