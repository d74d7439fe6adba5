"""The command server under a storm of its own timer's signal, on a local bash.

The server's timer ticks it with SIGUSR1 while a command runs; on a loaded box a tick
can land late, while the server writes a reply into a full pipe. A caught signal there
cuts bash's write short and the client waits forever for the rest of the reply. Here
the pipe is small and the reader slow, so replies block on every write, while a thread
sends ticks as fast as it can.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import threading
import time

import pytest

from swerl.sandbox.base import SandboxConfig
from swerl.sandbox.shell import ShellChannel, server_command

F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Python >= 3.10 on Linux only)


@pytest.fixture
def slow_channel():
    proc = subprocess.Popen(
        server_command(SandboxConfig()), stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
    )
    fcntl.fcntl(proc.stdout.fileno(), F_SETPIPE_SZ, 4096)

    def send(data: bytes) -> None:
        proc.stdin.write(data)

    def recv() -> bytes:
        time.sleep(0.002)  # a slow client: the server's writes block on the full pipe
        if not select.select([proc.stdout], [], [], 10)[0]:
            raise TimeoutError
        return os.read(proc.stdout.fileno(), 1024)

    channel = ShellChannel(send, recv, describe="local bash")
    channel.handshake(10)
    try:
        yield channel
    finally:
        proc.kill()
        proc.wait()


def test_replies_survive_a_storm_of_timer_ticks(slow_channel):
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            try:
                os.kill(slow_channel.server_pid, signal.SIGUSR1)
            except ProcessLookupError:
                return
            time.sleep(0.0005)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        for _ in range(20):
            # 40 KB: small enough for the server's builtin reply path, ten pipes full
            r = slow_channel.execute("head -c 40000 /dev/zero | tr '\\0' x", "/", 30)
            assert r.output == "x" * 40000
            assert slow_channel.execute("echo hi", "/", 30).output == "hi\n"
    finally:
        stop.set()
        ticker.join()
