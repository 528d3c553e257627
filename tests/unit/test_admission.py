"""The receiver's Retry-After under load: refused senders are spread over the time ingest
needs to take them, and one sender at a stalled store is not sent away for long."""

from __future__ import annotations

import random

from faultfinder.server.admission import IngestAdmission, RetryAdvice, SpansPerByte


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _simulate(
    waiting: int, takes_per_s: int, seconds: int, *, maximum: int = 30
) -> tuple[int, list[int]]:
    """`waiting` senders each retry after the advice they got (with the 0.5-1.5 jitter
    exporters use); ingest takes up to `takes_per_s` requests a second, holding a fifth of
    a second's worth in its queue, and refuses the rest; a taken sender sends its next
    request at once. Returns the requests taken and the advice given, in order."""
    clock = _Clock()
    advice = RetryAdvice(1, maximum, clock=clock)
    jitter = random.Random(7)
    due = [jitter.uniform(0, 1) for _ in range(waiting)]
    given: list[int] = []
    step = 0.01
    budget = 0.0  # requests ingest could take now
    taken = 0
    for tick in range(int(seconds / step)):
        clock.now = tick * step
        budget = min(budget + takes_per_s * step, takes_per_s / 5)
        for index, when in enumerate(due):
            if when > clock.now:
                continue
            if budget >= 1:
                budget -= 1
                advice.taken()
                taken += 1
                due[index] = clock.now + step
            else:
                seconds_advised = advice.refused()
                given.append(seconds_advised)
                due[index] = clock.now + seconds_advised * jitter.uniform(0.5, 1.5)
    return taken, given


def test_many_senders_are_told_about_the_time_ingest_needs_to_take_them() -> None:
    # 300 senders, ingest takes 50 requests a second: everyone is served once in ~6 s.
    taken, given = _simulate(waiting=300, takes_per_s=50, seconds=60)
    settled = sorted(given[len(given) // 2 :])
    assert 4 <= settled[len(settled) // 2] <= 9, settled[len(settled) // 2]
    # A fixed 1 s advice brings every waiting sender back every second to be refused
    # again (and each refusal costs reading its body): several times the refusals, for
    # about the same requests taken.
    taken_fixed, fixed = _simulate(waiting=300, takes_per_s=50, seconds=60, maximum=1)
    assert set(fixed) == {1}
    assert len(given) < len(fixed) / 4, (len(given), len(fixed))
    assert taken > 0.95 * taken_fixed, (taken, taken_fixed)


def test_one_sender_retrying_a_stalled_store_keeps_the_configured_wait() -> None:
    clock = _Clock()
    advice = RetryAdvice(2, 30, clock=clock)
    seen = []
    for attempt in range(8):
        clock.now = attempt * 2.0
        seen.append(advice.refused())
    assert seen == [2] * 8


def test_the_advice_falls_back_once_the_overload_is_over() -> None:
    clock = _Clock()
    advice = RetryAdvice(1, 30, clock=clock)
    for _ in range(2000):
        clock.now += 0.005
        advice.refused()
    assert advice.current() == 30
    for _ in range(60):
        clock.now += 1.0
        advice.taken()
    assert advice.current() == 1


def test_a_stall_longer_than_the_memory_forgets_the_old_rate() -> None:
    clock = _Clock()
    advice = RetryAdvice(1, 300, memory=60, clock=clock)
    for _ in range(100):
        advice.taken()  # 100 requests in one second
    for _ in range(50):
        advice.refused()
    assert advice.current() == 1  # 51 waiting at 100 a second
    clock.now = 61.0  # a minute with nothing taken: the old rate no longer counts
    assert advice.current() == 1  # the 50 refusals are back, nobody waits
    for _ in range(50):
        advice.refused()
    assert advice.current() == 51  # 51 waiting at the floor of one a second


def test_spans_are_estimated_from_the_bodies_already_decoded() -> None:
    estimate = SpansPerByte()
    for _ in range(200):
        estimate.observe(body_bytes=100_000, spans=40)
    assert estimate.estimate(50_000) == 20
    assert estimate.estimate(0) == 1


def test_requests_being_decoded_count_as_queued_and_a_lone_request_always_passes() -> None:
    admission = IngestAdmission(inflight_bytes=1 << 20, retry_after=1, retry_after_max=300)
    # Nothing queued or arriving: even a request larger than the queue is taken (the
    # writer splits it), else it could never be sent.
    assert admission.queue_refusal(queued=0, expected=500, limit=100) == ""
    assert admission.queue_refusal(queued=40, expected=60, limit=100) == ""
    admission.coming_spans = 30  # read whole, being decoded
    refusal = admission.queue_refusal(queued=40, expected=60, limit=100)
    assert "40 spans waiting" in refusal and "30 more being decoded" in refusal
    admission.coming_spans = 0
    assert admission.queue_refusal(queued=40, expected=60, limit=100) == ""
