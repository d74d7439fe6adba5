"""Prefetch: iterate a rollout stream in a background thread, so episodes run while the trainer steps.

``RolloutRunner.stream`` only makes progress while it is iterated: a trainer that
pulls a group and then runs its optimizer leaves every env that waits for an action
(a driver-placed policy) idle meanwhile. ``Prefetch`` keeps pulling in a thread of
its own into a bounded queue, so the next groups' episodes run during the update. The
policy must then sample from weights the trainer is not updating in place (a copy
synced after each step, e.g. ``HFGenerator.load_weights``, or a server).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

_END = object()


class Prefetch:
    """``for item in Prefetch(runner.stream()): ...``; ``waited`` is the seconds the consumer blocked.

    At most ``ahead`` items wait in the queue. ``close()`` (or leaving a ``with`` block)
    stops pulling after the item in progress; an exception in the stream is raised to
    the consumer.
    """

    def __init__(self, stream: Iterable[Any], ahead: int = 4) -> None:
        self._stream = iter(stream)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, ahead))
        self._stop = threading.Event()
        self.waited = 0.0
        self._thread = threading.Thread(target=self._pull, name="swerl-prefetch", daemon=True)
        self._thread.start()

    def _pull(self) -> None:
        try:
            for item in self._stream:
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    break
        except BaseException as e:  # handed to the consumer
            self._put_end(e)
            return
        finally:
            close = getattr(self._stream, "close", None)
            if close is not None and self._stop.is_set():
                close()  # a generator's cleanup (a runner stream closes its actors)
        self._put_end(_END)

    def _put_end(self, value: Any) -> None:
        while True:
            try:
                self._queue.put(value, timeout=0.1)
                return
            except queue.Full:
                if self._stop.is_set():
                    return

    def __iter__(self) -> Iterator[Any]:
        while True:
            t = time.perf_counter()
            item = self._queue.get()
            self.waited += time.perf_counter() - t
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def drain(self) -> int:
        """Drop the items waiting in the queue (the stream goes on); how many were dropped.
        The stream's end or its error is kept for the consumer."""
        n = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return n
            if item is _END or isinstance(item, BaseException):
                self._queue.put(item)  # the queue just had room for it
                return n
            n += 1

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():
            try:  # make room, so a blocked put sees the stop
                self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(timeout=0.1)

    def __enter__(self) -> Prefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
