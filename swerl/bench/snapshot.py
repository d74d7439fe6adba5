"""Snapshot + restore: swerl's workspace delta against ``docker commit`` + starting the committed image.

Both sides start from the same episode state, for a small change (one edited
file), a large text change (200 new files, ~4 MB) and a large binary one (20 MB
of random bytes, the worst case for a delta). Each side is timed from the live
episode to a started sandbox in that state:

- swerl warm: ``snapshot()`` + ``restore()`` into a sandbox the env's pool started
  beforehand (how branching and replay run with ``pool_size``);
- swerl cold: the same with no pool, so the restore starts a container itself;
- docker: ``docker commit`` of the container + create and start of a container of
  the committed image (no pool can exist for an image made by the commit).

A cold restore pays a container start as the peer does, so the bench also times a
bare start of the task image: docker / start is the most any cold restore can reach.
"""

from __future__ import annotations

import argparse
import os
import time

from swerl.bench._stats import LoadWatch, percentiles_ms, table
from swerl.env import SWEEnv, actions
from swerl.sandbox.base import SandboxConfig
from swerl.sandbox.docker import DockerSandbox, connect, reap
from swerl.tasks.images import build_task_images
from swerl.tasks.sources import load_tasks

CHANGES = {
    "small": "sed -i '1s/^/# edited\\n/' $(git ls-files '*.py' | head -n 1)",
    "large-text": "mkdir -p gen && for i in $(seq 1 200); do seq $i 5000 > gen/text_$i.txt; done",
    "large-binary": "mkdir -p gen && head -c 20000000 /dev/urandom > gen/blob.bin",
}


def _p50_ms(xs: list[float]) -> float:
    return percentiles_ms(xs)[0]


def _bare_start(image: str, cfg: SandboxConfig, client: object) -> float:
    """Seconds to start a sandbox of ``image`` and run one command: what any cold restore pays."""
    t = time.perf_counter()
    with DockerSandbox(image, cfg, client=client) as sb:
        sb.execute("true")
        return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench snapshot", description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--goal", type=float, default=10.0, help="docker/swerl ratio to claim")
    args = parser.parse_args(argv)

    client = connect()
    task = load_tasks("swerl-mini")[0]
    build_task_images([task], client=client)
    cfg = SandboxConfig(run_id=f"bench-snapshot-{os.getpid()}")
    rows, ratios = [], {}
    watch = LoadWatch()
    print("load average at the start: " + "/".join(f"{x:.2f}" for x in watch.before))
    try:
        for name, change in CHANGES.items():
            cold_t, warm_t, docker_t, start_t, sizes, image_sizes, ser = [], [], [], [], [], [], []
            with (
                SWEEnv([task], sandbox_config=cfg) as src,
                SWEEnv([task], sandbox_config=cfg) as cold,
                SWEEnv([task], sandbox_config=cfg, pool_size=1) as warm,
            ):
                src.reset(options={"task": task.instance_id})
                src.step(actions.bash(change))
                for _ in range(args.repeats):
                    t = time.perf_counter()
                    snap = src.snapshot()
                    taken = time.perf_counter() - t
                    t = time.perf_counter()
                    blob = snap.to_bytes()
                    ser.append(time.perf_counter() - t)
                    sizes.append(len(blob))
                    t = time.perf_counter()
                    cold.restore(snap)
                    cold_t.append(taken + time.perf_counter() - t)
                    while warm.pool.idle(task.image) == 0:  # a warm restore: the pool has one ready
                        time.sleep(0.05)
                    for env in (cold, warm):  # and no removal of a replaced sandbox runs beside it
                        env.wait_closed()
                    t = time.perf_counter()
                    snap = src.snapshot()
                    warm.restore(snap)
                    warm_t.append(time.perf_counter() - t)
                    while warm.pool.idle(task.image) == 0:  # the refill done: the peer runs alone
                        time.sleep(0.05)
                    warm.wait_closed()

                    t = time.perf_counter()
                    image = src.sandbox.commit(repository="swerl-bench-commit")
                    with DockerSandbox(image, cfg, client=client) as committed:
                        committed.execute("true")
                        docker_t.append(time.perf_counter() - t)
                    image_sizes.append(client.api.inspect_image(image)["Size"])
                    client.images.remove(image, force=True)
                    start_t.append(_bare_start(task.image, cfg, client))
            size, to_bytes = sorted(sizes)[len(sizes) // 2] / 1e6, _p50_ms(ser)
            d, w, c, s0 = (_p50_ms(x) for x in (docker_t, warm_t, cold_t, start_t))
            ratios[name] = (d / w, d / c, d / s0)
            rows += [
                [name, "swerl warm (pool)", w, to_bytes, size],
                [name, "swerl cold (no pool)", c, to_bytes, size],
                [name, "docker commit + start", d, "-", sorted(image_sizes)[len(image_sizes) // 2] / 1e6],
                [name, "bare start (cold floor)", s0, "-", "-"],
            ]
    finally:
        reap(cfg.run_id, client=client)
        watch.stop()
    print(
        f"task {task.instance_id}; p50 of {args.repeats}. swerl: snapshot() + restore() of the object "
        "(as it travels through Ray's object store); to_bytes: JSON serialisation on top; "
        "size: swerl's serialised snapshot, docker's committed image"
    )
    print(table(["change", "method", "p50 ms", "to_bytes ms", "size MB"], rows))
    for name, (warm_r, cold_r, bound) in ratios.items():
        print(
            f"{name}: docker/swerl {warm_r:.1f}x warm, {cold_r:.1f}x cold "
            f"(a cold restore pays a container start: at most {bound:.1f}x)"
        )
    print(watch.report())
    for name, (warm_r, cold_r, _) in ratios.items():
        print(
            watch.verdict(f"{name} warm restore >= {args.goal:g}x docker commit + start", warm_r >= args.goal)
        )
        print(
            watch.verdict(f"{name} cold restore >= {args.goal:g}x docker commit + start", cold_r >= args.goal)
        )
    return 0
