"""Per-configuration piecewise power tables and their cache (SPEC 2.6, 3)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.capacity import evaluate
from model.operations import SpecRequest, resolve_spec
from model.spec import with_settings
from model.tables import build_table, build_tables, clear_cache, table_key

# SPEC 2.1: Qwen3-32B on H200 power ramps (paper Tab. 3), W.
P0_P, GAMMA_P, PSAT_P = 133.0, 566.0, 692.0
P0_D, GAMMA_D, PSAT_D = 448.0, 458.0, 678.0
# SPEC 2.2 coefficients typed from the SPEC numbers.
A_P = 2 * 32.8e9 / (989e12 * 0.67)
B_P = 2.17 * 64 * 8192 / (989e12 * 0.67)

WORKLOADS = ("fixed:4096:256", "azure-conv-2023", "mooncake", "fixed:512:1")
SPECS = {w: resolve_spec(SpecRequest(workload=w)) for w in WORKLOADS}


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


configs = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(WORKLOADS),
    configs,
    st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=8),
)
def test_breakpoints_interpolate_the_power_curve(workload, cfgs, fractions):
    spec = SPECS[workload]
    n_p = np.array([a for a, _ in cfgs])
    n_d = np.array([b for _, b in cfgs])
    table = build_table(spec, n_p, n_d)
    r = table.result
    for i in range(len(cfgs)):
        loads, powers = table.breakpoints(i)
        mu = float(r.capacity_rps[i])
        assert loads[0] == 0.0
        assert loads[-1] == mu
        assert len(loads) == len(powers) <= 4
        assert np.all(np.diff(loads) > 0)
        if mu == 0.0:
            assert len(loads) == 1
        # SPEC 3: interior breakpoints are the loads where a ramp saturates, inside (0, mu):
        # lambda = (psat - p0)/gamma * n mu for each phase.
        sat = []
        if n_p[i] > 0:
            sat.append((PSAT_P - P0_P) / GAMMA_P * n_p[i] * float(r.mu_p_rps[i]))
        if n_d[i] > 0 and np.isfinite(r.mu_d_max_rps[i]):
            sat.append((PSAT_D - P0_D) / GAMMA_D * n_d[i] * float(r.mu_d_max_rps[i]))
        inner = sorted(s for s in sat if 0 < s < mu)
        np.testing.assert_allclose(loads[1:-1], inner, rtol=1e-12)
        # concave: slopes non-increasing
        if len(loads) > 2:
            slopes = np.diff(powers) / np.diff(loads)
            assert np.all(np.diff(slopes) <= 1e-9 * np.abs(slopes[:-1]))
        # P(lambda) from evaluate equals linear interpolation of the breakpoints
        lam = np.asarray(fractions) * mu
        k = lam.size
        direct = evaluate(spec, np.full(k, n_p[i]), np.full(k, n_d[i]), load_rps=lam).power_w
        np.testing.assert_allclose(direct, np.interp(lam, loads, powers), rtol=1e-9)
        # the end points are P(0) and P(mu) of the table
        assert powers[0] == pytest.approx(r.power_idle_w[i], rel=1e-12)
        assert powers[-1] == pytest.approx(r.power_w[i], rel=1e-12)


@pytest.mark.parametrize(("n_p", "n_d"), [(0, 0), (0, 4), (3, 0)])
def test_config_with_an_absent_phase_has_a_single_breakpoint(n_p, n_d):
    table = build_table(SPECS["fixed:4096:256"], [n_p, 1], [n_d, 1])
    loads, powers = table.breakpoints(0)
    assert loads == [0.0]
    assert powers == [pytest.approx(n_p * P0_P + n_d * P0_D, rel=1e-12)]
    assert int(table.bp_count[0]) == 1
    assert len(table.breakpoints(1)[0]) >= 2


def test_no_decode_work_breakpoints():
    # fixed:512:1: mu = n_P mu_P; prefill saturates at 559/566 of it, decode stays at p0_D.
    mu_p = 1 / (A_P * 512 + B_P * 512**2)
    table = build_table(SPECS["fixed:512:1"], [2], [3])
    loads, powers = table.breakpoints(0)
    assert loads == pytest.approx([0.0, (PSAT_P - P0_P) / GAMMA_P * 2 * mu_p, 2 * mu_p], rel=1e-12)
    assert powers == pytest.approx(
        [2 * P0_P + 3 * P0_D, 2 * PSAT_P + 3 * P0_D, 2 * PSAT_P + 3 * P0_D], rel=1e-12
    )


def test_records_carry_breakpoints():
    table = build_table(SPECS["fixed:4096:256"], [1, 2], [1, 1])
    recs = table.records()
    assert len(recs) == 2
    for i, rec in enumerate(recs):
        loads, powers = table.breakpoints(i)
        assert [b["load_rps"] for b in rec["breakpoints"]] == loads
        assert [b["power_w"] for b in rec["breakpoints"]] == powers
        assert rec["capacity_rps"] == loads[-1]


# ---- cache (SPEC 3: keyed by a hash of the inputs) -------------------------------------


def test_cache_returns_the_same_object_for_identical_inputs():
    spec = SPECS["azure-conv-2023"]
    t1 = build_table(spec, [1, 2, 3], [1, 1, 2])
    t2 = build_table(spec, np.array([1, 2, 3]), np.array([1, 1, 2]))
    assert t2 is t1
    # an equal spec resolved again hashes the same
    t3 = build_table(resolve_spec(SpecRequest(workload="azure-conv-2023")), [1, 2, 3], [1, 1, 2])
    assert t3 is t1


def _replace(spec, section, **changes):
    return dataclasses.replace(
        spec, **{section: dataclasses.replace(getattr(spec, section), **changes)}
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda s: _replace(s, "calibration", mfu=0.6),
        lambda s: _replace(s, "calibration", p0_decode_w=400.0),
        lambda s: _replace(s, "serving", reserved_tokens=256),
        lambda s: _replace(s, "serving", dispatch="random"),
        lambda s: _replace(s, "gpu", mem_bw_bytes_per_s=4.0e12),
        lambda s: _replace(s, "model", params=30e9),
        lambda s: dataclasses.replace(s, workload=SPECS["mooncake"].workload),
    ],
)
def test_cache_misses_when_any_input_changes(change):
    spec = SPECS["fixed:4096:256"]
    base = build_table(spec, [1, 2], [1, 3])
    other = build_table(change(spec), [1, 2], [1, 3])
    assert other is not base
    assert other.key != base.key
    assert not np.array_equal(other.result.power_w, base.result.power_w)
    assert build_table(spec, [1, 2], [1, 3]) is base


def test_cache_drops_the_least_recently_used_table_not_the_first_built():
    from model.tables import CACHE_SIZE

    spec = SPECS["fixed:4096:256"]
    first = build_table(spec, [1], [1])
    second = build_table(spec, [1], [2])
    for n in range(3, CACHE_SIZE + 1):  # the cache full
        build_table(spec, [1], [n])
    assert build_table(spec, [1], [1]) is first  # used again: now the most recent
    build_table(spec, [1], [CACHE_SIZE + 1])  # one more: the least recently used goes
    assert build_table(spec, [1], [1]) is first
    assert build_table(spec, [1], [2]) is not second


def test_cache_misses_when_candidates_change():
    spec = SPECS["fixed:4096:256"]
    base = build_table(spec, [1, 2], [1, 3])
    assert build_table(spec, [1, 2], [1, 4]) is not base
    assert build_table(spec, [2, 1], [3, 1]) is not base
    assert build_table(spec, [1, 2, 1], [1, 3, 1]) is not base
    # boundary between the n_p and n_d lists is part of the key
    assert table_key(spec, [1, 2], [3]) != table_key(spec, [1], [2, 3])


def test_changed_calibration_gives_fresh_numbers():
    # SPEC 2.2 with MFU = 0.6 instead of 0.67: mu_P = 1 / (a_P 4096 + b_P 4096^2)
    spec = _replace(SPECS["fixed:4096:256"], "calibration", mfu=0.6)
    build_table(SPECS["fixed:4096:256"], [1], [1])
    table = build_table(spec, [1], [1])
    a_p = 2 * 32.8e9 / (989e12 * 0.6)
    b_p = 2.17 * 64 * 8192 / (989e12 * 0.6)
    assert table.result.mu_p_rps[0] == pytest.approx(1 / (a_p * 4096 + b_p * 4096**2), rel=1e-12)


def _table_arrays(t):
    out = [t.bp_load_rps, t.bp_power_w, t.bp_count, t.bp_prefill_power_w]
    out += [v for v in vars(t.result).values() if isinstance(v, np.ndarray)]
    return out


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(WORKLOADS + ("azure-code-2023",)),
    st.sampled_from(("admission", "paper")),
    st.sampled_from((None, "1590MHz", "1185MHz")),
    st.sampled_from((None, "1590MHz", "1185MHz")),
    st.lists(configs, min_size=1, max_size=6),
)
def test_build_tables_gives_each_list_the_table_build_table_gives(
    workload, variant, prefill, decode, grids
):
    # one evaluation over the concatenated lists must give every row bit for bit what
    # evaluating its own list does: the capacity model treats configurations one by one
    spec = with_settings(
        resolve_spec(SpecRequest(gpu="h200", workload=workload, model_variant=variant)),
        prefill,
        decode,
    )
    lists = [([a for a, _ in g], [b for _, b in g]) for g in grids]
    batched = build_tables(spec, lists)
    assert len(batched) == len(lists)
    for (n_p, n_d), table in zip(lists, batched, strict=True):
        clear_cache()
        alone = build_table(spec, n_p, n_d)
        assert table.key == alone.key
        assert repr(table.result.coefficients) == repr(alone.result.coefficients)  # nan
        for x, y in zip(_table_arrays(table), _table_arrays(alone), strict=True):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)  # NaN where NaN, every other bit equal
    clear_cache()
    first = build_tables(spec, lists)
    again = build_tables(spec, lists)  # cached: the same objects
    assert all(a is b for a, b in zip(again, first, strict=True))
