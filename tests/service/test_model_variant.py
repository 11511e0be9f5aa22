"""``model_variant`` reaches the capacities on every surface: CLI, core routes, schedules."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from formulation.data import build_data
from formulation.demo import demo_request
from formulation.problem import problem_from_dict
from model.capacity import evaluate
from model.errors import InputError
from model.operations import SpecRequest, resolve_spec
from model.spec import DEFAULT_VARIANT
from service.cli.app import main


def _expected(variant: str, workload: str, n_p: int, n_d: int) -> float:
    spec = replace(resolve_spec(SpecRequest(workload=workload)), variant=variant)
    return float(evaluate(spec, n_p, n_d).capacity_rps[0])


@pytest.mark.parametrize("variant", ["paper", "admission"])
def test_cli_capacity_follows_the_flag(capsys, variant):
    args = ["capacity", "--workload", "mooncake", "--np", "1", "--nd", "1", "--json"]
    assert main([*args, "--model-variant", variant]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model_variant"] == variant
    assert out["capacity_rps"] == pytest.approx(_expected(variant, "mooncake", 1, 1), rel=1e-12)


def test_the_variants_differ_where_the_report_says_they_do():
    # docs/validation.md: mooncake 1P1D, paper -14.7% vs the simulator, admission about -2%
    assert _expected("admission", "mooncake", 1, 1) > 1.1 * _expected("paper", "mooncake", 1, 1)


@pytest.mark.parametrize("variant", ["paper", "admission"])
def test_capacity_route_takes_model_variant(client, variant):
    body = {"workload": "mooncake", "n_p": 2, "n_d": 2, "model_variant": variant}
    r = client.post("/v1/capacity", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["model_variant"] == variant
    assert r.json()["capacity_rps"] == pytest.approx(
        _expected(variant, "mooncake", 2, 2), rel=1e-12
    )


def test_unknown_variant_is_a_problem_naming_the_field(client):
    r = client.post("/v1/capacity", json={"n_p": 1, "n_d": 1, "model_variant": "exact"})
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "model_variant" in r.text


def test_schedule_deployments_carry_their_variant():
    other = next(v for v in ("paper", "admission") if v != DEFAULT_VARIANT)
    body = demo_request()
    body["deployments"][0]["model_variant"] = other
    problem = problem_from_dict(body)
    assert problem.deployments[0].model_variant == other
    assert all(d.model_variant == DEFAULT_VARIANT for d in problem.deployments[1:])
    # the schedule's capacity tables come from each deployment's own variant
    data = build_data(problem)
    for d, dep in zip(data.deployments, body["deployments"], strict=True):
        variant = dep.get("model_variant", DEFAULT_VARIANT)
        k = int(np.argmax(d.capacity_rps))
        spec = replace(
            resolve_spec(SpecRequest(dep["model"], dep["gpu"], dep["workload"])),
            variant=variant,
        )
        ref = evaluate(spec, int(d.n_p[k]), int(d.n_d[k])).capacity_rps[0]
        assert d.spec.variant == variant
        assert d.capacity_rps[k] == pytest.approx(float(ref), rel=1e-12)
    for bad in ("Admission", None):
        body["deployments"][1]["model_variant"] = bad
        with pytest.raises(InputError) as e:
            problem_from_dict(body)
        assert e.value.field == "deployments[1].model_variant"


@pytest.mark.slow  # 16.3 s on two cores
def test_schedule_response_names_each_deployments_variant(client):
    body = demo_request()
    body["deployments"][0]["model_variant"] = "paper"
    body["solver"]["time_limit_s"] = 5
    r = client.post("/v1/schedule", json=body)
    assert r.status_code == 200, r.text
    got = [d["model_variant"] for d in r.json()["deployments"]]
    assert got == ["paper"] + [DEFAULT_VARIANT] * (len(got) - 1)


def test_simulate_has_no_variant_option(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--model-variant", "paper", "--np", "1", "--nd", "1"])
    assert "unrecognized arguments: --model-variant" in capsys.readouterr().err


def test_plan_flag_fills_only_deployments_without_their_own(tmp_path):
    from service.cli.solving import with_model_variant

    body = demo_request()
    body["deployments"][0]["model_variant"] = "paper"
    out = with_model_variant(body, "admission")
    assert out["deployments"][0]["model_variant"] == "paper"  # the file's own choice stays
    assert {d["model_variant"] for d in out["deployments"][1:]} == {"admission"}


def test_sites_stored_before_the_field_keep_the_paper_balance(tmp_path):
    from service.runtime.store import store_for

    store = store_for(f"sqlite:///{tmp_path / 'old.db'}")
    old = demo_request()  # a site body as stored before requests named a variant
    old["deployments"][1]["model_variant"] = "admission"
    site = store.create_site("old-site", old)
    body = store.get_site(site.id).body
    assert body["deployments"][0]["model_variant"] == "paper"
    assert body["deployments"][1]["model_variant"] == "admission"  # its own choice stays
    problem = problem_from_dict(body)
    assert [d.model_variant for d in problem.deployments][:2] == ["paper", "admission"]
