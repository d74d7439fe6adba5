"""A command's read ends in bounded time: past its timeout, or soon after its sandbox died.

A Docker sandbox whose container was removed under load once kept its reader blocked
for more than ten minutes past the command's timeout. The channel now reads by an
absolute deadline and asks the backend every few seconds of silence whether the sandbox
still exists. Here on a socket pair (the channel alone) and on real Docker containers
removed, killed, frozen or cut off mid-command; the Kubernetes and Enroot cases are in
their own files.
"""

from __future__ import annotations

import functools
import socket
import threading
import time

import pytest
from midcommand import fails_within, hold_stream_open

from swerl.errors import SandboxError
from swerl.sandbox.docker import DockerSandbox
from swerl.sandbox.shell import ShellChannel

BOUND = 30.0
"""Seconds within which a broken command must fail here (it would otherwise run 600 s)."""


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _channel(sock: socket.socket, probe=None) -> ShellChannel:
    ch = ShellChannel(sock.sendall, lambda: sock.recv(65536), sock.settimeout, "pair", probe=probe)
    ch.grace, ch.probe_every = 0.5, 0.1
    return ch


def test_a_trickling_reply_cannot_stretch_the_deadline(pair):
    """Each chunk used to restart the wait: a peer sending a byte now and then held it forever."""
    mine, peer = pair
    stop = threading.Event()

    def trickle() -> None:
        peer.recv(65536)  # the request
        while not stop.wait(0.1):
            peer.sendall(b"R")  # never a whole reply line

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    start = time.monotonic()
    try:
        with pytest.raises(SandboxError, match=r"no reply from the command server within the command's 1 s"):
            _channel(mine).execute("true", "/", timeout=1)
    finally:
        stop.set()
        t.join()
    assert time.monotonic() - start < 1.5 + 5  # the deadline, and scheduling slack


def test_a_silent_channel_without_timeout_ends_when_the_backend_says_the_sandbox_is_gone(pair):
    mine, peer = pair
    asked = []

    def probe() -> str | None:
        asked.append(time.monotonic())
        return "the sandbox was removed" if len(asked) >= 3 else None

    start = time.monotonic()
    with pytest.raises(SandboxError, match="the sandbox was removed"):
        _channel(mine, probe).execute("sleep 600", "/", timeout=0)
    assert len(asked) == 3 and time.monotonic() - start < 5
    assert peer.recv(65536).startswith(b"X 1 0 ")  # the request went out, with no timeout


def _cut(sb: DockerSandbox, how: str, client) -> None:
    if how == "killed":
        client.api.kill(sb.container_id)
    elif how == "removed, stream held open":
        client.api.remove_container(sb.container_id, force=True)
    elif how == "frozen":
        client.api.pause(sb.container_id)
    elif how == "stream ended":  # the daemon's end of the attach stream goes away, the container lives
        sb._sock._sock.shutdown(socket.SHUT_RD)


@pytest.mark.parametrize(
    "how, says",
    [
        # Killed: the stream closes, or under load the probe sees the exit first; either names it.
        ("killed", r"(channel closed|stopped during the command).*status=exited"),
        ("removed, stream held open", r"the container was removed during the command"),
        ("frozen", r"within the command's 2 s timeout \+ 1 s.*paused"),
        ("stream ended", r"channel closed"),
    ],
)
def test_a_docker_command_fails_in_bounded_time_when_its_container_goes(
    how, says, base_image, sandbox_config, docker_client
):
    sb = DockerSandbox(base_image, sandbox_config).start()
    try:
        sb._channel.grace, sb._channel.probe_every = 1.0, 0.5
        if how == "removed, stream held open":
            hold_stream_open(sb._channel, sb._sock._sock.gettimeout)
        assert sb.execute("echo up").output == "up\n"
        cut = functools.partial(_cut, sb, how, docker_client)
        fails_within(BOUND, sb, cut, says, timeout=2 if how == "frozen" else 0)
        assert not sb.alive
        with pytest.raises(SandboxError):
            sb.execute("true")
    finally:
        if how == "frozen":
            docker_client.api.unpause(sb.container_id)
        sb.close()
    assert not docker_client.api.containers(all=True, filters={"id": sb.container_id})
