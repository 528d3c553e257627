"""An auditor process that keeps dying at start is started again less and less often."""

from __future__ import annotations

from faultfinder.server.audit_process import (
    MAX_RESTART_DELAY,
    RESTART_DELAY,
    STABLE_AFTER,
    RestartBackoff,
)


def test_a_process_dying_at_start_waits_twice_as_long_each_time_up_to_the_cap() -> None:
    backoff = RestartBackoff()
    waits = [backoff.after(0.5) for _ in range(10)]
    assert waits[:4] == [RESTART_DELAY, 2 * RESTART_DELAY, 4 * RESTART_DELAY, 8 * RESTART_DELAY]
    assert max(waits) == MAX_RESTART_DELAY
    # In 40 s of a database that kills every start, a handful of starts, not dozens.
    elapsed, starts = 0.0, 0
    backoff = RestartBackoff()
    while elapsed < 40:
        elapsed += backoff.after(0.5) + 0.5
        starts += 1
    assert starts <= 6


def test_a_process_that_ran_a_while_is_started_again_at_once() -> None:
    backoff = RestartBackoff()
    for _ in range(5):
        backoff.after(0.5)
    assert backoff.after(STABLE_AFTER) == RESTART_DELAY
