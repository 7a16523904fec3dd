"""Opt-in SLO feedback: a pod that exports a latency histogram declares it with annotations
(contract/annotations.py `SLO_*`), and the agent scrapes that pod's own endpoint every few seconds, off the
sampling path, to learn its tail latency from the histogram's deltas and its slack against the declared SLO.

    colo.io/slo-metric: http_request_duration_seconds   # a Prometheus histogram (its _bucket series)
    colo.io/slo-p99-seconds: "0.05"                      # the pod's p99 objective
    colo.io/slo-port: "8080"                             # where it serves /metrics (colo.io/slo-path: another path)

The scrape is bounded: one thread for every pod, `timeout` seconds per request (connect and read), at most
`max_body` bytes read (a larger body is an error, not a truncated parse), a pod scraped at most every
`interval` seconds. The p99 is Prometheus' `histogram_quantile(0.99, ...)` over the buckets' increase since
the previous scrape (all series of the metric summed by `le`), linear within the bucket; with fewer than
`min_requests` requests in between there is no figure (too few to tell a tail). Slack = (SLO − p99) / SLO:
negative when the pod misses its objective. A pod whose annotations, endpoint or exposition is bad gets one
warning per cause and no figure; the kernel signals still apply to it.
"""

from __future__ import annotations

import logging
import math
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from agent.snapshot import SloReading
from contract.annotations import SLO_METRIC, SLO_P99_SECONDS, SLO_PATH, SLO_PORT

log = logging.getLogger(__name__)

MAX_BODY = 4 << 20  # bytes read of one exposition at most
TIMEOUT = 1.0  # seconds per scrape (connect and read together)
INTERVAL = 5.0  # seconds between two scrapes of one pod
MIN_REQUESTS = 20  # requests between two scrapes for a p99
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


@dataclass(frozen=True, slots=True)
class SloSpec:
    metric: str
    p99_seconds: float
    port: int
    path: str = "/metrics"


def slo_spec(annotations: Mapping[str, str]) -> SloSpec | str | None:
    """The pod's declared SLO; None when it declares none; a string naming what is wrong."""
    metric = annotations.get(SLO_METRIC)
    if metric is None:
        return None
    if not _METRIC_NAME.match(metric):
        return f"{SLO_METRIC} {metric!r} is not a metric name"
    try:
        p99 = float(annotations.get(SLO_P99_SECONDS, ""))
    except ValueError:
        return f"{SLO_P99_SECONDS} must be a number of seconds"
    if not (math.isfinite(p99) and p99 > 0):
        return f"{SLO_P99_SECONDS} must be above 0"
    port_text = annotations.get(SLO_PORT, "")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return f"{SLO_PORT} must be a port number"
    path = annotations.get(SLO_PATH, "/metrics")
    if not path.startswith("/") or any(c in path for c in " \r\n"):
        return f"{SLO_PATH} must be a path"
    return SloSpec(metric, p99, int(port_text), path)


def parse_buckets(text: str, metric: str) -> dict[float, float]:
    """Cumulative counts by upper bound of `metric`'s histogram, every series summed by `le` (prometheus-client's
    parser reads the exposition); ValueError when it is not an exposition, has none of the histogram's buckets,
    or a bucket without `le` or with a count that is not a count."""
    name = metric + "_bucket"
    out: dict[float, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name != name:
                    continue
                le, value = float(sample.labels["le"]), float(sample.value)
                if math.isnan(le) or not math.isfinite(value) or value < 0:
                    raise ValueError(f"bucket le={le} holds {value}")
                out[le] = out.get(le, 0.0) + value
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"not a histogram exposition of {metric}: {exc}") from None
    if not out:
        raise ValueError(f"no {name} series")
    if math.inf not in out:
        raise ValueError(f'{name} has no le="+Inf" bucket')
    return out


def p99_of_increase(
    before: Mapping[float, float], after: Mapping[float, float], q: float = 0.99, min_requests: int = MIN_REQUESTS
) -> float | None:
    """`histogram_quantile(q)` of the buckets' increase; None with too few requests or a reset (a count fell:
    the pod restarted, the next scrape starts again)."""
    bounds = sorted(after)
    increase = []
    for le in bounds:
        d = after[le] - before.get(le, 0.0)
        if d < 0:
            return None
        increase.append(d)
    total = increase[-1]
    if total < min_requests:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for le, count in zip(bounds, increase, strict=True):
        if count >= rank:
            if math.isinf(le):
                return lower  # in the +Inf bucket: the highest finite bound, as Prometheus answers
            return lower + (le - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = le, count
    return lower


def fetch(ip: str, spec: SloSpec, timeout: float = TIMEOUT, max_body: int = MAX_BODY) -> str:
    """The exposition at http://ip:port/path within `timeout` seconds and `max_body` bytes; OSError or
    ValueError naming what went wrong."""
    deadline = time.monotonic() + timeout
    with socket.create_connection((ip, spec.port), timeout=timeout) as s:
        s.sendall(f"GET {spec.path} HTTP/1.0\r\nHost: {ip}\r\nAccept: text/plain\r\n\r\n".encode())
        chunks, size = [], 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no whole answer within {timeout:g} s")
            s.settimeout(left)
            data = s.recv(65536)
            if not data:
                break
            size += len(data)
            if size > max_body:
                raise ValueError(f"answer over {max_body} bytes")
            chunks.append(data)
    raw = b"".join(chunks)
    head, sep, body = raw.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if not sep or len(status) < 2 or status[1] != b"200":
        raise ValueError(f"HTTP status {status[1].decode('latin-1') if len(status) > 1 else '?'}")
    return body.decode("utf-8", "replace")


@dataclass(slots=True)
class _Target:
    ip: str
    spec: SloSpec
    buckets: dict[float, float] | None = None
    reading: SloReading | None = None
    due: float = 0.0


class SloScraper:
    """Scrapes the pods that declare an SLO on its own thread; the sampling thread hands it the targets
    (`set_targets`) and reads the latest readings (`readings`), neither ever waits for a scrape."""

    def __init__(
        self,
        interval: float = INTERVAL,
        timeout: float = TIMEOUT,
        max_body: int = MAX_BODY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval, self.timeout, self.max_body, self.clock = interval, timeout, max_body, clock
        self._targets: dict[str, _Target] = {}
        self._lock = threading.Lock()
        self._warned: dict[str, str] = {}  # uid -> the cause last warned about
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set_targets(self, pods: Mapping[str, tuple[str | None, Mapping[str, str]]]) -> None:
        """The online pods with their IP and annotations; pods without an SLO are dropped, a bad declaration
        warned about once."""
        chosen: dict[str, tuple[str, SloSpec]] = {}
        for uid, (ip, declared) in pods.items():
            spec = slo_spec(declared)
            if spec is None:
                continue
            if isinstance(spec, str):
                self._warn(uid, spec)
                continue
            if not ip:
                continue  # no IP yet: nothing to scrape
            chosen[uid] = (ip, spec)
        with self._lock:
            for uid in list(self._targets):
                if uid not in chosen:
                    del self._targets[uid]
            for uid, (ip, spec) in chosen.items():
                t = self._targets.get(uid)
                if t is None or t.ip != ip or t.spec != spec:
                    self._targets[uid] = _Target(ip, spec)

    def readings(self) -> dict[str, SloReading]:
        with self._lock:
            return {uid: t.reading for uid, t in self._targets.items() if t.reading is not None}

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="slo-scrape", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 1)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.scrape_due()

    def scrape_due(self) -> None:
        """Scrape every target whose turn it is (the thread's step; tests call it directly)."""
        now = self.clock()
        with self._lock:
            due = [(uid, t) for uid, t in self._targets.items() if t.due <= now]
        for uid, t in due:
            t.due = now + self.interval
            self._scrape(uid, t)

    def _scrape(self, uid: str, t: _Target) -> None:
        try:
            buckets = parse_buckets(fetch(t.ip, t.spec, self.timeout, self.max_body), t.spec.metric)
        except (OSError, ValueError) as exc:
            t.buckets = None
            t.reading = SloReading(None, None, self.clock(), str(exc) or type(exc).__name__)
            self._warn(uid, f"SLO metrics at {t.ip}:{t.spec.port}{t.spec.path}: {t.reading.error}")
            return
        p99 = None if t.buckets is None else p99_of_increase(t.buckets, buckets)
        t.buckets = buckets
        slack = None if p99 is None else (t.spec.p99_seconds - p99) / t.spec.p99_seconds
        t.reading = SloReading(p99, slack, self.clock())
        self._warned.pop(uid, None)

    def _warn(self, uid: str, cause: str) -> None:
        """One warning per pod and cause (a pod that recovers and fails again is warned again)."""
        kind = cause.split(":", 1)[0]
        if self._warned.get(uid) != kind:
            self._warned[uid] = kind
            log.warning("pod %s: %s; its run-queue signals still apply", uid, cause)
