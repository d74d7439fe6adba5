"""Per-command latency and sandbox start/close: swerl against mini-swe-agent's DockerEnvironment.

Same image, same commands, one run. mini-swe-agent runs each command as a
``docker exec`` subprocess; swerl sends it over one long-lived channel. Also the
drop-in: swerl's MiniSweEnvironment against DockerEnvironment, both in a login shell.
With ``--backend enroot`` swerl's Enroot sandbox is measured beside its Docker one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

from swerl.bench._backends import add_backend_arg, compared, reap_all
from swerl.bench._stats import percentiles_ms, table
from swerl.errors import SandboxError
from swerl.sandbox import make_sandbox
from swerl.sandbox.base import SandboxConfig
from swerl.sandbox.docker import _FrameReader, connect
from swerl.sandbox.miniswe import MiniSweEnvironment
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
        self._buf = bytearray()
        self._line()

    def _line(self) -> bytes:
        while (i := self._buf.find(b"\n")) < 0:
            self._more()
        line = bytes(self._buf[:i])
        del self._buf[: i + 1]
        return line

    def _more(self) -> None:
        chunk = self._reader.recv()
        if not chunk:
            raise SandboxError("the floor server's channel closed")
        self._buf += chunk

    def execute(self, command: str, cwd: str = "/") -> tuple[int, bytes]:
        cmd, cwd_b = command.encode(), cwd.encode()
        self._send(f"{len(cwd_b)} {len(cmd)}\n".encode() + cwd_b + cmd)
        rc, n = (int(x) for x in self._line().split())
        while len(self._buf) < n:
            self._more()
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return rc, out

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
    add_backend_arg(parser)
    args = parser.parse_args(argv)

    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    from minisweagent.environments.docker import DockerEnvironment

    client = connect()
    image = args.image or build_base_image(client=client)
    config = SandboxConfig(run_id=f"bench-exec-{os.getpid()}")
    backends = compared(args.backend)
    results, lifecycle = {}, {}
    try:
        for backend in backends:
            with make_sandbox(backend, image, config) as sb:
                _time_calls(lambda c, sb=sb: sb.execute(c, cwd="/"), 20)  # warm up
                results[f"swerl {backend}"] = _time_calls(lambda c, sb=sb: sb.execute(c, cwd="/"), args.n)
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

    stats = {k: percentiles_ms(v) for k, v in results.items()}
    rows = [[k, len(results[k]), p50, p95] for k, (p50, p95) in stats.items()]
    print(f"image {image}; commands {COMMANDS}; load average {os.getloadavg()[0]:.2f}")
    print(table(["runtime", "n", "p50 ms", "p95 ms"], rows))
    for backend in backends:
        ratio = stats["mini-swe-agent"][0] / stats[f"swerl {backend}"][0]
        print(f"ratio (mini-swe-agent p50 / swerl {backend} p50): {ratio:.1f}x")
    drop_in = stats["mini-swe-agent (bash -lc)"][0] / stats["swerl MiniSweEnvironment (bash -lc)"][0]
    print(f"ratio as a drop-in (mini-swe-agent p50 / MiniSweEnvironment p50, both bash -lc): {drop_in:.1f}x")
    docker = stats["swerl docker"][0]
    goal = docker <= 3.0 and stats["mini-swe-agent"][0] / docker >= 20
    print(f"goal (swerl docker p50 <= 3 ms and >= 20x): {'met' if goal else 'NOT met'}")
    rows = []
    for backend, (starts, closes) in lifecycle.items():
        rows.append([backend, len(starts), *percentiles_ms(starts), *percentiles_ms(closes)])
    print(table(["sandbox", "n", "start p50 ms", "start p95 ms", "close p50 ms", "close p95 ms"], rows))
    if "enroot" in lifecycle:
        start, close = (percentiles_ms(x)[0] for x in lifecycle["enroot"])
        met = start <= 1000 and close <= 500
        print(f"goal (enroot start p50 <= 1 s, close p50 <= 0.5 s): {'met' if met else 'NOT met'}")
    return 0
