"""Snapshot + restore: swerl's workspace delta against ``docker commit`` + starting the committed image.

Both sides start from the same episode state, for a small change (one edited
file), a large text change (200 new files, ~4 MB) and a large binary one (20 MB
of random bytes, the worst case for a delta). swerl restores into a
fresh sandbox of the task image, cold (container start included) and from a warm
pool (the way branching runs); Docker commits the container and starts a new one
from the committed image.
"""

from __future__ import annotations

import argparse
import os
import time

from swerl.bench._stats import table
from swerl.env import SWEEnv, actions
from swerl.sandbox.base import SandboxConfig
from swerl.sandbox.docker import DockerSandbox, connect, reap
from swerl.tasks.images import build_task_images
from swerl.tasks.instance import load_instances

CHANGES = {
    "small": "sed -i '1s/^/# edited\\n/' $(git ls-files '*.py' | head -n 1)",
    "large-text": "mkdir -p gen && for i in $(seq 1 200); do seq $i 5000 > gen/text_$i.txt; done",
    "large-binary": "mkdir -p gen && head -c 20000000 /dev/urandom > gen/blob.bin",
}


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench snapshot", description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    client = connect()
    task = load_instances("swerl-mini")[0]
    build_task_images([task], client=client)
    cfg = SandboxConfig(run_id=f"bench-snapshot-{os.getpid()}")
    rows = []
    try:
        for name, change in CHANGES.items():
            swerl_cold, swerl_warm, docker_t, sizes, image_sizes, ser = [], [], [], [], [], []
            with (
                SWEEnv([task], sandbox_config=cfg) as src,
                SWEEnv([task], sandbox_config=cfg) as cold,
                SWEEnv([task], sandbox_config=cfg, pool_size=1) as dst,
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
                    swerl_cold.append(taken + time.perf_counter() - t)
                    while dst.pool.idle(task.image) == 0:  # let the pool refill: a warm restore
                        time.sleep(0.05)
                    t = time.perf_counter()
                    dst.restore(snap)
                    swerl_warm.append(taken + time.perf_counter() - t)
                    dst.pool.prewarm(task.image)

                    t = time.perf_counter()
                    image = src.sandbox.commit(repository="swerl-bench-commit")
                    with DockerSandbox(image, cfg, client=client) as committed:
                        committed.execute("true")
                        docker_t.append(time.perf_counter() - t)
                    image_sizes.append(client.api.inspect_image(image)["Size"])
                    client.images.remove(image, force=True)
            size, to_bytes = _median(sizes) / 1e6, _median(ser) * 1000
            rows.append([name, "swerl delta (cold start)", _median(swerl_cold) * 1000, to_bytes, size])
            rows.append([name, "swerl delta (warm pool)", _median(swerl_warm) * 1000, to_bytes, size])
            rows.append(
                [name, "docker commit + start", _median(docker_t) * 1000, "-", _median(image_sizes) / 1e6]
            )
    finally:
        reap(cfg.run_id, client=client)
    print(
        f"task {task.instance_id}; median of {args.repeats}. swerl: snapshot() + restore() of the object "
        "(as it travels through Ray's object store); to_bytes: JSON serialisation on top; "
        "size: swerl's serialised snapshot, docker's committed image"
    )
    print(table(["change", "method", "snapshot+restore ms", "to_bytes ms", "size MB"], rows))
    for name in CHANGES:
        r = {row[1]: row[2] for row in rows if row[0] == name}
        d = r["docker commit + start"]
        print(
            f"{name}: docker/swerl ratio {d / r['swerl delta (cold start)']:.1f}x cold, "
            f"{d / r['swerl delta (warm pool)']:.1f}x warm"
        )
    return 0
