"""Prefetch: a stream pulled in a background thread while the consumer works (no Ray: any iterable)."""

from __future__ import annotations

import threading
import time

import pytest

from swerl.rollout.prefetch import Prefetch


def test_the_stream_runs_ahead_by_the_bound_while_the_consumer_works():
    pulled: list[int] = []

    def stream():
        for i in range(10):
            pulled.append(i)
            yield i

    with Prefetch(stream(), ahead=3) as p:
        it = iter(p)
        assert next(it) == 0
        # the consumer "trains": the stream goes on meanwhile, up to the bound and no further
        deadline = time.monotonic() + 30
        while len(pulled) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        assert len(pulled) == 1 + 3 + 1  # the one taken, 3 queued, 1 waiting to be put
        assert p.drain() == 3
        assert list(it) == [4, 5, 6, 7, 8, 9]


def test_drain_keeps_the_end_and_errors_reach_the_consumer():
    def failing():
        yield 1
        raise ValueError("the stream broke")

    p = Prefetch(failing(), ahead=4)
    deadline = time.monotonic() + 30
    while p._queue.qsize() < 2 and time.monotonic() < deadline:  # 1, then the error
        time.sleep(0.05)
    assert p.drain() == 1
    with pytest.raises(ValueError, match="broke"):
        list(p)
    p.close()


def test_waited_counts_the_consumers_blocked_time():
    go = threading.Event()

    def slow():
        go.wait()
        yield "x"

    with Prefetch(slow()) as p:
        threading.Timer(0.3, go.set).start()
        assert list(p) == ["x"] and p.waited >= 0.25
