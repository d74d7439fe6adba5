"""One isolation probe, run on Docker and on Enroot side by side with the same image and limits.

Each row is something a sandboxed process can try (see the host's processes, signal one,
write kernel settings, unshare namespaces, reach a host service, change identity, exceed
its limits, ...). The row's value on Docker is asserted (what Docker's defaults give), and
Enroot must give the same value. Enroot runs on the test double in CI, on the real binary
when SWERL_ENROOT_REAL is set. The README's isolation table reports these rows.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from swerl.sandbox import make_sandbox

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="swerl's isolation around enroot needs root"),
]

PROBE = r"""
import ctypes, errno, json, os, socket, struct, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
host_pid, host_port, host_ip, host_env, host_file, host_machine_id = sys.argv[1:7]
rows = {}
def in_child(fn):
    # run fn in a child (so a success changes nothing here); its result comes back as an errno name
    pid = os.fork()
    if pid == 0:
        try:
            r = fn()
            os._exit(0 if r is None or r >= 0 else min(ctypes.get_errno(), 250))
        except BaseException:
            os._exit(251)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return "ok" if code == 0 else errno.errorcode.get(code, f"exit {code}")
def syscall(nr, *args):
    return in_child(lambda: libc.syscall(nr, *[ctypes.c_long(a) if isinstance(a, int) else a for a in args]))
def errname(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def write(path):
    def w():
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, b"1")
        finally:
            os.close(fd)
    return errname(w)
def status(key):
    with open("/proc/self/status") as f:
        return next(line.split(":", 1)[1].strip() for line in f if line.startswith(key + ":"))
def sh(cmd):
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else f"exit {r.returncode}"
# processes, signals
rows["host process visible"] = os.path.exists(f"/proc/{host_pid}")
rows["signal a host process"] = errname(lambda: os.kill(int(host_pid), 0))
rows["few processes visible"] = len([p for p in os.listdir("/proc") if p.isdigit()]) < 20
# kernel settings, sysfs, mounts, devices
rows["write /proc/sys"] = write("/proc/sys/vm/drop_caches")
rows["write /sys"] = write("/sys/kernel/mm/transparent_hugepage/enabled")  # "1": invalid if it got there
rows["mount a tmpfs"] = syscall(165, b"none", b"/mnt", b"tmpfs", 0, None)
rows["devices"] = sorted(os.listdir("/dev"))
rows["/dev/fuse"] = os.path.exists("/dev/fuse")
rows["/sys/firmware entries"] = len(os.listdir("/sys/firmware")) if os.path.isdir("/sys/firmware") else 0
rows["other cgroups visible"] = any(
    os.path.isdir(os.path.join(r, d, e)) for r in ["/sys/fs/cgroup"] for d in os.listdir(r)
    if os.path.isdir(os.path.join(r, d)) for e in os.listdir(os.path.join(r, d))
)
# network
rows["interfaces"] = sorted(os.listdir("/sys/class/net"))
def connect(addr):
    with socket.socket() as s:
        s.settimeout(3)
        s.connect((addr, int(host_port)))
rows["reach a host service on 127.0.0.1"] = errname(lambda: connect("127.0.0.1"))
rows["reach a host service on the host's address"] = errname(lambda: connect(host_ip))
# host information
rows["hostname"] = socket.gethostname()
rows["host environment visible"] = host_env in os.environ
rows["host file visible"] = os.path.exists(host_file)
rows["host machine-id visible"] = bool(host_machine_id) and host_machine_id in sh("cat /etc/machine-id 2>/dev/null || true")
rows["/etc/hosts"] = open("/etc/hosts").read().split("\n")[:2]
# privileges
rows["bounding capabilities"] = status("CapBnd")
rows["no_new_privs"] = status("NoNewPrivs")
rows["seccomp mode"] = status("Seccomp")
rows["uid map"] = open("/proc/self/uid_map").read().split()
# syscalls Docker's default profile refuses (x86_64 numbers), each with arguments the kernel
# itself would accept or reject differently (so the filter, not the kernel, answers EPERM)
rows["unshare user namespace"] = syscall(272, 0x10000000)
rows["unshare mount namespace"] = syscall(272, 0x00020000)
rows["unshare network namespace"] = syscall(272, 0x40000000)
rows["setns"] = syscall(308, -1, 0)
rows["add_key"] = syscall(248, b"user", b"swerl-probe", b"x", 1, -2)
rows["keyctl"] = syscall(250, 0, -3, 0)
rows["perf_event_open"] = syscall(298, None, 0, -1, -1, 0xFFFFFFFF)
rows["bpf"] = syscall(321, 9999, None, 0)
# refused by both; Docker says EPERM, swerl's filter ENOSYS (libseccomp cannot express "none of these
# values" as one rule; the default action answers)
rows["personality READ_IMPLIES_EXEC refused"] = syscall(135, 0x0400000) in ("EPERM", "ENOSYS")
rows["clone3"] = syscall(435, None, 0)
rows["open_by_handle_at"] = syscall(304, -1, None, 0)
# environment and identity
rows["PATH"] = os.environ.get("PATH")
def chown(path):
    open(path, "w").close()
    err = errname(lambda: os.chown(path, 65534, 65534))
    return os.stat(path).st_uid if err == "ok" else err
rows["chown on the root filesystem"] = chown("/root/owned")
rows["chown on a tmpfs"] = chown("/dev/shm/owned")
rows["setuid changes the uid"] = in_child(lambda: 0 if (os.setuid(65534), os.getuid())[1] == 65534 else -1)
rows["su nobody"] = sh("su nobody -s /bin/sh -c 'id -u'")
rows["setpriv --reuid"] = sh("setpriv --reuid 65534 --regid 65534 --clear-groups id -u")
# limits (256m memory, 64 pids)
rows["allocate 512 MB"] = sh("python3 -c 'b = bytearray(512 << 20); print(\"allocated\")' 2>/dev/null; echo rc=$?").split()[-1]
def forks():
    n, kids = 0, []
    try:
        for _ in range(200):
            pid = os.fork()
            if pid == 0:
                time.sleep(3)
                os._exit(0)
            kids.append(pid)
    except OSError:
        pass
    for k in kids:
        os.kill(k, 9)
        os.waitpid(k, 0)
    return len(kids)
rows["200 forks under a limit of 64"] = "limited" if forks() < 64 else "not limited"
print(json.dumps(rows))
"""

EXPECTED = {
    "host process visible": False,
    "signal a host process": "ESRCH",
    "few processes visible": True,
    "write /proc/sys": "EROFS",
    "write /sys": "EROFS",
    "mount a tmpfs": "EPERM",
    "devices": [
        "fd",
        "full",
        "mqueue",
        "null",
        "ptmx",
        "pts",
        "random",
        "shm",
        "stderr",
        "stdin",
        "stdout",
        "tty",
        "urandom",
        "zero",
    ],
    "/dev/fuse": False,
    "/sys/firmware entries": 0,
    "other cgroups visible": False,
    "interfaces": ["lo"],
    "reach a host service on 127.0.0.1": "ECONNREFUSED",
    "reach a host service on the host's address": "ENETUNREACH",
    "hostname": "sandbox",
    "host environment visible": False,
    "host file visible": False,
    "host machine-id visible": False,
    "/etc/hosts": ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"],
    "bounding capabilities": "00000000000000fb",  # chown dac_override fowner fsetid kill setgid setuid
    "no_new_privs": "1",
    "seccomp mode": "2",
    "uid map": ["0", "0", "4294967295"],
    "unshare user namespace": "EPERM",
    "unshare mount namespace": "EPERM",
    "unshare network namespace": "EPERM",
    "setns": "EPERM",
    "add_key": "EPERM",
    "keyctl": "EPERM",
    "perf_event_open": "EPERM",
    "bpf": "EPERM",
    "personality READ_IMPLIES_EXEC refused": True,
    "clone3": "ENOSYS",
    "open_by_handle_at": "EPERM",
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "chown on the root filesystem": 65534,
    "chown on a tmpfs": 65534,
    "setuid changes the uid": "ok",
    "su nobody": "65534",
    "setpriv --reuid": "65534",
    "allocate 512 MB": "rc=137",
    "200 forks under a limit of 64": "limited",
}


def _host_ip() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))  # no packet is sent: picks the outgoing interface
        return s.getsockname()[0]


@pytest.fixture(scope="module")
def host_service():
    """A TCP server on all of the host's addresses: no sandbox should reach it."""
    srv = socket.create_server(("0.0.0.0", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                srv.accept()[0].close()
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    srv.close()


def _pids(mark: str) -> list[str]:
    return subprocess.run(["pgrep", "-f", f"^{mark}"], capture_output=True, text=True).stdout.split()


def probe(backend: str, image: str, config, host_service: int, monkeypatch) -> dict:
    """The probe's rows in a fresh sandbox, plus what is left of it on the host after close."""
    mark = f"swerl-probe-{uuid.uuid4().hex[:10]}"
    host = subprocess.Popen(["bash", "-c", f"exec -a {mark}-host sleep 300"])
    env_key = f"SWERL_PROBE_SECRET_{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv(env_key, "secret")
    host_file = f"/tmp/{mark}-file"
    open(host_file, "w").close()
    mid = Path("/etc/machine-id")
    machine_id = mid.read_text().strip() if mid.exists() else ""
    sb = make_sandbox(backend, image, config)
    try:
        sb.start()
        sb.write_file("/tmp/probe.py", PROBE.encode())
        args = [str(host.pid), str(host_service), _host_ip(), env_key, host_file, machine_id]
        r = sb.execute("python3 /tmp/probe.py " + " ".join(f"'{a}'" for a in args), timeout=120)
        assert r.returncode == 0, r.output
        rows = json.loads(r.output.strip().splitlines()[-1])
        sb.execute(f"setsid bash -c 'exec -a {mark}-a sleep 300' >/dev/null 2>&1 &")
        sb.execute(f"nohup bash -c 'exec -a {mark}-b sleep 300' >/dev/null 2>&1 &")
        time.sleep(0.5)
        rows["detached processes before close"] = len(_pids(mark)) - 1
    finally:
        sb.close()
        deadline = time.monotonic() + 10
        while len(_pids(mark)) > 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        rows["detached processes after close"] = len(_pids(mark)) - 1
        host.kill()
        host.wait()
        os.unlink(host_file)
    return rows


EXPECTED |= {"detached processes before close": 2, "detached processes after close": 0}


@pytest.fixture(scope="module")
def docker_rows(base_image, run_id, host_service):
    from swerl.sandbox.base import SandboxConfig

    with pytest.MonkeyPatch.context() as mp:
        return probe("docker", base_image, _config(SandboxConfig, run_id), host_service, mp)


def _config(cls, run_id):
    return cls(run_id=run_id, timeout=60, memory="256m", pids_limit=64, cpus=1.0)


def test_docker_gives_what_its_defaults_promise(docker_rows):
    assert {k: docker_rows.get(k) for k in EXPECTED} == EXPECTED


KNOWN_DIFFERENCES = {"chown on the root filesystem": "EPERM"}
"""Enroot's value where it differs from Docker, pinned: Enroot mounts the container's overlay with
reduced capabilities (enroot-mount keeps CAP_SYS_ADMIN and CAP_DAC_*), and the kernel's overlayfs
acts with its mounter's, so chown there fails loudly (never silently)."""


def test_enroot_equals_docker_row_by_row(
    docker_rows, base_image, run_id, host_service, enroot_double, monkeypatch
):
    from swerl.sandbox.base import SandboxConfig

    rows = probe("enroot", base_image, _config(SandboxConfig, run_id), host_service, monkeypatch)
    want = docker_rows | KNOWN_DIFFERENCES
    differ = {k: (want.get(k), rows.get(k)) for k in EXPECTED if rows.get(k) != want.get(k)}
    assert not differ, f"(expected, enroot) where they differ: {differ}"
