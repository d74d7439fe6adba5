"""Cutting a sandbox off under a running command, and timing how long the command takes to fail."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from swerl.errors import SandboxError


def hold_stream_open(channel, timeout_of: Callable[[], float | None]) -> None:
    """What a runtime under load was seen to do: keep a dead sandbox's stream open. From its
    end on, ``channel`` reads silence for the transport's timeout (``timeout_of()``) each time."""
    real = channel._recv
    ended = threading.Event()

    def recv() -> bytes:
        chunk = b"" if ended.is_set() else real()
        if not chunk:
            ended.set()
            time.sleep(timeout_of() or 3600)
            raise TimeoutError("timed out")
        return chunk

    channel._recv = recv


def fails_within(bound: float, sb, cut: Callable[[], object], says: str, timeout: float = 0) -> None:
    """``sleep 600`` in ``sb`` raises SandboxError matching ``says`` within ``bound`` seconds
    when ``cut()`` runs a second after it started."""
    timer = threading.Timer(1.0, cut)
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(SandboxError, match=says):
            sb.execute("sleep 600", timeout=timeout)
    finally:
        timer.join()
    assert time.monotonic() - start < bound
