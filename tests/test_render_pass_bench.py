"""`bench.render_pass` feeds its windows through the sampler's own `_feed_windows` (a private method, reached
with a stand-in `self`): a change of that method must fail here, not first in `make bench`."""

from __future__ import annotations

from bench.render_pass import measure


def test_the_render_benchmark_runs_the_samplers_feed() -> None:
    out = measure(pods=5, scrapes=1, history=30)
    assert len(out["feed"]) == 1 and len(out["series"]) == 1
    assert out["series"][0] > 5 * 2  # every pod's series were rendered
