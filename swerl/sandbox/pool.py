"""A warm pool: started, clean sandboxes per image, ready before reset asks.

Every sandbox is handed out once and never comes back, so nothing leaks from one
episode to the next; the pool refills in the background up to ``size`` per image.
Any backend works: the pool only calls ``factory(image).start()`` (and ``prepare``),
so its sandboxes carry the labels and run id of the config the factory uses, and
``swerl reap --run-id`` finds them like any other.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from swerl.errors import SandboxClosed
from swerl.sandbox.base import Sandbox

log = logging.getLogger(__name__)


@dataclass
class PoolStats:
    """What the pool did: ``hits`` were handed out already started, ``misses`` started on
    the acquirer's path; ``evicted`` were closed unused to make room for another image."""

    started: int = 0
    hits: int = 0
    misses: int = 0
    evicted: int = 0
    failed: int = 0


class SandboxPool:
    def __init__(
        self,
        factory: Callable[[str], Sandbox],
        size: int = 1,
        workers: int = 2,
        prepare: Callable[[Sandbox], None] | None = None,
        max_idle: int | None = None,
    ) -> None:
        """``prepare`` runs on each sandbox right after it starts (e.g. scrubbing the
        repo's history), so for warm sandboxes it is off the acquirer's path.

        ``max_idle`` caps the started-but-unused sandboxes over all images (default: no
        cap): warming an image when the pool is full closes the idle sandbox of the image
        least recently asked for, so a pool that sees many images does not grow with them."""
        self.factory = factory
        self.prepare = prepare
        self.size = max(0, size)
        self.max_idle = max_idle
        self.stats = PoolStats()
        self._idle: OrderedDict[str, deque[Sandbox]] = OrderedDict()  # least recently wanted first
        self._pending: dict[str, int] = {}
        self._cond = threading.Condition()
        self._executor = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="swerl-pool")
        self._evicted: list[Sandbox] = []  # closed by a worker; close() makes sure of it
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
            self._cond.wait_for(lambda: self._idle_of(image) or not self._pending.get(image), timeout=wait)
            queue = self._idle_of(image)
            sandbox = queue.popleft() if queue else None
            if refill:
                self._refill_locked(image)
            hit = sandbox is not None and sandbox.alive
            if hit:
                self.stats.hits += 1
            else:
                self.stats.misses += 1
        if hit:
            return sandbox
        if sandbox is not None:
            sandbox.close()
        return self._started(image)

    def _idle_of(self, image: str) -> deque[Sandbox]:
        return self._idle.get(image) or deque()

    def _started(self, image: str) -> Sandbox:
        sandbox = self.factory(image).start()
        if self.prepare is not None:
            try:
                self.prepare(sandbox)
            except BaseException:
                sandbox.close()
                raise
        return sandbox

    def idle(self, image: str | None = None) -> int:
        """Started, unused sandboxes of ``image`` (of every image when None)."""
        with self._cond:
            if image is not None:
                return len(self._idle_of(image))
            return sum(len(q) for q in self._idle.values())

    def _held(self) -> int:
        return sum(len(q) for q in self._idle.values()) + sum(self._pending.values())

    def _refill_locked(self, image: str) -> None:
        self._idle.setdefault(image, deque())
        self._idle.move_to_end(image)  # the most recently wanted image is evicted last
        while not self._closed and len(self._idle[image]) + self._pending.get(image, 0) < self.size:
            full = self.max_idle is not None and self._held() >= self.max_idle
            # at the cap with only other images' starts to blame: start this one anyway (the image
            # wanted last); the least recently wanted is closed when they arrive (_trim_locked)
            others_starting = any(n for other, n in self._pending.items() if other != image)
            if full and not self._evict_locked(image) and not others_starting:
                return
            self._pending[image] = self._pending.get(image, 0) + 1
            self._executor.submit(self._start_one, image)

    def _evict_locked(self, keep: str) -> bool:
        """Close the idle sandbox of the least recently wanted other image; False if none."""
        for other, queue in self._idle.items():
            if other != keep and queue:
                victim = queue.popleft()
                self.stats.evicted += 1
                self._evicted.append(victim)
                self._executor.submit(self._close_evicted, victim)
                return True
        return False

    def _close_evicted(self, victim: Sandbox) -> None:
        victim.close()
        with self._cond:
            if victim in self._evicted:
                self._evicted.remove(victim)

    def _start_one(self, image: str) -> None:
        sandbox: Sandbox | None = None
        try:
            sandbox = self._started(image)
        except BaseException as e:
            log.warning("warm pool: cannot start a sandbox of %s: %s", image, e)
            self.last_error = e
            self.stats.failed += 1
        with self._cond:
            self._pending[image] -= 1
            if sandbox is not None:
                self.stats.started += 1
                if self._closed:
                    sandbox.close()
                else:
                    self._idle.setdefault(image, deque()).append(sandbox)
                    self._trim_locked()
            self._cond.notify_all()

    def _trim_locked(self) -> None:
        """Back under ``max_idle`` after a start that went over it: close the idle sandboxes of
        the least recently wanted images, never the most recently wanted one's."""
        keep = next(reversed(self._idle))
        while self.max_idle is not None and self._held() > self.max_idle and self._evict_locked(keep):
            pass

    def close(self) -> None:
        """Close every idle sandbox, wait for the starts under way (closing what they
        start) and stop refilling. Idempotent."""
        with self._cond:
            self._closed = True
            idle = [sb for q in self._idle.values() for sb in q] + self._evicted
            self._idle.clear()
            self._evicted = []
            self._cond.notify_all()
        for sb in idle:
            sb.close()
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
