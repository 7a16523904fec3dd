"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's leaderelection semantics.

Only one colo-controller replica may act at a time. The Lease's resourceVersion gives us compare-and-swap,
so two candidates can never both win a round. Expiry is judged by when *we* last saw the lease record
change, never by the timestamps inside it, so clock skew between nodes cannot make a live leader look
expired. That local bookkeeping runs on the monotonic clock: a wall clock stepped back (NTP, a VM
resumed) would keep a leader that no longer renews, and one stepped forward would let a candidate take
over a live lease. Wall time only goes into the record's ``acquireTime``/``renewTime`` for humans. A leader
that cannot renew for ``renew_deadline`` stops claiming leadership before ``lease_duration`` lets anyone
else take over, and ``lease_time_left()`` tells its writers how long an operation may still take.
"""

from __future__ import annotations

import copy
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kube.client import Kube
from kube.errors import ApiError

log = logging.getLogger(__name__)


def _micro_time(t: float) -> str:
    """metav1.MicroTime, the format Lease timestamps use."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """coordination.k8s.io/v1 Lease leader election (like client-go's leaderelection)."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        if not identity:
            raise ValueError("identity must not be empty")
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_change = on_change
        self._clock = clock  # wall time: only for the timestamps written into the Lease
        self._monotonic = monotonic  # everything we judge locally: expiry, renew deadline
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0  # monotonic
        self._renewed_at: float | None = None  # monotonic, when the round that last renewed began
        self._leading = False
        self._reported = False
        self._lock = threading.Lock()

    @property
    def is_leader(self) -> bool:
        """True while we hold the lease and renewed it within ``renew_deadline``."""
        return self.lease_time_left() > 0

    def lease_time_left(self) -> float:
        """Seconds an operation started now may take and still finish while nobody else can hold the lease.

        0 when we are not the leader (or missed the renew deadline). Otherwise the time until the lease
        could expire for another candidate: they count ``lease_duration`` from when *they* saw our last
        renewal, which is after the moment we started it (``_renewed_at``), so this errs on the safe side.
        It is at least ``lease_duration - renew_deadline`` while ``is_leader`` holds.
        """
        renewed = self._renewed_at
        if not self._leading or renewed is None:
            return 0.0
        elapsed = self._monotonic() - renewed
        if elapsed >= self.renew_deadline:
            return 0.0
        return self.lease_duration - elapsed

    @property
    def observed_holder(self) -> str:
        """Who held the lease when we last looked ("" if nobody)."""
        return str((self._observed_spec or {}).get("holderIdentity") or "")

    def _observe(self, spec: dict[str, Any], now: float) -> None:
        if spec != self._observed_spec:
            self._observed_spec = copy.deepcopy(spec)
            self._observed_at = now

    def _notify(self) -> None:
        leader = self.is_leader
        if leader == self._reported:
            return
        self._reported = leader
        log.info(
            "lease %s/%s: %s %s leadership", self.namespace, self.name, self.identity, "acquired" if leader else "lost"
        )
        if self.on_change is not None:
            try:
                self.on_change(leader)
            except Exception:
                log.exception("leader election on_change handler failed")

    def _spec(self, wall: float, prior: dict[str, Any]) -> dict[str, Any]:
        """The record we write: renewal keeps acquireTime/transitions, a takeover bumps transitions."""
        ours = prior.get("holderIdentity") == self.identity
        transitions = int(prior.get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "acquireTime": prior.get("acquireTime") if ours and prior.get("acquireTime") else _micro_time(wall),
            "renewTime": _micro_time(wall),
            "leaseTransitions": transitions if ours or not prior else transitions + 1,
        }

    def try_acquire_or_renew(self) -> bool:
        """One round: create, renew or take over the lease. Returns whether we hold it now.

        Conflicts (someone else wrote first) and API errors just make this round fail; leadership is
        only dropped when another holder is seen or the renew deadline passes.
        """
        with self._lock:
            try:
                return self._step()
            finally:
                self._notify()

    def _step(self) -> bool:
        now = self._monotonic()
        wall = self._clock()
        try:
            lease = self.kube.get_lease(self.namespace, self.name)
            if lease is None:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(wall, {}),
                }
                created = self.kube.create_lease(self.namespace, body)
                self._won(created, now)
                return True
            spec: dict[str, Any] = lease.get("spec") or {}
            self._observe(spec, now)
            holder = spec.get("holderIdentity") or ""
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
            if holder and holder != self.identity and now < self._observed_at + duration:
                self._leading = False
                return False
            body = dict(lease)
            body["spec"] = self._spec(wall, spec)
            updated = self.kube.replace_lease(self.namespace, self.name, body)
            self._won(updated, now)
            return True
        except ApiError as e:
            level = logging.DEBUG if e.status == 409 else logging.WARNING
            log.log(level, "lease %s/%s: %s could not acquire/renew: %s", self.namespace, self.name, self.identity, e)
            return False

    def _won(self, lease: dict[str, Any], now: float) -> None:
        self._observe(lease.get("spec") or {}, now)
        self._renewed_at = now
        self._leading = True

    def run(self, stop: threading.Event) -> None:
        """Campaign and renew until ``stop`` is set, then release. Meant to run in its own thread."""
        while not stop.is_set():
            self.try_acquire_or_renew()
            # Candidates spread out (client-go's jitter factor 1.2); the leader renews on the beat.
            wait = self.retry_period if self._leading else self.retry_period * (1 + 1.2 * random.random())
            stop.wait(wait)
        self.release()

    def release(self) -> None:
        """Hand the lease back so a successor need not wait for it to expire."""
        with self._lock:
            try:
                if not self._leading:
                    return
                lease = self.kube.get_lease(self.namespace, self.name)
                spec: dict[str, Any] = (lease or {}).get("spec") or {}
                if lease is None or spec.get("holderIdentity") != self.identity:
                    return
                wall = self._clock()
                body = dict(lease)
                body["spec"] = {
                    "leaseDurationSeconds": 1,
                    "acquireTime": _micro_time(wall),
                    "renewTime": _micro_time(wall),
                    "leaseTransitions": int(spec.get("leaseTransitions") or 0),
                }
                released = self.kube.replace_lease(self.namespace, self.name, body)
                self._observe(released.get("spec") or {}, self._monotonic())
            except ApiError as e:
                log.warning("lease %s/%s: release failed (it will expire instead): %s", self.namespace, self.name, e)
            finally:
                self._leading = False
                self._renewed_at = None
                self._notify()
