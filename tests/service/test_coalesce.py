"""A site's re-plans coalesce: at most one waits per site (a newer request replaces
it) and they run one at a time, a newer one after the running one ends. Before, 20
concurrent sheds made 20 ``site_plan`` jobs that held both solver workers for 76 s,
and 10 identical sheds made 1 event but 10 jobs; now they make one event and one job."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.runtime.job import replan_scope
from service.runtime.jobstore import job_store
from tests.service.test_shed_route import AT, _job, _planned


def test_one_queued_job_per_scope_takes_the_newest_request(tmp_path: Path) -> None:
    store = job_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    scope = replan_scope("s1")
    first, created = store.create("site_plan", {"site_id": "s1", "n": 0}, coalesce=scope)
    assert created
    for n in range(1, 10):
        job, created = store.create("site_plan", {"site_id": "s1", "n": n}, coalesce=scope)
        assert not created and job.id == first.id
    assert store.get(first.id).request == {"site_id": "s1", "n": 9}  # the newest
    other, created = store.create("site_plan", {"site_id": "s2"}, coalesce=replan_scope("s2"))
    assert created and other.id != first.id  # another site's scope
    plain, created = store.create("site_plan", {"site_id": "s1", "n": 0})
    assert created and plain.id != first.id  # no scope: never coalesced

    assert store.start(first.id)
    second, created = store.create("site_plan", {"site_id": "s1", "n": 10}, coalesce=scope)
    assert created and second.id != first.id  # the first runs: a new one waits
    # it waits for the running one: not started, still queued
    assert store.blocked(second.id) and not store.start(second.id) and store.waits(second.id)
    third, created = store.create("site_plan", {"site_id": "s1", "n": 11}, coalesce=scope)
    assert not created and third.id == second.id
    assert store.finish(first.id, "succeeded", result={})
    assert not store.blocked(second.id) and store.start(second.id)
    assert store.get(second.id).request["n"] == 11
    # a cancelled queued job frees its scope
    fourth, _ = store.create("site_plan", {"site_id": "s1", "n": 12}, coalesce=scope)
    store.cancel(fourth.id)
    fifth, created = store.create("site_plan", {"site_id": "s1", "n": 13}, coalesce=scope)
    assert created and fifth.id != fourth.id


@pytest.fixture
def client(make_client: Callable[..., TestClient], tmp_path: Path) -> TestClient:
    return make_client(workers=2, database_url=f"sqlite:///{tmp_path / 'pdwatt.db'}")


def test_ten_identical_sheds_make_one_event_and_one_replan(client: TestClient) -> None:
    site_id, plan = _planned(client)
    target_kw = 0.85 * plan["schedule"]["periods"][1]["power_w"] / 1000.0
    answers = [
        client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": target_kw, "at": AT})
        for _ in range(10)
    ]
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    events = {a.json()["event"]["id"] for a in answers}
    assert len(events) == 1
    replans = [a.json()["replan"] for a in answers]
    # the first re-plans; each repeat of the same shed (its event already in force) joins
    # that re-plan while it is queued or running, and re-plans nothing once it is done
    first = replans[0]["job_id"]
    assert first is not None and not replans[0]["coalesced"]
    for r in replans[1:]:
        if r["job_id"] is None:
            assert "already in force" in r["reason"] and "not re-planned" in r["reason"], r
        else:
            assert r["job_id"] == first and r["coalesced"], r
    assert _job(client, first)["status"] == "succeeded"
    store = job_store(client.app.state.settings.database_url)  # type: ignore[attr-defined]
    every = [store.get(j) for s in ("queued", "running", "succeeded") for j in store.with_status(s)]
    assert [j.id for j in every if j.kind == "site_plan"] == [first]


def test_a_repeat_arriving_as_the_replan_ends_is_answered_by_its_plan(tmp_path: Path) -> None:
    """The race a repeated shed met under load: it read the site's latest plan (made
    before the event) while the re-plan ran, and found no re-plan queued or running
    because that re-plan had ended meanwhile, having stored its plan: it then started a
    second re-plan. The plan read again after the job store says none runs is the one
    to judge by (``duplicate_replan``'s ``reload``): the repeat is answered by it."""
    from datetime import UTC, datetime

    from service.runtime.records import Plan, Site
    from service.sites.shed import duplicate_replan

    now = datetime.now(UTC)
    site = Site("s1", "s1", {}, version=3, created=now, updated=now)
    before = Plan(1, "s1", 2, now, "optimal", 0, {})  # made before the event (version 2)
    after = Plan(2, "s1", 3, now, "optimal", 1, {})  # the re-plan's, with the event
    store = job_store(f"sqlite:///{tmp_path / 'jobs.db'}")  # no re-plan queued or running
    shed = {"event": {"duplicate": True, "id": 7}, "period": 0}
    assert duplicate_replan(store, site, before, shed) is None  # without reload: re-plan
    kept = duplicate_replan(store, site, before, shed, reload=lambda: after)
    assert kept is not None and kept["job_id"] is None
    assert "already in force" in kept["reason"] and "(2)" in kept["reason"]
    # a plan read again that is still older than the site: a re-plan is due
    assert duplicate_replan(store, site, before, shed, reload=lambda: before) is None
    # a re-plan queued: the repeat joins it, whatever the plans
    job, _ = store.create("site_plan", {"site_id": "s1"}, coalesce=replan_scope("s1"))
    joined = duplicate_replan(store, site, before, shed, reload=lambda: before)
    assert joined is not None and joined["job_id"] == job.id and joined["coalesced"]
