"""A warm pool: started, clean sandboxes per image, ready before reset asks.

Every sandbox is handed out once and never comes back, so nothing leaks from one
episode to the next; the pool refills in the background up to ``size`` per image.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from swerl.errors import SandboxClosed
from swerl.sandbox.base import Sandbox

log = logging.getLogger(__name__)


class SandboxPool:
    def __init__(
        self,
        factory: Callable[[str], Sandbox],
        size: int = 1,
        workers: int = 2,
        prepare: Callable[[Sandbox], None] | None = None,
    ) -> None:
        """``prepare`` runs on each sandbox right after it starts (e.g. scrubbing the
        repo's history), so for warm sandboxes it is off the acquirer's path."""
        self.factory = factory
        self.prepare = prepare
        self.size = max(0, size)
        self._idle: dict[str, deque[Sandbox]] = defaultdict(deque)
        self._pending: dict[str, int] = defaultdict(int)
        self._cond = threading.Condition()
        self._executor = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="swerl-pool")
        self._closed = False
        self.last_error: BaseException | None = None

    def prewarm(self, image: str) -> None:
        """Start filling the pool for ``image`` without waiting."""
        with self._cond:
            self._refill_locked(image)

    def acquire(self, image: str, wait: float = 120.0, refill: bool = True) -> Sandbox:
        """A started sandbox of ``image``: a warm one if any, else one started now.

        ``refill=False`` leaves the refill to a later ``prewarm``, so a caller with more
        work on its critical path (a restore) does not share the machine with a start."""
        with self._cond:
            if self._closed:
                raise SandboxClosed("the sandbox pool is closed")
            self._cond.wait_for(lambda: self._idle[image] or not self._pending[image], timeout=wait)
            sandbox = self._idle[image].popleft() if self._idle[image] else None
            if refill:
                self._refill_locked(image)
        if sandbox is not None and sandbox.alive:
            return sandbox
        if sandbox is not None:
            sandbox.close()
        return self._started(image)

    def _started(self, image: str) -> Sandbox:
        sandbox = self.factory(image).start()
        if self.prepare is not None:
            try:
                self.prepare(sandbox)
            except BaseException:
                sandbox.close()
                raise
        return sandbox

    def idle(self, image: str) -> int:
        with self._cond:
            return len(self._idle[image])

    def _refill_locked(self, image: str) -> None:
        while not self._closed and len(self._idle[image]) + self._pending[image] < self.size:
            self._pending[image] += 1
            self._executor.submit(self._start_one, image)

    def _start_one(self, image: str) -> None:
        sandbox: Sandbox | None = None
        try:
            sandbox = self._started(image)
        except BaseException as e:
            log.warning("warm pool: cannot start a sandbox of %s: %s", image, e)
            self.last_error = e
        with self._cond:
            self._pending[image] -= 1
            if sandbox is not None:
                if self._closed:
                    sandbox.close()
                else:
                    self._idle[image].append(sandbox)
            self._cond.notify_all()

    def close(self) -> None:
        """Close every idle sandbox and stop refilling. Idempotent."""
        with self._cond:
            self._closed = True
            idle = [sb for q in self._idle.values() for sb in q]
            self._idle.clear()
            self._cond.notify_all()
        for sb in idle:
            sb.close()
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
