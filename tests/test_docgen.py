"""The reference pages under docs/reference/ are what `python -m tools.docgen` makes from the code today: a
changed config key, metric family or contract key without the page regenerated fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import docgen


@pytest.fixture(scope="module")
def pages() -> dict[Path, str]:
    return docgen.render()


def test_every_reference_page_is_up_to_date(pages: dict[Path, str]) -> None:
    stale = [str(path.relative_to(docgen.ROOT)) for path in docgen.stale(pages)]
    assert stale == [], "regenerate with: python -m tools.docgen"


def test_every_config_key_says_what_it_means(pages: dict[Path, str]) -> None:
    for name in ("agent-config.md", "controller-config.md"):
        rows = [line.split(" | ") for line in pages[docgen.OUT / name].splitlines() if line.startswith("| `")]
        assert rows, name
        blank = [row[0] for row in rows if not row[-1].strip(" |")]
        assert blank == [], f"{name}: keys without a meaning (a `#:` comment above the field)"


def test_the_pages_name_what_they_document(pages: dict[Path, str]) -> None:
    agent = pages[docgen.OUT / "agent-config.md"]
    assert "`COLO_ENFORCEMENT__EVICTION__ENABLED`" in agent and "`--state-file`" in agent
    controller = pages[docgen.OUT / "controller-config.md"]
    assert (
        "`COLO_CONTROLLER_POLLING__INTERVAL`" in controller and "`rebalance.low_thresholds.cpu` | number" in controller
    )
    metrics = pages[docgen.OUT / "metrics.md"]
    assert "`colo_node_window_ratio` | gauge | `node`, `resource`, `window`" in metrics
    assert "`colo_controller_cycles_total` | counter" in metrics
    assert "`colo_controller_admission_reviews_total`" in metrics and "`colo_controller_rebalance_nodes`" in metrics
    kube = pages[docgen.OUT / "kubernetes.md"]
    assert "`volcano.sh/evicting-memory-high-watermark`" in kube and "`colo.io/load-score`" in kube


def test_check_mode_names_a_stale_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docgen, "OUT", tmp_path)  # a fresh directory: every page is missing there
    assert docgen.main(["--check"]) == 1
    assert docgen.main([]) == 0 and docgen.main(["--check"]) == 0
