"""Release and suppression decided on two passes in a row (issue 22): a one-second spike changes nothing, a
real rise is answered within 2 s. Pure decisions over a seeded noisy trace (testsupport/noisy_load.py)."""

from __future__ import annotations

from agent.config_sections.enforcement import EnforcementConfig
from testsupport.noisy_load import RISE_SECONDS, decisions, flaps, noisy_trace, reactions

QUIET, SPIKE, BUSY = 0.2, 0.45, 0.6


def test_a_one_second_spike_changes_nothing() -> None:
    loads = [QUIET] * 5 + [SPIKE] + [QUIET] * 5
    released = decisions(loads, EnforcementConfig())
    assert released[1:] == [True] * 10, "released from the second quiet pass, and the spike cuts nothing"
    assert decisions(loads, EnforcementConfig(cpu_release_confirm_passes=1))[5] is False, "one pass did"


def test_a_real_rise_is_answered_on_its_second_pass() -> None:
    loads = [QUIET] * 5 + [BUSY] * 5
    released = decisions(loads, EnforcementConfig())
    assert released[5] is True and released[6] is False, "suppressed at the second busy second: within 2 s"


def test_a_one_second_dip_releases_nothing() -> None:
    loads = [BUSY] * 5 + [QUIET] + [BUSY] * 5
    assert not any(decisions(loads, EnforcementConfig()))


def test_fewer_flaps_on_the_noisy_trace_and_every_rise_answered_within_two_seconds() -> None:
    trace = noisy_trace()
    before = decisions(trace.loads, EnforcementConfig(cpu_release_confirm_passes=1))  # one 1-second ratio
    after = decisions(trace.loads, EnforcementConfig())
    assert flaps(before) >= 30 and flaps(after) <= 6, (flaps(before), flaps(after))
    # the pass the rise starts in is 0: answered by pass 1 at the latest, i.e. within 2 one-second passes
    assert all(r is not None and r <= 1 for r in reactions(trace, after)), reactions(trace, after)
    assert all(not any(after[s + 2 : s + RISE_SECONDS]) for s in trace.rises), "held suppressed through each rise"


def test_flaps_counts_short_suppressions_only() -> None:
    assert flaps([True, False, True, False, False, True]) == 2
    assert flaps([True] + [False] * 6 + [True]) == 0, "a suppression longer than 5 passes is no flap"
    assert flaps([False, False, True]) == 0, "suppressed from the start: not a flap"
