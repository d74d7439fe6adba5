"""Probe jobs in sandboxes, in parallel on Ray: many test runs per container.

A job is a batch of runs of one repository image (the baseline, or a chunk of
mutants); each batch is one Ray task that starts one sandbox, runs
:mod:`swerl.tasks.synth.probe` in it and removes it. Batches of one repository
run side by side, each in its own sandbox.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from swerl.cluster.ray_init import ensure_ray
from swerl.errors import InfraError
from swerl.sandbox.base import SandboxConfig

log = logging.getLogger(__name__)
PROBE = Path(__file__).with_name("probe.py")


def run_job(image: str, job: dict[str, Any], timeout: float, backend: str = "docker") -> list[dict]:
    """Run one probe job in a fresh sandbox of ``image``; its results (see probe.py)."""
    from swerl.sandbox import make_sandbox

    cfg = SandboxConfig(timeout=timeout, memory="3g", labels={"swerl.synth": "probe"})
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
    """Run ``(image, job, timeout)`` jobs, at most ``workers`` at once; yields (index, results or error) as each ends."""
    if not use_ray:
        from concurrent.futures import ThreadPoolExecutor, as_completed

        with ThreadPoolExecutor(max(1, workers)) as pool:
            futs = {pool.submit(run_job, img, job, t, backend): i for i, (img, job, t) in enumerate(jobs)}
            for fut in as_completed(futs):
                try:
                    yield futs[fut], fut.result()
                except Exception as e:
                    yield futs[fut], e
        return
    import ray

    ensure_ray()
    remote = ray.remote(num_cpus=0, max_retries=1)(run_job)
    pending: dict[Any, int] = {}
    todo = list(enumerate(jobs))
    while todo or pending:
        while todo and len(pending) < max(1, workers):
            i, (img, job, t) = todo.pop(0)
            pending[remote.remote(img, job, t, backend)] = i
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            i = pending.pop(ref)
            try:
                yield i, ray.get(ref)
            except Exception as e:
                yield i, e


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    t = time.monotonic()
    return fn(*args, **kwargs), time.monotonic() - t
