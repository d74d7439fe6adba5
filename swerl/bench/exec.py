"""Per-command latency: swerl's Docker sandbox against mini-swe-agent's DockerEnvironment.

Same image, same commands, one run. mini-swe-agent runs each command as a
``docker exec`` subprocess; swerl sends it over one long-lived channel. Also the
drop-in: swerl's MiniSweEnvironment against DockerEnvironment, both in a login shell.
"""

from __future__ import annotations

import argparse
import os
import time

from swerl.bench._stats import percentiles_ms, table
from swerl.sandbox.base import SandboxConfig
from swerl.sandbox.docker import DockerSandbox, connect, reap
from swerl.sandbox.miniswe import MiniSweEnvironment
from swerl.tasks.images import build_base_image

COMMANDS = ["true", "echo hello", "ls /usr", "cat /etc/os-release", "pwd"]


def _time_calls(call, n: int) -> list[float]:
    samples = []
    for i in range(n):
        cmd = COMMANDS[i % len(COMMANDS)]
        t = time.perf_counter()
        call(cmd)
        samples.append(time.perf_counter() - t)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench exec", description=__doc__)
    parser.add_argument("--n", type=int, default=500, help="commands timed on swerl")
    parser.add_argument("--n-peer", type=int, default=100, help="commands timed on mini-swe-agent")
    parser.add_argument("--image", default=None, help="image (default: the swerl base image)")
    args = parser.parse_args(argv)

    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    from minisweagent.environments.docker import DockerEnvironment

    client = connect()
    image = args.image or build_base_image(client=client)
    config = SandboxConfig(run_id=f"bench-exec-{os.getpid()}")
    results = {}
    try:
        with DockerSandbox(image, config, client=client) as sb:
            _time_calls(lambda c: sb.execute(c, cwd="/"), 20)  # warm up
            results["swerl"] = _time_calls(lambda c: sb.execute(c, cwd="/"), args.n)
        # The drop-in against mini's own environment, both with mini's default login shell.
        with MiniSweEnvironment(image=image, sandbox_config={"run_id": config.run_id}) as drop_in:
            _time_calls(lambda c: drop_in.execute({"command": c}), 20)
            results["swerl MiniSweEnvironment (bash -lc)"] = _time_calls(
                lambda c: drop_in.execute({"command": c}), args.n
            )
        for name, interpreter in (
            ("mini-swe-agent", ["bash", "-c"]),
            ("mini-swe-agent (bash -lc)", ["bash", "-lc"]),
        ):
            peer = DockerEnvironment(
                image=image, cwd="/", interpreter=interpreter, run_args=["--rm", "--network", "none"]
            )
            try:
                _time_calls(lambda c, peer=peer: peer.execute({"command": c}), 5)
                results[name] = _time_calls(lambda c, peer=peer: peer.execute({"command": c}), args.n_peer)
            finally:
                peer.cleanup()
    finally:
        reap(config.run_id, client=client)

    stats = {k: percentiles_ms(v) for k, v in results.items()}
    rows = [[k, len(results[k]), p50, p95] for k, (p50, p95) in stats.items()]
    print(f"image {image}; commands {COMMANDS}")
    print(table(["runtime", "n", "p50 ms", "p95 ms"], rows))
    ratio = stats["mini-swe-agent"][0] / stats["swerl"][0]
    print(f"ratio (mini-swe-agent p50 / swerl p50): {ratio:.1f}x")
    drop_in = stats["mini-swe-agent (bash -lc)"][0] / stats["swerl MiniSweEnvironment (bash -lc)"][0]
    print(f"ratio as a drop-in (mini-swe-agent p50 / MiniSweEnvironment p50, both bash -lc): {drop_in:.1f}x")
    goal = stats["swerl"][0] <= 3.0 and ratio >= 20
    print(f"goal (swerl p50 <= 3 ms and >= 20x): {'met' if goal else 'NOT met'}")
    return 0
