"""LeaderElector against the fake API server, with injected clocks for the lease arithmetic.

`_elector`'s clock drives the monotonic clock (expiry, renew deadline) and, unless a test passes a
separate `wall` clock, also the wall time written into the Lease.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kube import Kube, LeaderElector
from testsupport.kubeapi.server import FakeKubeAPI

pytest_plugins = ["testsupport.kubeapi.fixtures"]

NS, NAME = "colo-system", "colo-controller"


class Clock:
    """A hand-driven clock, one per elector (they need not agree: expiry is judged locally)."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _elector(kube: Kube, identity: str, clock: Clock, wall: Clock | None = None, **kwargs: Any) -> LeaderElector:
    return LeaderElector(kube, NS, NAME, identity, clock=wall or clock, monotonic=clock, **kwargs)


def _spec(kube_api: FakeKubeAPI) -> dict[str, Any]:
    lease = kube_api.get("leases", NS, NAME)
    assert lease is not None
    spec: dict[str, Any] = lease["spec"]
    return spec


def test_first_candidate_creates_the_lease(kube: Kube, kube_api: FakeKubeAPI) -> None:
    a = _elector(kube, "a", Clock())
    assert not a.is_leader
    assert a.try_acquire_or_renew()
    assert a.is_leader
    spec = _spec(kube_api)
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert spec["acquireTime"] == spec["renewTime"] == "2023-11-14T22:13:20.000000Z"
    (create,) = kube_api.requests_for("POST")
    assert create.path == f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"


def test_renewal_keeps_acquire_time_and_others_wait(kube: Kube, kube_api: FakeKubeAPI) -> None:
    clock_a, clock_b = Clock(), Clock(5_000.0)  # wildly different clocks do not matter
    a, b = _elector(kube, "a", clock_a), _elector(kube, "b", clock_b)
    assert a.try_acquire_or_renew()
    acquired = _spec(kube_api)["acquireTime"]
    assert not b.try_acquire_or_renew()
    assert b.observed_holder == "a"

    clock_a.advance(2)
    assert a.try_acquire_or_renew()
    spec = _spec(kube_api)
    assert spec["acquireTime"] == acquired
    assert spec["renewTime"] != acquired
    assert spec["leaseTransitions"] == 0

    clock_b.advance(14)  # b sees the renewed record for the first time now: its expiry clock restarts
    assert not b.try_acquire_or_renew()
    assert [r.method for r in kube_api.requests_for(path_regex="/leases")].count("PUT") == 1  # only a's renewal


def test_takeover_after_expiry_and_old_leader_steps_down(kube: Kube, kube_api: FakeKubeAPI) -> None:
    clock_a, clock_b = Clock(), Clock()
    a, b = _elector(kube, "a", clock_a), _elector(kube, "b", clock_b)
    assert a.try_acquire_or_renew()
    clock_b.advance(1)
    assert not b.try_acquire_or_renew()  # b first sees a's record at t=1

    clock_b.advance(15)  # t=16: 15 s since b last saw the record change
    assert b.try_acquire_or_renew()
    assert b.is_leader
    spec = _spec(kube_api)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)

    clock_a.advance(16)
    assert not a.is_leader  # renew deadline long passed: a stopped claiming even before looking
    assert not a.try_acquire_or_renew()
    assert a.observed_holder == "b"
    assert not a.is_leader


def test_expiry_uses_local_observation_not_the_records_timestamps(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put(
        "leases",
        {
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {
                "holderIdentity": "skewed",
                "leaseDurationSeconds": 15,
                "renewTime": "1970-01-01T00:00:00.000000Z",
            },
        },
    )
    clock = Clock()
    b = _elector(kube, "b", clock)
    assert not b.try_acquire_or_renew()  # the renewTime looks ancient, but we only just saw it
    clock.advance(14.9)
    assert not b.try_acquire_or_renew()
    clock.advance(0.2)
    assert b.try_acquire_or_renew()


def test_a_wall_clock_stepped_back_does_not_keep_a_leader_that_cannot_renew(kube: Kube, kube_api: FakeKubeAPI) -> None:
    mono, wall = Clock(1000.0), Clock()
    a = _elector(kube, "a", mono, wall=wall)
    assert a.try_acquire_or_renew()
    assert a.lease_time_left() == 15
    kube_api.inject("GET", "/leases/", status=500, times=None)  # renewals fail from now on
    wall.advance(-3600)  # NTP steps the wall clock back an hour
    mono.advance(9.9)
    assert not a.try_acquire_or_renew()
    assert a.is_leader and a.lease_time_left() == pytest.approx(5.1)
    mono.advance(0.2)  # 10.1 s without a renewal, whatever the wall clock says
    assert not a.is_leader and a.lease_time_left() == 0


def test_a_wall_clock_stepped_forward_does_not_let_a_candidate_take_over_early(
    kube: Kube, kube_api: FakeKubeAPI
) -> None:
    a = _elector(kube, "a", Clock())
    mono_b, wall_b = Clock(50.0), Clock()
    b = _elector(kube, "b", mono_b, wall=wall_b)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    wall_b.advance(3600)
    mono_b.advance(14)
    assert not b.try_acquire_or_renew()  # 14 s since b saw a's record: not expired
    assert _spec(kube_api)["holderIdentity"] == "a"
    mono_b.advance(1)
    assert b.try_acquire_or_renew()
    spec = _spec(kube_api)
    assert spec["holderIdentity"] == "b"
    assert spec["renewTime"] == spec["acquireTime"] == "2023-11-14T23:13:20.000000Z"  # wall time, an hour on


def test_lease_time_left_shrinks_until_the_renew_deadline(kube: Kube) -> None:
    clock = Clock()
    a = _elector(kube, "a", clock)
    assert a.lease_time_left() == 0  # not leading
    assert a.try_acquire_or_renew()
    clock.advance(4)
    assert a.lease_time_left() == 11  # lease_duration 15 - 4
    clock.advance(5.99)
    assert a.lease_time_left() == pytest.approx(5.01)  # never less than lease_duration - renew_deadline
    clock.advance(0.01)
    assert a.lease_time_left() == 0 and not a.is_leader


def test_concurrent_takeover_has_exactly_one_winner(kube: Kube, kube_api: FakeKubeAPI) -> None:
    """Both read the expired lease; a's write is held up while b's lands: a must get 409 and lose."""
    clock_a, clock_b = Clock(), Clock()
    old = _elector(kube, "old", Clock())
    assert old.try_acquire_or_renew()
    a, b = _elector(kube, "a", clock_a), _elector(kube, "b", clock_b)
    assert not a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    clock_a.advance(20)
    clock_b.advance(20)

    kube_api.inject("PUT", "/leases/", status=None, delay=0.5)  # delays the first PUT: a's
    result: dict[str, bool] = {}
    t = threading.Thread(target=lambda: result.setdefault("a", a.try_acquire_or_renew()))
    t.start()
    deadline = time.monotonic() + 5
    while not kube_api.requests_for("PUT") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert b.try_acquire_or_renew()
    t.join(5)
    assert result == {"a": False}
    assert not a.is_leader and b.is_leader
    assert _spec(kube_api)["holderIdentity"] == "b"


def test_create_race_and_api_errors_are_a_lost_round_not_an_exception(kube: Kube, kube_api: FakeKubeAPI) -> None:
    clock = Clock()
    a = _elector(kube, "a", clock)
    kube_api.inject("POST", "/leases", status=409)
    assert not a.try_acquire_or_renew()
    assert a.try_acquire_or_renew()

    kube_api.inject("GET", "/leases/", status=500, times=None)
    clock.advance(5)
    assert not a.try_acquire_or_renew()
    assert a.is_leader  # still within renew_deadline (10 s) of the last renewal
    clock.advance(5.5)
    assert not a.try_acquire_or_renew()
    assert not a.is_leader  # could not renew for 10.5 s: must stop acting before anyone can take over


def test_release_lets_a_successor_in_at_once(kube: Kube, kube_api: FakeKubeAPI) -> None:
    a, b = _elector(kube, "a", Clock()), _elector(kube, "b", Clock())
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert not a.is_leader
    spec = _spec(kube_api)
    assert "holderIdentity" not in spec and spec["leaseDurationSeconds"] == 1
    assert b.try_acquire_or_renew()  # no waiting for expiry
    assert _spec(kube_api)["leaseTransitions"] == 1


def test_release_does_nothing_when_not_leading(kube: Kube, kube_api: FakeKubeAPI) -> None:
    a = _elector(kube, "a", Clock())
    a.release()
    assert kube_api.requests == []


def test_run_loop_leads_and_releases_on_stop(kube: Kube, kube_api: FakeKubeAPI) -> None:
    changes: list[bool] = []
    a = LeaderElector(
        kube, NS, NAME, "a", lease_duration=3, renew_deadline=2, retry_period=0.05, on_change=changes.append
    )
    stop = threading.Event()
    t = threading.Thread(target=a.run, args=(stop,))
    t.start()
    try:
        deadline = time.monotonic() + 5
        while not a.is_leader and time.monotonic() < deadline:
            time.sleep(0.01)
        assert a.is_leader
        renewals = len(kube_api.requests_for("PUT"))
        time.sleep(0.3)
        assert len(kube_api.requests_for("PUT")) > renewals  # keeps renewing
    finally:
        stop.set()
        t.join(5)
    assert not t.is_alive()
    assert changes == [True, False]
    assert "holderIdentity" not in _spec(kube_api)


def test_rejects_inconsistent_timings(kube: Kube) -> None:
    with pytest.raises(ValueError):
        LeaderElector(kube, NS, NAME, "a", lease_duration=10, renew_deadline=10)
    with pytest.raises(ValueError):
        LeaderElector(kube, NS, NAME, "", lease_duration=15)
