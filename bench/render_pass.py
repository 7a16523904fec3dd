"""Benchmark: CPU of one /metrics render per scrape, and of feeding the windows per tick, at 50-500 pods.

Run: `.venv/bin/python -m bench.render_pass [--pods 50,100,250,500] [--scrapes 24] [--history 3900]`.

Each size builds the synthetic node of `bench.bench_exporter` (3 containers per pod) in one process, with no
server: its windows first get `--history` seconds of 1 Hz samples (over an hour, so every 1-hour window is
full), then each scrape is 15 one-second ticks (a snapshot, the sampler's `_feed_windows`, publish) followed by
one render of the latest snapshot, as the render cache's worker does it: the window statistics
(`WindowStatsCache`), the families (`ColoCollector.collect_snapshot`), the text body, and separately the
OpenMetrics + gzip body Prometheus asks for. Times are CPU time of this thread (`time.thread_time`), not wall
time; the figures are the median and the spread (min-max) over `--scrapes` scrapes. One scrape in four
follows a minute boundary of the window grid, where every series' long windows are recomputed (they are
kept from one minute to the next): the maximum shows that scrape. Values are drawn at random (the worst
case for the 5-minute percentiles' sort; a node's memory series barely move).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from collections.abc import Callable

from agent.sense.sampler import feed_windows
from agent.snapshot import PodSample, Snapshot
from agent.view import AgentView
from agent.windows.store import SeriesKey, WindowStore
from bench.bench_exporter import Synthetic
from exporter.encoding import Rendered
from exporter.snapshot_metrics import ColoCollector
from exporter.stats import WindowStatsCache

SCRAPE_EVERY = 15  # ticks (seconds) between scrapes


def feeder(store: WindowStore) -> Callable[[Snapshot], None]:
    """The sampler's own feed (`agent.sense.sampler.feed_windows`) over `store`; every synthetic sample is new, so
    every pod is fed every tick, as with quota burst on."""
    fed: dict[str, PodSample] = {}

    def feed(snap: Snapshot) -> None:
        nonlocal fed
        fed = feed_windows(store, snap, fed)

    return feed


def fill_history(store: WindowStore, synth: Synthetic, seconds: int, end: float) -> None:
    """`seconds` of 1 Hz samples ending before `end`: the series the sampler feeds, values drawn at random."""
    rng = random.Random(2)
    keys: list[SeriesKey] = [("node", "", "cpu"), ("node", "", "memory")]
    keys += [(scope, "", res) for scope in ("online", "system") for res in ("cpu", "memory")]
    for meta in synth.metas:
        keys += [("pod", meta.uid, "cpu"), ("pod", meta.uid, "memory")]
    scale = [1.0 if k[2] == "cpu" or k[0] == "node" else float(300 << 20) for k in keys]
    for s in range(seconds, 0, -1):
        store.add_many(end - s, [(k, rng.random() * x) for k, x in zip(keys, scale, strict=True)])


def measure(pods: int, scrapes: int, history: int) -> dict[str, list[float]]:
    synth = Synthetic(pods, 3)
    store = WindowStore()
    view = AgentView(store, interval=1.0, node_name="bench-node")
    mono = 100_000.0
    fill_history(store, synth, history, mono)
    windows = WindowStatsCache(view)
    collector = ColoCollector(view, windows=windows)
    feed = feeder(store)
    out: dict[str, list[float]] = {k: [] for k in ("feed", "stats", "families", "text", "om_gzip", "series")}
    tick = time.thread_time
    for i in range(scrapes + 2):  # two warm-up scrapes
        feeds = 0.0
        snap = None
        for _ in range(SCRAPE_EVERY):
            mono += 1.0
            snap = synth.snapshot(mono)
            t0 = tick()
            with view.windows_lock:
                feed(snap)
            feeds += tick() - t0
            view.publish(snap)
        assert snap is not None
        gc.collect()
        t0 = tick()
        windows.get(snap)
        t1 = tick()
        families = collector.collect_snapshot(snap)
        t2 = tick()
        rendered = Rendered(snap.seq, snap.mono, families)
        rendered._encode((False, False), 1)
        t3 = tick()
        rendered._encode((True, True), 1)
        t4 = tick()
        if i < 2:
            continue
        out["feed"].append(feeds / SCRAPE_EVERY)
        out["stats"].append(t1 - t0)
        out["families"].append(t2 - t1)  # the statistics are cached by then
        out["text"].append(t3 - t2)
        out["om_gzip"].append(t4 - t3)
        out["series"].append(float(rendered.series))
    return out


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1e3:6.2f} ms ({min(xs) * 1e3:.2f}-{max(xs) * 1e3:.2f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", default="50,100,250,500", help="comma-separated pod counts")
    ap.add_argument("--scrapes", type=int, default=24)
    ap.add_argument("--history", type=int, default=3900, help="seconds of 1 Hz samples before the first scrape")
    args = ap.parse_args()
    print(
        f"render per scrape (CPU of the render thread, median (min-max) over {args.scrapes} scrapes of 15 ticks, "
        f"{args.history} s of history; 3 containers per pod)"
    )
    rows = []
    for pods in (int(p) for p in args.pods.split(",")):
        r = measure(pods, args.scrapes, args.history)
        render = [s + f + t for s, f, t in zip(r["stats"], r["families"], r["text"], strict=True)]
        rows.append((pods, statistics.median(render)))
        print(f"{pods:4d} pods, {int(r['series'][-1])} series:")
        print(f"  render (stats + families + text) {spread(render)}")
        print(f"    window statistics {spread(r['stats'])}, families {spread(r['families'])}, text {spread(r['text'])}")
        print(f"  OpenMetrics + gzip body as well    {spread(r['om_gzip'])}")
        print(f"  feeding the windows, per 1 s tick  {spread(r['feed'])}")
    if len(rows) > 1:
        (p0, c0), (p1, c1) = rows[0], rows[-1]
        per_pod = (c1 - c0) / (p1 - p0)
        fixed = c0 - per_pod * p0
        print(f"per pod: {per_pod * 1e6:.1f} us of render per scrape ({p0} -> {p1} pods), fixed {fixed * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
