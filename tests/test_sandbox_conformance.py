"""The sandbox contract, run against every backend (one shared suite)."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from swerl.errors import SandboxClosed
from swerl.sandbox import make_sandbox

BACKENDS = ["docker", "enroot", "kubernetes"]


@pytest.fixture(params=BACKENDS)
def sandbox(request, base_image, sandbox_config):
    if request.param == "kubernetes":
        request.getfixturevalue("kubernetes_api")  # points KUBECONFIG at the API double
    if request.param == "enroot":
        request.getfixturevalue("enroot_double")  # points SWERL_ENROOT at the enroot test double
    sb = make_sandbox(request.param, base_image, sandbox_config.replace(output_cap=4096))
    try:
        yield sb.start()
    finally:
        sb.close()


def test_exit_codes(sandbox):
    assert sandbox.execute("true").returncode == 0
    assert sandbox.execute("exit 3").returncode == 3
    assert sandbox.execute("kill -TERM $$").returncode == 128 + 15
    assert sandbox.execute("no-such-command-xyz").returncode == 127


def test_cwd_and_env(sandbox):
    assert sandbox.execute("pwd", cwd="/tmp").output == "/tmp\n"
    assert sandbox.execute("pwd", cwd="/usr/lib").output == "/usr/lib\n"
    r = sandbox.execute("pwd", cwd="/no/such/dir")
    assert r.returncode != 0 and "no such directory" in r.output
    r = sandbox.execute('printf "%s|%s" "$A" "$B"', env={"A": "x y", "B": 'it\'s $HOME `id` "q"'})
    assert r.output == 'x y|it\'s $HOME `id` "q"'
    with pytest.raises(ValueError, match="invalid environment variable name"):
        sandbox.execute("true", env={"1BAD": "x"})


def test_the_servers_own_locale_does_not_leak(sandbox):
    """The server counts bytes under LC_ALL=C; a command sees the sandbox's own locale."""
    assert sandbox.execute('echo "${LC_ALL-unset}"; env | grep -c ^LC_ALL=').output == "unset\n0\n"
    r = sandbox.execute('echo "$LC_ALL"; printf %s "é" | wc -m', env={"LC_ALL": "C.UTF-8"})
    assert r.output == "C.UTF-8\n1\n"  # one character in a UTF-8 locale (two bytes under C)


def test_statuses_survive_commands_that_end_on_the_watchdogs_tick(sandbox):
    """The watchdog wakes every 0.25 s: commands that end right on a tick, with and
    without a timeout, keep their own exit status, and a kill that came too late is
    not charged to the next command."""
    for i in range(8):
        r = sandbox.execute(f"sleep 0.2{i % 10}; exit {i}", timeout=0.25 if i % 2 else 30)
        assert (r.returncode, r.timed_out) in ((i, False), (137, True)), (i, r)
        after = sandbox.execute("echo next", timeout=30)
        assert (after.returncode, after.timed_out, after.output) == (0, False, "next\n")


def test_a_command_starts_with_no_signal_ignored_or_blocked_by_the_server(sandbox):
    """The server traps nothing (its watchdog enforces the limits): a command gets SIGUSR1,
    SIGCHLD and the rest at their defaults."""
    fields = dict(
        line.split(":", 1)
        for line in sandbox.execute("grep -E '^Sig(Ign|Blk):' /proc/self/status").output.splitlines()
    )
    for name in ("SigIgn", "SigBlk"):
        mask = int(fields[name], 16)
        assert not mask & ((1 << (10 - 1)) | (1 << (17 - 1))), f"{name} {mask:#x}"


def test_a_command_holds_no_descriptor_of_the_server(sandbox):
    """Only stdin, stdout and stderr: a command (or what it leaves running) cannot write
    into the server's control pipes or keep the channel's own stderr open."""
    assert sandbox.execute("ls /proc/$$/fd; :").output.split() == ["0", "1", "2"]


def test_interrupt_kills_the_running_command_and_keeps_the_sandbox(sandbox):
    """``interrupt()`` (the shell's Ctrl-C) from another thread: the command's whole group is
    killed, the sandbox stays. Before the command starts or after it ends it does nothing, so
    it is sent until the command is gone."""
    result = []
    cmd = "sleep 300 & echo started; sleep 200"
    worker = threading.Thread(target=lambda: result.append(sandbox.execute(cmd, timeout=120)))
    t0 = time.monotonic()
    worker.start()
    # let it print first: a Ctrl-C before `echo` runs rightly leaves no output (a busy CI did)
    worker.join(3.0)
    while worker.is_alive() and time.monotonic() - t0 < 90:
        sandbox.interrupt()
        worker.join(0.5)
    (r,) = result
    assert (r.returncode, r.interrupted, r.timed_out, r.output) == (137, True, False, "started\n")
    assert time.monotonic() - t0 < 90
    left = sandbox.execute("for p in /proc/[0-9]*; do tr '\\0' ' ' <$p/cmdline; echo; done 2>/dev/null")
    assert "sleep 300" not in left.output and "sleep 200" not in left.output
    sandbox.interrupt()  # nothing running: nothing happens to the next command
    assert sandbox.execute("sleep 0.3; echo next").output == "next\n"


def test_commands_are_stateless(sandbox):
    sandbox.execute("cd /tmp; export X=1")
    assert sandbox.execute("pwd; echo ${X:-unset}", cwd="/").output == "/\nunset\n"


def test_stdout_stderr_interleaved_in_order(sandbox):
    r = sandbox.execute("for i in 1 2 3; do echo out$i; echo err$i >&2; done")
    assert r.output.split() == ["out1", "err1", "out2", "err2", "out3", "err3"]


def test_timeout_kills_grandchildren_and_sandbox_stays_usable(sandbox):
    start = time.monotonic()
    s = f"300.{uuid.uuid4().int % 10**9}"  # a unique marker: sandboxes may share the host's pids
    r = sandbox.execute(
        f"(sleep {s}; echo survived > /tmp/g) & (trap '' TERM; sleep {s}) & sleep {s}", timeout=1
    )
    assert r.timed_out and r.returncode == 137
    assert time.monotonic() - start < 10
    time.sleep(0.2)
    ps = sandbox.execute(f"ps -eo cmd | grep -c '^sleep {s}' || true")
    assert ps.output.strip() == "0", ps.output
    assert sandbox.execute("echo ok").output == "ok\n"
    assert sandbox.execute("test -e /tmp/g").returncode == 1


def test_output_cap_keeps_head_and_tail(sandbox):
    r = sandbox.execute("seq 1 100000")
    assert r.truncated
    assert r.output.startswith("1\n2\n3\n")
    assert r.output.endswith("99999\n100000\n")
    assert "bytes of output truncated" in r.output
    assert len(r.raw) < 4096 + 200
    small = sandbox.execute("seq 1 10")
    assert not small.truncated and small.output == "".join(f"{i}\n" for i in range(1, 11))


def test_any_bytes_survive_the_channel(sandbox):
    r = sandbox.execute(r"printf 'a\000b\377\376\nR 1 0 0 0 0 0\n'")
    assert r.raw == b"a\x00b\xff\xfe\nR 1 0 0 0 0 0\n"
    assert sandbox.execute("echo still-in-sync").output == "still-in-sync\n"


def test_binary_file_round_trip(sandbox):
    data = os.urandom(300_000) + bytes(range(256))
    sandbox.write_file("/tmp/deep/dir/blob.bin", data, mode=0o755)
    assert sandbox.read_file("/tmp/deep/dir/blob.bin") == data
    assert sandbox.execute("stat -c %a /tmp/deep/dir/blob.bin").output == "755\n"
    sandbox.write_file("/tmp/empty", b"")
    assert sandbox.read_file("/tmp/empty") == b""
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("/tmp/nope")
    with pytest.raises(OSError):
        sandbox.write_file("/tmp", b"x" * 1000)
    assert sandbox.execute("echo in-sync").output == "in-sync\n"


def test_no_network_by_default(sandbox):
    if sandbox.backend == "kubernetes":
        pytest.skip(
            "a pod always has its cluster's pod network: isolation is the CNI's NetworkPolicy "
            "(test_kubernetes.py::test_a_pod_has_the_pod_network_and_says_whether_it_may)"
        )
    r = sandbox.execute("ls /sys/class/net")
    assert r.output.split() == ["lo"]


def test_host_environment_is_not_visible(sandbox, monkeypatch):
    monkeypatch.setenv("SWERL_TEST_SECRET_KEY", "sk-should-not-leak")
    r = sandbox.execute("env")
    assert "sk-should-not-leak" not in r.output
    assert "SWERL_TEST_SECRET_KEY" not in r.output


def test_close_is_idempotent(sandbox):
    sandbox.close()
    sandbox.close()
    assert not sandbox.alive
    with pytest.raises(SandboxClosed):
        sandbox.execute("true")


@pytest.mark.parametrize("size", [1, 255, 4095, 4096, 4097, 70_000])
def test_every_byte_value_round_trips_at_any_size(sandbox, size):
    data = (bytes(range(256)) * (size // 256 + 1))[: size - 1] + b"\x00"
    sandbox.write_file("/tmp/all", data)
    assert sandbox.read_file("/tmp/all") == data
    r = sandbox.execute("cat /tmp/all")
    if size <= 4096:  # the fixture's output cap
        assert r.raw == data and not r.truncated
    else:
        assert r.truncated and r.raw.startswith(data[:2048]) and r.raw.endswith(data[-2048:])
