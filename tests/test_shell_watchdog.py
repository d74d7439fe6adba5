"""The command server's watchdog, on a local bash: limits without signalling the server.

The server used to be ticked by SIGUSR1 while it waited on a command. On a loaded box a
tick could land just as the kernel handed bash the command's exit status; bash's wait
then lost the status and blocked for good (density at 64 active envs saw dozens of
servers hang). The watchdog kills the command instead and the server only ever waits.
"""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from swerl.sandbox.base import SandboxConfig
from swerl.sandbox.shell import ShellChannel, server_command


def _local_channel(proc: subprocess.Popen) -> ShellChannel:
    channel = ShellChannel(
        proc.stdin.write, lambda: os.read(proc.stdout.fileno(), 65536), describe="local bash"
    )
    channel.handshake(10)
    return channel


@pytest.fixture
def servers():
    started: list[tuple[subprocess.Popen, ShellChannel]] = []

    def start() -> tuple[subprocess.Popen, ShellChannel]:
        proc = subprocess.Popen(
            server_command(SandboxConfig()), stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        started.append((proc, _local_channel(proc)))
        return started[-1]

    yield start
    for proc, channel in started:
        channel.quit()  # the server removes its directory on the way out
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def busy_cpus():
    """Keep every CPU busy, so the server and its watchdog are scheduled late."""
    stop = time.monotonic() + 120
    burners = [
        subprocess.Popen(["bash", "-c", f"while (( SECONDS < {int(stop - time.monotonic())} )); do :; done"])
        for _ in range(os.cpu_count() or 2)
    ]
    yield
    for b in burners:
        b.kill()
        b.wait()


def test_exit_statuses_survive_a_loaded_box(servers, busy_cpus):
    """Many short commands at once, ending around the watchdog's 0.25 s wake-ups: each
    keeps its status and output, none hangs."""

    def run(k: int) -> list[tuple[int, str]]:
        _, channel = servers()
        out = []
        for i in range(12):
            r = channel.execute(f"sleep 0.2{(k + i) % 10}; echo {k}-{i}; exit {(k + i) % 5}", "/", 20)
            out.append((r.returncode, r.output))
        return out

    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(run, range(8)))
    for k, got in enumerate(results):
        assert got == [((k + i) % 5, f"{k}-{i}\n") for i in range(12)]


def test_the_timeout_still_kills_the_whole_group(servers):
    _, channel = servers()
    t = time.monotonic()
    r = channel.execute("sleep 30 & sleep 30; echo never", "/", 0.5)
    assert (r.returncode, r.timed_out) == (137, True) and time.monotonic() - t < 5
    assert channel.execute("echo next", "/", 5).output == "next\n"


def test_the_watchdog_goes_with_the_server(servers):
    proc, channel = servers()
    children = psutil.Process(proc.pid).children()
    assert len(children) == 1, children  # the watchdog, idle
    watchdog = children[0]
    channel.quit()
    proc.wait(5)
    psutil.wait_procs([watchdog], timeout=5)
    assert not watchdog.is_running()


def test_no_signal_reaches_the_server_while_it_waits(servers):
    """A long command, watched: the server sleeps in wait the whole time, never woken."""
    proc, channel = servers()
    before = psutil.Process(proc.pid).num_ctx_switches().voluntary
    r = channel.execute("sleep 1.2", "/", 10)
    switches = psutil.Process(proc.pid).num_ctx_switches().voluntary - before
    assert r.returncode == 0
    assert switches < 20, f"the server woke {switches} times during a 1.2 s command"
