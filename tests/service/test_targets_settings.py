"""Replica targets with GPU settings (docs/service.md, "Replica targets"): each role's
setting per period in plain fields and as Dynamo's pod annotation, and each period's
total GPU power limit, in the JSON and CSV of ``/targets`` and ``/targets/now``."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.sites.targets import DYNAMO_POWER_ANNOTATION, SETTING_COLUMNS
from tests.service.conftest import small_schedule

PLAN_START = "2026-07-01T12:00:00Z"
PUE, IDLE_W = 1.2, 120.0  # small_schedule's site
#: H200's clock data (model/data/gpus.json): full clock and highest power limit
FULL_MHZ, MAX_LIMIT_W = 1980.0, 700.0
PREFILL = ["1980MHz", "1185MHz", "450W"]
DECODE = ["500W", "600W"]  # every decode choice is a power limit
#: what every target names, in the order of the CSV's first columns
TARGET_FIELDS = ["deployment", "period", "start", "end", "num_prefill", "num_decode"]


@pytest.fixture
def client(make_client: Callable[..., TestClient], tmp_path: Path) -> TestClient:
    return make_client(workers=2, database_url=f"sqlite:///{tmp_path / 'pdwatt.db'}")


def planned(client: TestClient, settings: bool) -> tuple[str, dict[str, Any]]:
    body = small_schedule(time_limit_s=10)
    body["grid"]["power_cap_w"] = [20_000, 2_600, 2_400, 20_000]
    if settings:
        body["deployments"][0]["settings"] = {"prefill": PREFILL, "decode": DECODE}
    body.update({"name": "dc-east", "plan_start": PLAN_START})
    r = client.post("/v1/sites", json=body)
    assert r.status_code == 201, r.text
    site_id = str(r.json()["id"])
    plan = client.post(f"/v1/sites/{site_id}/plan")
    assert plan.status_code == 200, plan.text
    return site_id, plan.json()


def expected_role(text: str) -> tuple[dict[str, float], str]:
    """A setting's plain fields and annotation, read off its text (docs/clocks.md 1)."""
    if text.endswith("MHz"):
        mhz = float(text[:-3])
        return ({} if mhz == FULL_MHZ else {"sm_clock_mhz": mhz}), f"{MAX_LIMIT_W:g}"
    watts = float(text[:-1])
    return {"gpu_power_limit_w": watts}, f"{math.floor(watts)}"


def test_targets_carry_settings_and_the_gpu_power_limit(client: TestClient) -> None:
    site_id, plan = planned(client, settings=True)
    doc = client.get(f"/v1/sites/{site_id}/targets").json()
    by_key = {(t["deployment"], t["period"]): t for t in doc["targets"]}
    limits = {p["period"]: p for p in doc["periods"]}
    assert sorted(limits) == [0, 1, 2, 3]
    for p in plan["schedule"]["periods"]:
        lim = limits[p["index"]]
        total = p["power_cap_w"] / PUE - IDLE_W * p["idle_gpus"]
        assert lim["total_gpu_power_limit_w"] == pytest.approx(total, rel=1e-12)
        assert lim["dynamo"] == {
            "enable_power_awareness": True,
            "total_gpu_power_limit": math.floor(lim["total_gpu_power_limit_w"]),
        }
        # the plan's instances drew within it
        drawn = sum(d["power_w"] for d in p["deployments"].values())
        assert drawn <= lim["total_gpu_power_limit_w"] * (1 + 1e-6)
        a, b = by_key[("a", p["index"])], by_key[("b", p["index"])]
        d = p["deployments"]["a"]
        assert (a["prefill_setting"], a["decode_setting"]) == (
            d["prefill_setting"],
            d["decode_setting"],
        )
        for role in ("prefill", "decode"):
            fields, watts = expected_role(a[f"{role}_setting"])
            assert a["gpu_settings"][role] == fields
            annotations = a["dynamo"][role]["podTemplate"]["metadata"]["annotations"]
            assert annotations == {DYNAMO_POWER_ANNOTATION: watts}
        # the decode setting is a power limit: the annotation is its watts
        assert a["gpu_settings"]["decode"]["gpu_power_limit_w"] in (500.0, 600.0)
        assert not {"prefill_setting", "gpu_settings", "dynamo"} & set(b)  # no settings listed

    r = client.get(f"/v1/sites/{site_id}/targets", params={"format": "csv"})
    assert r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert len(rows) == len(doc["targets"])
    assert list(rows[0])[-7:] == ["total_gpu_power_limit_w", *SETTING_COLUMNS]
    for row, t in zip(rows, doc["targets"], strict=True):
        assert (row["deployment"], int(row["period"])) == (t["deployment"], t["period"])
        total = limits[t["period"]]["total_gpu_power_limit_w"]
        assert float(row["total_gpu_power_limit_w"]) == total
        applied = t.get("gpu_settings", {})
        for role in ("prefill", "decode"):
            assert row[f"{role}_setting"] == t.get(f"{role}_setting", "")
            for field in ("gpu_power_limit_w", "sm_clock_mhz"):
                value = applied.get(role, {}).get(field)
                cell = row[f"{role}_{field}"]
                assert (float(cell) if cell else None) == value

    at = {"at": "2026-07-01T14:30:00Z"}
    now = client.get(f"/v1/sites/{site_id}/targets/now", params=at).json()
    assert now["period"] == 2
    assert now["targets"] == [t for t in doc["targets"] if t["period"] == 2]
    assert now["periods"] == [limits[2]]
    now_csv = client.get(f"/v1/sites/{site_id}/targets/now", params={**at, "format": "csv"})
    assert now_csv.headers["content-type"].startswith("text/csv")
    assert list(csv.DictReader(io.StringIO(now_csv.text))) == [
        row for row in rows if row["period"] == "2"
    ]


def test_targets_without_settings_name_none(client: TestClient) -> None:
    site_id, plan = planned(client, settings=False)
    doc = client.get(f"/v1/sites/{site_id}/targets").json()
    for t in doc["targets"]:
        assert set(t) == {*TARGET_FIELDS, "replicas", "gpus"}
    assert [p["power_cap_w"] for p in doc["periods"]] == [20_000, 2_600, 2_400, 20_000]
    text = client.get(f"/v1/sites/{site_id}/targets", params={"format": "csv"}).text
    header = text.splitlines()[0].split(",")
    assert header == [*TARGET_FIELDS, "gpus", "total_gpu_power_limit_w"]
