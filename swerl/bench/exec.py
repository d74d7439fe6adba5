"""Per-command latency and sandbox start/close: swerl against mini-swe-agent's DockerEnvironment.

Same image, same commands, one run. mini-swe-agent runs each command as a
``docker exec`` subprocess; swerl sends it over one long-lived channel. The floor
is the least any server can do with the same semantics over that channel (one
fresh ``bash -c`` per command over one persistent ``docker exec -i``), measured in
the same container in rounds alternating with swerl. Also the
drop-in: swerl's MiniSweEnvironment against DockerEnvironment, both in a login shell.
With ``--backend enroot`` swerl's Enroot sandbox is measured beside its Docker one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import numpy as np

from swerl.bench._backends import add_backend_arg, compared, reap_all
from swerl.bench._stats import LoadWatch, percentiles_ms, table
from swerl.errors import SandboxError
from swerl.sandbox import make_sandbox
from swerl.sandbox.base import SandboxConfig
from swerl.sandbox.docker import _FrameReader, connect
from swerl.sandbox.miniswe import MiniSweEnvironment
from swerl.sandbox.shell import ReadBuffer
from swerl.tasks.images import build_base_image

COMMANDS = ["true", "echo hello", "ls /usr", "cat /etc/os-release", "pwd"]

FLOOR_SCRIPT = r"""
LC_ALL=C
f=$(mktemp /tmp/.swerl-floor.XXXXXXXX) || exit 90
printf 'READY\n'
while IFS=' ' read -r cl n; do
    IFS= read -r -N "$cl" cwd
    IFS= read -r -N "$n" cmd
    cd -- "$cwd"
    bash -c "$cmd" >"$f" 2>&1 </dev/null
    rc=$? out=
    IFS= read -r -d '' out <"$f"
    printf '%s %s\n%s' "$rc" "${#out}" "$out"
done
"""
"""The floor: the least a bash server can do for one command over one persistent exec:
one fresh ``bash -c``, in its cwd, stdout and stderr merged, exit code and output back
(read by builtins, as swerl does for small outputs). No process group, timeout or cap."""


class FloorChannel:
    """The floor server over its own ``docker exec -i`` socket into a running swerl sandbox."""

    def __init__(self, container_id: str) -> None:
        api = connect().api
        exec_id = api.exec_create(container_id, ["bash", "-c", FLOOR_SCRIPT], stdin=True, workdir="/")["Id"]
        self._sock = api.exec_start(exec_id, socket=True)
        raw = getattr(self._sock, "_sock", self._sock)
        self._send = raw.sendall
        self._reader = _FrameReader(raw)
        self._in = ReadBuffer(self._next_chunk)
        self._in.line()

    def _next_chunk(self) -> bytes:
        chunk = self._reader.recv()
        if not chunk:
            raise SandboxError("the floor server's channel closed")
        return chunk

    def execute(self, command: str, cwd: str = "/") -> tuple[int, bytes]:
        cmd, cwd_b = command.encode(), cwd.encode()
        self._send(f"{len(cwd_b)} {len(cmd)}\n".encode() + cwd_b + cmd)
        rc, n = (int(x) for x in self._in.line().split())
        return rc, self._in.exact(n)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


def _time_calls(call, n: int) -> list[float]:
    samples = []
    for i in range(n):
        cmd = COMMANDS[i % len(COMMANDS)]
        t = time.perf_counter()
        call(cmd)
        samples.append(time.perf_counter() - t)
    return samples


def _p50_p95_p99(samples: list[float]) -> tuple[float, float, float]:
    p50, p95, p99 = np.percentile(np.asarray(samples) * 1000.0, [50, 95, 99])
    return float(p50), float(p95), float(p99)


def _lifecycle(backend: str, image: str, config: SandboxConfig, n: int) -> tuple[list[float], list[float]]:
    """Seconds to start a sandbox (until its first command can run) and to close it."""
    starts, closes = [], []
    make_sandbox(backend, image, config).start().close()  # warm up (imports the image once)
    for _ in range(n):
        sb = make_sandbox(backend, image, config)
        t = time.perf_counter()
        sb.start()
        starts.append(time.perf_counter() - t)
        t = time.perf_counter()
        sb.close()
        closes.append(time.perf_counter() - t)
    return starts, closes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench exec", description=__doc__)
    parser.add_argument("--n", type=int, default=500, help="commands timed on swerl")
    parser.add_argument("--n-peer", type=int, default=100, help="commands timed on mini-swe-agent")
    parser.add_argument("--n-start", type=int, default=10, help="sandbox starts/closes timed per backend")
    parser.add_argument("--image", default=None, help="image (default: the swerl base image)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds of floor and swerl")
    add_backend_arg(parser)
    args = parser.parse_args(argv)
    watch = LoadWatch()

    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    from minisweagent.environments.docker import DockerEnvironment

    client = connect()
    image = args.image or build_base_image(client=client)
    config = SandboxConfig(run_id=f"bench-exec-{os.getpid()}")
    backends = compared(args.backend)
    results: dict[str, list[float]] = {}
    lifecycle = {}
    rounds: list[tuple[float, float]] = []
    try:
        for backend in backends:
            with make_sandbox(backend, image, config) as sb:
                _time_calls(lambda c, sb=sb: sb.execute(c, cwd="/"), 20)  # warm up
                if backend != "docker":
                    results[f"swerl {backend}"] = _time_calls(lambda c, sb=sb: sb.execute(c, cwd="/"), args.n)
                else:
                    # The floor in the same container, over a persistent exec socket (swerl's
                    # is the container's attach socket: the same path through dockerd), in
                    # rounds alternating with swerl's so both see the same load.
                    floor = FloorChannel(sb.container_id)
                    try:
                        _time_calls(floor.execute, 20)
                        for _ in range(args.repeats):
                            f = _time_calls(floor.execute, args.n)
                            s = _time_calls(lambda c, sb=sb: sb.execute(c, cwd="/"), args.n)
                            results.setdefault("floor", []).extend(f)
                            results.setdefault("swerl docker", []).extend(s)
                            rounds.append((percentiles_ms(f)[0], percentiles_ms(s)[0]))
                    finally:
                        floor.close()
            lifecycle[backend] = _lifecycle(backend, image, config, args.n_start)
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
        reap_all(backends, config.run_id)

    watch.stop()
    stats = {k: _p50_p95_p99(v) for k, v in results.items()}
    rows = [[k, len(results[k]), *stats[k]] for k in stats]
    print(f"image {image}; commands {COMMANDS}")
    print(table(["runtime", "n", "p50 ms", "p95 ms", "p99 ms"], rows))
    per_round = ", ".join(f"{f:.2f}/{s:.2f}" for f, s in rounds)
    print(f"p50 floor/swerl docker per round (ms): {per_round}")
    docker, fl = stats["swerl docker"], stats["floor"]
    print(f"ratio swerl docker / floor: p50 {docker[0] / fl[0]:.2f}x, p99 {docker[2] / fl[2]:.2f}x")
    for backend in backends:
        ratio = stats["mini-swe-agent"][0] / stats[f"swerl {backend}"][0]
        print(f"ratio (mini-swe-agent p50 / swerl {backend} p50): {ratio:.1f}x")
    drop_in = stats["mini-swe-agent (bash -lc)"][0] / stats["swerl MiniSweEnvironment (bash -lc)"][0]
    print(f"ratio as a drop-in (mini-swe-agent p50 / MiniSweEnvironment p50, both bash -lc): {drop_in:.1f}x")
    print(watch.report())
    print(watch.verdict("(swerl docker p50 within 1.2x of the floor)", docker[0] <= 1.2 * fl[0]))
    print(
        watch.verdict(
            "(swerl docker >= 20x faster than mini-swe-agent, p50)",
            stats["mini-swe-agent"][0] >= 20 * docker[0],
        )
    )
    rows = []
    for backend, (starts, closes) in lifecycle.items():
        rows.append([backend, len(starts), *percentiles_ms(starts), *percentiles_ms(closes)])
    print(table(["sandbox", "n", "start p50 ms", "start p95 ms", "close p50 ms", "close p95 ms"], rows))
    if "enroot" in lifecycle:
        start, close = (percentiles_ms(x)[0] for x in lifecycle["enroot"])
        met = start <= 1000 and close <= 500
        print(watch.verdict("(enroot start p50 <= 1 s, close p50 <= 0.5 s)", met))
    return 0
