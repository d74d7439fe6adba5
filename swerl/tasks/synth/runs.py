"""Probe jobs in sandboxes, in parallel on Ray: many test runs per container.

A job is a batch of runs of one repository image (the baseline, or a chunk of
mutants); each batch is one Ray task that starts one sandbox, runs
:mod:`swerl.tasks.synth.probe` in it and removes it. Batches of one repository
run side by side, each in its own sandbox.
"""

from __future__ import annotations

import itertools
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from swerl.cluster.ray_init import ensure_ray
from swerl.errors import InfraError
from swerl.sandbox.base import SandboxConfig, default_run_id

log = logging.getLogger(__name__)
PROBE = Path(__file__).with_name("probe.py")


def run_job(
    image: str, job: dict[str, Any], timeout: float, backend: str = "docker", run_id: str | None = None
) -> list[dict] | dict:
    """Run one probe job in a fresh sandbox of ``image`` (labelled ``run_id``); its results (see probe.py),
    or ``{"fatal": what pytest said, "exit": code}`` when pytest ran nothing (its config or a conftest)."""
    from swerl.sandbox import make_sandbox

    cfg = SandboxConfig(timeout=timeout, memory="3g", labels={"swerl.synth": "probe"})
    if run_id:
        cfg = cfg.replace(run_id=run_id)
    sb = make_sandbox(backend, image, cfg)
    try:
        sb.start()
        sb.write_file("/tmp/swerl_probe.py", PROBE.read_bytes())
        sb.write_file("/tmp/swerl_job.json", json.dumps(job).encode())
        r = sb.execute(
            "python3 /tmp/swerl_probe.py /tmp/swerl_job.json /tmp/swerl_out.json", cwd="/", timeout=timeout
        )
        if r.returncode != 0:
            raise InfraError(f"probe in {image} failed (exit {r.returncode}): {r.output[-1500:]}")
        return json.loads(sb.read_file("/tmp/swerl_out.json"))
    finally:
        sb.close()


def run_jobs(
    jobs: list[tuple[str, dict, float]], workers: int, use_ray: bool = True, backend: str = "docker"
) -> Iterator[tuple[int, list[dict] | Exception]]:
    """Run ``(image, job, timeout)`` jobs, at most ``workers`` at once; yields (index, results or error) as each ends.

    Every job has a deadline (its timeout plus a grace for the sandbox to start and
    stop): past it, the job is abandoned and yields an :class:`InfraError`, so a lost
    or stuck container costs its batch, never the run.
    """
    run = default_run_id()
    calls = [
        (run_job, (img, job, t, backend, f"{run}-j{i}"), t + GRACE) for i, (img, job, t) in enumerate(jobs)
    ]
    yield from bounded(calls, workers, use_ray, on_abandon=lambda i: reap_run(f"{run}-j{i}", backend))


def reap_run(run_id: str, backend: str = "docker") -> None:
    """Remove what an abandoned call left running (its sandboxes carry ``run_id``); never raises."""
    if backend != "docker":
        return
    try:
        from swerl.sandbox.docker import reap

        reap(run_id)
    except Exception as e:  # the daemon may be what failed; the reaper of orphans gets them later
        log.warning("could not remove the sandboxes of %s: %s", run_id, e)


GRACE = 120.0
"""Seconds a remote call may run past its own timeout (sandbox start, copy-in, removal) before it is abandoned."""


def bounded(
    calls: list[tuple[Callable[..., Any], tuple, float]],
    workers: int,
    use_ray: bool = True,
    poll: float = 5.0,
    on_abandon: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, Any]]:
    """Run ``(fn, args, deadline_seconds)`` calls, ``workers`` at once (Ray tasks, or daemon threads).

    Yields ``(index, result)`` as each ends; ``result`` is the exception when the call
    raised, or an :class:`InfraError` naming the call when it outlived its deadline
    (a Ray task is then cancelled with force; a thread is left behind, it is a daemon).
    """
    if use_ray:
        import ray

        ensure_ray()
        remotes: dict[Callable, Any] = {}

        def submit(fn: Callable, args: tuple) -> Any:
            if fn not in remotes:
                remotes[fn] = ray.remote(num_cpus=0, max_retries=1)(fn)
            return remotes[fn].remote(*args)

        def ready(handles: list[Any], timeout: float) -> list[Any]:
            done, rest = ray.wait(handles, num_returns=1, timeout=timeout)
            if done and rest:  # and whatever else has ended by now
                done += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            return done

        def result(h: Any) -> Any:
            return ray.get(h)

        def abandon(h: Any) -> None:
            ray.cancel(h, force=True)
    else:
        done_q: queue.Queue = queue.Queue()
        finished: dict[int, Any] = {}
        keys = itertools.count()

        def submit(fn: Callable, args: tuple) -> Any:
            key = next(keys)

            def body() -> None:
                try:
                    done_q.put((key, fn(*args)))
                except Exception as e:
                    done_q.put((key, e))

            threading.Thread(target=body, daemon=True, name=f"swerl-synth-{key}").start()
            return key

        def ready(handles: list[Any], timeout: float) -> list[Any]:
            try:
                key, value = done_q.get(timeout=timeout)
                finished[key] = value
                while True:
                    key, value = done_q.get_nowait()
                    finished[key] = value
            except queue.Empty:
                pass
            return [h for h in handles if h in finished]

        def result(h: Any) -> Any:
            value = finished.pop(h)
            if isinstance(value, Exception):
                raise value
            return value

        def abandon(h: Any) -> None:
            return None

    pending: dict[Any, tuple[int, float]] = {}
    todo = list(enumerate(calls))
    while todo or pending:
        while todo and len(pending) < max(1, workers):
            i, (fn, args, deadline) = todo.pop(0)
            pending[submit(fn, args)] = (i, time.monotonic() + deadline)
        now = time.monotonic()
        wait = max(0.05, min(poll, min(end for _, end in pending.values()) - now))
        for h in ready(list(pending), wait):
            i, _ = pending.pop(h)
            try:
                yield i, result(h)
            except Exception as e:
                yield i, e
        now = time.monotonic()
        for h, (i, end) in list(pending.items()):
            if now > end:
                del pending[h]
                abandon(h)
                if on_abandon is not None:
                    on_abandon(i)
                fn, _, deadline = calls[i]
                log.warning("%s call %d outlived its %.0f s deadline; abandoned", fn.__name__, i, deadline)
                yield (
                    i,
                    InfraError(
                        f"{fn.__name__} call {i} outlived its deadline of {deadline:.0f} s (abandoned)"
                    ),
                )


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    t = time.monotonic()
    return fn(*args, **kwargs), time.monotonic() - t
