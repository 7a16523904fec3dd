"""The render cache: render at most once per snapshot, bounded staleness, pre-render ahead of a learned
scrape cadence, shared renders, lazy variants. Counts renders; never asserts timings."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Iterator

import pytest

from agent.view import AgentView
from exporter.encoding import Variant
from exporter.render import RenderCache
from exporter.snapshot_metrics import ColoCollector
from tests.test_exporter_fixtures import Clock, feed, make_view, parse, pod, snapshot

TEXT: Variant = (False, False)
OM_GZ: Variant = (True, True)


class Harness:
    """A view, its cache on a hand-moved clock, and a sampler that publishes at the clock's time."""

    def __init__(self, max_staleness: float | None = None) -> None:
        self.clock = Clock(1000.0)
        self.view: AgentView = make_view(interval=1.0)
        self.collector = ColoCollector(self.view)
        self.cache = RenderCache(self.view, self.collector, clock=self.clock, max_staleness=max_staleness)
        self.last: float | None = None

    def tick(self, until: float | None = None) -> None:
        """Publish one snapshot per second (seq = seconds since 999) from the clock's time, or the second after
        the last one, up to `until` (or just one); wait for any render each triggers."""
        now = self.clock.now
        t = now if self.last is None or now > self.last else self.last + 1.0
        end = max(t, now if until is None else until)
        while t <= end:
            self.clock.now = t
            feed(self.view, snapshot(int(t - 999), t, [pod("u1")]))
            self.last = t
            assert self.cache.wait_idle()
            t += 1.0

    def scrape(self, variant: Variant = TEXT, scraper: str = "prom-a") -> bytes:
        """One scrape through `RenderCache.get`, the coroutine /metrics awaits (in a fresh event loop)."""
        _, body = asyncio.run(self.cache.get(variant, scraper))
        return body

    def seq_in(self, body: bytes) -> float:
        return parse(body.decode()).one("colo_agent_snapshot_seq")


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.cache.close()


def test_two_scrapes_without_a_new_snapshot_render_once(h: Harness) -> None:
    h.tick()
    first = h.scrape()
    second = h.scrape()
    assert h.cache.renders == 1
    assert first == second
    assert h.cache.hits == 1 and h.cache.waits == 1


def test_a_new_snapshot_is_reflected_beyond_the_staleness_bound(h: Harness) -> None:
    h.tick()
    assert h.seq_in(h.scrape(scraper="x")) == 1
    h.tick(until=1001.0)  # one interval newer: within the bound (2 intervals), the cached render is served
    assert h.seq_in(h.scrape(scraper="y")) == 1
    assert h.cache.renders == 1
    h.tick(until=1003.0)  # now 3 intervals newer than the cached snapshot
    assert h.seq_in(h.scrape(scraper="z")) == 4
    assert h.cache.renders == 2


def test_zero_staleness_always_serves_the_latest_snapshot() -> None:
    h = Harness(max_staleness=0.0)
    try:
        for i in range(1, 4):
            h.tick(until=999.0 + i)
            assert h.seq_in(h.scrape()) == i
            assert h.seq_in(h.scrape()) == i
        assert h.cache.renders == 3
    finally:
        h.cache.close()


def test_nobody_scraping_means_no_renders(h: Harness) -> None:
    h.tick(until=1060.0)
    assert h.cache.renders == 0


def test_prerender_ahead_of_the_learned_cadence(h: Harness) -> None:
    h.tick()
    h.scrape()  # t=1000: first scrape, rendered on demand
    h.tick(until=1015.0)
    h.scrape()  # t=1015: stale (15 s), on demand again; the period (15 s) is now known
    assert (h.cache.renders, h.cache.prerenders, h.cache.waits) == (2, 0, 2)
    h.tick(until=1028.0)
    assert h.cache.renders == 2  # nothing rendered while no scrape is due
    h.tick(until=1029.0)
    assert (h.cache.renders, h.cache.prerenders) == (3, 1)  # the last snapshot before the expected scrape
    h.tick(until=1030.0)
    body = h.scrape()  # t=1030: served from the pre-render of t=1029, no wait
    assert h.cache.waits == 2 and h.cache.hits == 1
    assert h.seq_in(body) == 30
    assert h.cache.scrape_periods() == {"prom-a": 15.0}


def test_prerendering_stops_when_the_scraper_goes_away(h: Harness) -> None:
    h.tick()
    h.scrape()
    h.tick(until=1015.0)
    h.scrape()
    h.tick(until=1030.0)
    h.scrape()
    before = h.cache.renders
    h.tick(until=1300.0)  # no more scrapes: at most _MAX_MISSED (4) more renders, then none
    assert h.cache.renders - before == 4


def test_prerender_uses_the_variant_the_scraper_asks_for(h: Harness) -> None:
    for t in (1000.0, 1015.0, 1030.0):
        h.tick(until=t)
        h.scrape(OM_GZ)
    encodes = h.cache.encodes
    h.tick(until=1045.0)
    current = h.cache.current
    assert current is not None and current.body(OM_GZ) is not None and current.body(TEXT) is None
    waits = h.cache.waits
    body = h.scrape(OM_GZ)
    assert h.cache.waits == waits and h.cache.encodes == encodes + 1
    assert gzip.decompress(body).endswith(b"# EOF\n")


def test_two_scrapers_each_get_their_prerender(h: Harness) -> None:
    h.tick()
    h.scrape(scraper="a")
    h.tick(until=1005.0)
    h.scrape(scraper="b")
    h.tick(until=1015.0)
    h.scrape(scraper="a")
    h.tick(until=1020.0)
    h.scrape(scraper="b")
    renders = h.cache.renders
    h.tick(until=1030.0)  # a expects 1030
    h.scrape(scraper="a")
    h.tick(until=1035.0)  # b expects 1035
    h.scrape(scraper="b")
    assert h.cache.renders == renders + 2
    assert h.cache.prerenders == 2
    assert h.cache.scrape_periods() == {"a": 15.0, "b": 15.0}


def test_variants_are_encoded_lazily_per_render(h: Harness) -> None:
    h.tick()
    text = h.scrape(TEXT)
    held = h.cache.current
    assert held is not None and held._families is None  # the families go once the body asked for exists
    om = h.scrape((True, False))  # collected again from the same snapshot
    assert parse(om.decode()).one("colo_agent_snapshot_seq") == h.seq_in(text)
    gz = h.scrape((False, True))
    om_gz = h.scrape(OM_GZ)
    assert h.cache.renders == 1
    assert gzip.decompress(gz) == text
    assert gzip.decompress(om_gz) == om
    assert om.endswith(b"# EOF\n") and not text.endswith(b"# EOF\n")
    again = h.scrape(OM_GZ)
    assert again is om_gz


def test_concurrent_scrapes_share_one_render(h: Harness) -> None:
    h.tick()

    async def many() -> list[bytes]:
        results = await asyncio.gather(*(h.cache.get(TEXT, f"c{i}") for i in range(8)))
        return [body for _, body in results]

    bodies = asyncio.run(many())
    assert h.cache.renders == 1
    assert len(set(bodies)) == 1


def test_render_failure_is_reported_and_the_next_scrape_recovers(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h.tick()

    def boom(_snap: object) -> list[object]:
        raise RuntimeError("collector bug")

    monkeypatch.setattr(h.collector, "collect_snapshot", boom)
    with pytest.raises(RuntimeError, match="collector bug"):
        h.scrape()
    monkeypatch.undo()
    assert h.seq_in(h.scrape()) == 1


def test_render_seconds_is_exported_from_the_previous_render(h: Harness) -> None:
    h.tick()
    first = parse(h.scrape().decode())
    assert "colo_agent_render_seconds" not in first.samples
    h.tick(until=1005.0)
    second = parse(h.scrape().decode())
    assert second.one("colo_agent_render_seconds") > 0


def test_close_unregisters_and_refuses(h: Harness) -> None:
    h.tick()
    h.cache.close()
    assert h.cache.on_snapshot not in h.view.seq_listeners
    with pytest.raises(RuntimeError):
        h.scrape()
