"""The opt-in SLO feedback (agent/sense/slo_scrape.py): the annotations' contract, the histogram's p99 from
its deltas, and the scrape against real HTTP endpoints on loopback: a histogram, garbage, a huge body, a slow
endpoint, a port that accepts and never answers, one that refuses."""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.sense.slo_scrape import SloScraper, SloSpec, p99_of_increase, parse_buckets, slo_spec
from contract.annotations import AGENT_POD_ANNOTATIONS, SLO_METRIC, SLO_P99_SECONDS, SLO_PATH, SLO_PORT

METRIC = "http_request_duration_seconds"
GOOD = {SLO_METRIC: METRIC, SLO_P99_SECONDS: "0.05", SLO_PORT: "8080"}


def exposition(counts: dict[str, int], extra: str = "") -> str:
    """A histogram of two label sets (each holding half of `counts`), as prometheus-client writes it."""
    lines = [f"# HELP {METRIC} Request latency.", f"# TYPE {METRIC} histogram"]
    for path in ("/a", "/b"):
        for le, n in counts.items():
            lines.append(f'{METRIC}_bucket{{path="{path}",le="{le}"}} {n / 2}')
        lines.append(f'{METRIC}_count{{path="{path}"}} {counts["+Inf"] / 2}')
    return "\n".join(lines) + "\n" + extra


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        (GOOD, SloSpec(METRIC, 0.05, 8080)),
        ({**GOOD, SLO_PATH: "/stats"}, SloSpec(METRIC, 0.05, 8080, "/stats")),
        ({}, None),  # no SLO declared
        ({**GOOD, SLO_P99_SECONDS: "fast"}, "colo.io/slo-p99-seconds must be a number of seconds"),
        ({**GOOD, SLO_P99_SECONDS: "0"}, "colo.io/slo-p99-seconds must be above 0"),
        ({**GOOD, SLO_P99_SECONDS: "nan"}, "colo.io/slo-p99-seconds must be above 0"),
        ({**GOOD, SLO_PORT: "80800"}, "colo.io/slo-port must be a port number"),
        ({**GOOD, SLO_PORT: "http"}, "colo.io/slo-port must be a port number"),
        ({**GOOD, SLO_METRIC: "a b"}, "colo.io/slo-metric 'a b' is not a metric name"),
        ({**GOOD, SLO_PATH: "metrics"}, "colo.io/slo-path must be a path"),
    ],
)
def test_the_declaration(annotations: dict[str, str], expected: object) -> None:
    assert slo_spec(annotations) == expected


def test_the_agent_keeps_the_declaration() -> None:
    assert {SLO_METRIC, SLO_P99_SECONDS, SLO_PORT, SLO_PATH} <= set(AGENT_POD_ANNOTATIONS)


def test_buckets_are_summed_over_label_sets_and_garbage_is_an_error() -> None:
    text = exposition({"0.01": 10, "0.1": 20, "+Inf": 20}, f'{METRIC}_bucketx{{le="1"}} 99\n')
    assert parse_buckets(text, METRIC) == {0.01: 10.0, 0.1: 20.0, math.inf: 20.0}
    for bad in ("<html>not found</html>", f'{METRIC}_bucket{{le="0.1"}} 3\n',  # no +Inf
                f'{METRIC}_bucket{{le="0.1"}} many\n{METRIC}_bucket{{le="+Inf"}} 3\n',
                f'{METRIC}_bucket{{path="/"}} 3\n'):  # fmt: skip
        with pytest.raises(ValueError):
            parse_buckets(bad, METRIC)


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        # 100 requests: 90 below 10 ms, 10 between 10 and 100 ms: the 99th is 9/10 of the way in that bucket
        ({0.01: 0, 0.1: 0, math.inf: 0}, {0.01: 90, 0.1: 100, math.inf: 100}, 0.01 + 0.09 * 0.9),
        # the deltas count, not the totals
        ({0.01: 1000, 0.1: 1000, math.inf: 1000}, {0.01: 1090, 0.1: 1100, math.inf: 1100}, 0.01 + 0.09 * 0.9),
        # the tail beyond the last finite bound: that bound, as Prometheus answers
        ({0.01: 0, 0.1: 0, math.inf: 0}, {0.01: 50, 0.1: 95, math.inf: 100}, 0.1),
        ({0.01: 0, 0.1: 0, math.inf: 0}, {0.01: 5, 0.1: 10, math.inf: 10}, None),  # too few requests
        ({0.01: 50, 0.1: 60, math.inf: 60}, {0.01: 10, 0.1: 200, math.inf: 200}, None),  # a reset
    ],
)
def test_p99_of_the_increase(before: dict[float, float], after: dict[float, float], expected: float | None) -> None:
    got = p99_of_increase(before, after)
    assert got == (None if expected is None else pytest.approx(expected))


class Endpoint:
    """A real HTTP server on loopback whose answer the test sets (a body, or a function of nothing)."""

    def __init__(self) -> None:
        self.body: Callable[[], bytes] = lambda: b""
        self.delay = 0.0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                time.sleep(owner.delay)
                body = owner.body()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    e = Endpoint()
    try:
        yield e
    finally:
        e.close()


def scraper_for(port: int, timeout: float = 2.0, max_body: int = 1 << 20) -> SloScraper:
    s = SloScraper(interval=0.0, timeout=timeout, max_body=max_body)
    s.set_targets({"u1": ("127.0.0.1", {**GOOD, SLO_PORT: str(port)})})
    return s


def test_the_p99_and_slack_from_two_scrapes_of_a_real_endpoint(endpoint: Endpoint) -> None:
    counts = iter([{"0.01": 0, "0.1": 0, "+Inf": 0}, {"0.01": 90, "0.1": 100, "+Inf": 100}])
    endpoint.body = lambda: exposition(next(counts)).encode()
    s = scraper_for(endpoint.port)
    s.scrape_due()
    assert s.readings()["u1"].p99_seconds is None  # one scrape: no increase yet
    s.scrape_due()
    r = s.readings()["u1"]
    assert r.error is None and r.p99_seconds == pytest.approx(0.091)
    assert r.slack == pytest.approx((0.05 - 0.091) / 0.05)  # missed: negative slack


def test_a_pod_without_ip_or_with_a_bad_declaration_is_not_scraped(caplog: pytest.LogCaptureFixture) -> None:
    s = SloScraper(interval=0.0)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            s.set_targets({"u1": (None, GOOD), "u2": ("127.0.0.1", {**GOOD, SLO_PORT: "x"}), "u3": ("10.0.0.1", {})})
    s.scrape_due()
    assert s.readings() == {}
    assert [r.message.count("u2") for r in caplog.records] == [1]  # one warning for u2, not one per pass


@pytest.mark.parametrize(
    ("body", "delay", "max_body", "timeout", "error"),
    [
        (b"<html>oops</html>", 0.0, 1 << 20, 2.0, "not a histogram exposition of http_request_duration_seconds"),
        (b"x" * (2 << 20), 0.0, 1 << 20, 5.0, "answer over 1048576 bytes"),
        (exposition({"0.1": 1, "+Inf": 1}).encode(), 3.0, 1 << 20, 0.3, "timed out"),
    ],
    ids=["garbage", "huge body", "slow endpoint"],
)
def test_bad_answers_give_no_figure_and_one_warning(
    endpoint: Endpoint, caplog: pytest.LogCaptureFixture, body: bytes, delay: float, max_body: int, timeout: float,
    error: str,
) -> None:  # fmt: skip
    endpoint.body, endpoint.delay = (lambda: body), delay
    s = scraper_for(endpoint.port, timeout, max_body)
    with caplog.at_level(logging.WARNING, logger="agent.sense.slo_scrape"):
        s.scrape_due()
        s.scrape_due()
    r = s.readings()["u1"]
    assert r.p99_seconds is None and r.slack is None and r.error is not None and error in r.error
    assert len(caplog.records) == 1 and "u1" in caplog.records[0].message


def test_an_address_that_never_answers_or_refuses(caplog: pytest.LogCaptureFixture) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes the handshake; nobody ever reads or writes
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    try:
        for port in (silent.getsockname()[1], closed.getsockname()[1]):
            s = scraper_for(port, timeout=0.3)
            s.scrape_due()
            r = s.readings()["u1"]
            assert r.p99_seconds is None and r.error
    finally:
        silent.close()
        closed.close()


def test_the_thread_scrapes_without_the_caller_waiting(endpoint: Endpoint) -> None:
    endpoint.body = lambda: exposition({"0.1": 1, "+Inf": 1}).encode()
    s = SloScraper(interval=0.05, timeout=2.0)
    s.set_targets({"u1": ("127.0.0.1", {**GOOD, SLO_PORT: str(endpoint.port)})})
    s.start()
    try:
        deadline = time.monotonic() + 30
        while "u1" not in s.readings() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.readings()["u1"].error is None
    finally:
        s.stop()
