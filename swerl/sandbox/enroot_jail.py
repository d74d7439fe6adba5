"""What the enroot backend adds around ``enroot start`` so a sandbox is isolated like Docker's.

Enroot run as root gives a container user and mount namespaces only: the uid map is
``0 0 1`` (sandbox root is host root for every access check), host pids are visible
and signalable, host ``/proc/sys``, ``/sys`` (with rw cgroup mounts) and ``/dev`` are
bound in, all capabilities are kept, no limits apply, and nothing ties the
container's processes to the process that started it. Enroot builds the container's
``/proc``, ``/sys`` and ``/dev`` by binding the caller's, so swerl starts enroot
inside namespaces of its own and gives it safe ones to bind:

- a pid namespace with its own ``/proc`` (host processes are invisible), whose
  pid 1 is a bash that reaps orphans; when it exits the kernel kills everything
  the sandbox started, however detached (``setsid``, ``nohup``);
- ``/proc/sys``, ``/proc/sysrq-trigger``, ``/proc/irq``, ``/proc/bus``, ``/proc/fs``
  read-only and ``/proc/kcore``, ``keys``, ``timer_list``, ``sched_debug`` masked
  (Docker's list);
- a fresh read-only sysfs (of the sandbox's own network namespace, so only ``lo``)
  and read-only cgroup mounts;
- a ``/dev`` with only null, zero, full, random, urandom, tty, fuse (squashfuse
  needs it), a private devpts, shm and mqueue: no host disks;
- uts (hostname ``sandbox``) and ipc namespaces, and a network namespace with only
  ``lo`` unless the sandbox may use the network.

These mounts are made by real root in namespaces owned by the host's user
namespace, so inside enroot's user namespace they are locked: the sandbox can
neither unmount them nor remount them writable, nor mount a new proc or sysfs.
Capabilities are bounded to ``cap_add`` and ``no_new_privs`` is set by ``setpriv``
inside the container (see ``privilege_prefix``). Limits: a cgroup per sandbox (memory, cpu, pids) where
swerl may create one, else rlimits (address space; processes per uid for a
non-root user), see ``Limits``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from docker.utils import parse_bytes

from swerl.errors import ConfigError
from swerl.sandbox.base import SandboxConfig

log = logging.getLogger(__name__)

JAIL_MARK = "swerl-jail"
"""argv[0] of the jail's pid 1 is ``swerl-jail:NAME``, so reap can tell a sandbox's processes."""

JAIL_SETUP = r"""
import ctypes, fcntl, os, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, MOVE, REC = 1, 2, 4, 8, 32, 4096, 8192, 16384
SAFE = NOSUID | NODEV | NOEXEC
def mount(src, dst, fstype="", flags=0, data=""):
    if libc.mount(src.encode(), dst.encode(), fstype.encode(), flags, data.encode()):
        e = ctypes.get_errno()
        sys.exit(f"swerl: cannot isolate the sandbox: mount {src} on {dst}: {os.strerror(e)}")
def read_only(path, flags=0):
    mount(path, path, flags=BIND)
    mount(path, path, flags=REMOUNT | BIND | RDONLY | flags)
mark, net, life, *cmd = sys.argv[1:]
with open("/proc/sys/kernel/hostname", "w") as f:
    f.write("sandbox")
nodes = [n for n in ("null", "zero", "full", "random", "urandom", "tty", "fuse") if os.path.exists("/dev/" + n)]
fds = {n: os.open("/dev/" + n, os.O_PATH) for n in nodes}
# A /dev with only these nodes, which also stages the host's cgroup mounts while a fresh
# sysfs (of this network namespace) replaces /sys: enroot's cgroups hook binds this
# process's own cgroup from them.
mount("swerl-dev", "/dev", "tmpfs", NOSUID | NOEXEC, "mode=755")
os.mkdir("/dev/.cg")
mount("/sys/fs/cgroup", "/dev/.cg", flags=BIND | REC)
mount("sysfs", "/sys", "sysfs", RDONLY | SAFE)
mount("/dev/.cg", "/sys/fs/cgroup", flags=MOVE)
os.rmdir("/dev/.cg")
with open("/proc/self/mountinfo") as f:
    cgroups = [line.split()[4] for line in f if line.split()[4].startswith("/sys/fs/cgroup")]
for m in cgroups:
    mount(m, m, flags=REMOUNT | BIND | RDONLY | SAFE)
for n, fd in fds.items():
    open("/dev/" + n, "w").close()
    mount(f"/proc/self/fd/{fd}", "/dev/" + n, flags=BIND)
    os.close(fd)
for d, fstype, data in (("pts", "devpts", "newinstance,ptmxmode=0666,mode=620"), ("shm", "tmpfs", "mode=1777"),
                        ("mqueue", "mqueue", "")):
    os.mkdir("/dev/" + d)
    mount(d, "/dev/" + d, fstype, NOSUID | NOEXEC | (NODEV if d != "pts" else 0), data)
for link, target in (("fd", "/proc/self/fd"), ("ptmx", "pts/ptmx"), ("stdin", "/proc/self/fd/0"),
                     ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
    os.symlink(target, "/dev/" + link)
# Docker's read-only and masked /proc paths (those this kernel shows in a pid namespace)
for p in ("sys", "sysrq-trigger", "irq", "bus", "fs"):
    if os.path.exists("/proc/" + p):
        read_only("/proc/" + p, SAFE)
for p in ("kcore", "keys", "timer_list", "sched_debug"):
    if os.path.exists("/proc/" + p):
        mount("/dev/null", "/proc/" + p, flags=BIND)
if net == "1":  # bring up lo (SIOCGIFFLAGS, SIOCSIFFLAGS)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH", b"lo", 0)))[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 1))
# Pid 1 becomes a bash that reaps orphans; its exit takes the whole sandbox down.
os.execvp("bash", ["bash", "-c", 'timeout -s KILL "$1" "${@:2}"; exit $?', mark, life, *cmd])
"""
"""Pid 1 of the sandbox's namespaces (one Python process, no forks): the mounts above, the
hostname, ``lo``, then exec of the init bash with the lifetime around ``enroot start``."""

ENTER_SCRIPT = r"""
while [ "$1" != -- ]; do
    case $1 in
    cg=*) echo $$ >"${1#cg=}" || { echo "swerl: cannot join cgroup ${1#cg=}" >&2; exit 112; } ;;
    as=*) ulimit -v "${1#as=}" || exit 112 ;;
    nproc=*) ulimit -u "${1#nproc=}" || exit 112 ;;
    esac
    shift
done
shift
exec "$@"
"""
"""Runs before the namespaces exist: joins the cgroups or sets rlimits, so everything the
sandbox starts is counted, then execs ``unshare``."""


@dataclass
class Limits:
    """Where a sandbox's memory, cpu and pids limits live: cgroup directories, or rlimits."""

    cgroups: list[Path] = field(default_factory=list)
    rlimits: dict[str, int] = field(default_factory=dict)
    applied: dict[str, str] = field(default_factory=dict)
    """limit -> how it is enforced (``cgroup``, ``rlimit`` or ``none``), for errors and docs."""

    def enter_args(self) -> list[str]:
        return [f"cg={d / 'cgroup.procs'}" for d in self.cgroups] + [
            f"{k}={v}" for k, v in self.rlimits.items()
        ]

    def memory_usage(self) -> int | None:
        for d in self.cgroups:
            for f in ("memory.usage_in_bytes", "memory.current"):
                with contextlib.suppress(OSError, ValueError):
                    return int((d / f).read_text())
        return None

    def remove(self, wait: float = 2.0) -> None:
        """Remove the cgroups (their processes are gone, or going: retry a moment)."""
        deadline = time.monotonic() + wait
        for d in self.cgroups:
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if time.monotonic() > deadline:
                        log.warning("cannot remove cgroup %s: %s", d, e)
                        break
                    time.sleep(0.01)
        self.cgroups = []


def own_cgroups() -> dict[str, Path]:
    """Controller -> this process's cgroup directory, for v1 hierarchies and the v2 one."""
    mounts: dict[str, tuple[str, str]] = {}  # controller -> (mount root, mount point)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, _src, opts = [*right.split(), "", "", ""][:3]
            root, point = left.split()[3:5]
            if fstype == "cgroup":
                for ctrl in opts.split(","):
                    if ctrl in ("memory", "cpu", "pids"):
                        mounts[ctrl] = (root, point)
            elif fstype == "cgroup2" and "v2" not in mounts:
                mounts["v2"] = (root, point)
    out: dict[str, Path] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            for ctrl in ctrls.split(",") if ctrls else ["v2"]:
                if ctrl in mounts:
                    root, point = mounts[ctrl]
                    rel = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
                    out[ctrl] = Path(point) / rel
    return out


def _cpu_period_quota(cpus: float) -> tuple[int, int]:
    period = 100_000
    return period, max(1000, math.ceil(cpus * period))


def make_limits(name: str, config: SandboxConfig) -> Limits:
    """A cgroup per sandbox with the config's limits where possible, else rlimits (say which)."""
    memory = parse_bytes(config.memory) if config.memory else 0
    if config.memory and memory <= 0:
        raise ConfigError(f"cannot read memory limit {config.memory!r}")
    limits = Limits()
    own = own_cgroups()
    wanted = {"memory": memory, "cpus": config.cpus, "pids": config.pids_limit}
    period, quota = _cpu_period_quota(config.cpus) if config.cpus else (0, 0)
    v1 = {
        "memory": ("memory", [("memory.limit_in_bytes", memory), ("memory.memsw.limit_in_bytes", memory)]),
        "cpus": ("cpu", [("cpu.cfs_period_us", period), ("cpu.cfs_quota_us", quota)]),
        "pids": ("pids", [("pids.max", config.pids_limit)]),
    }
    for what, (ctrl, files) in v1.items():
        if not wanted[what]:
            limits.applied[what] = "none (not asked)"
            continue
        parent = own.get(ctrl)
        if parent is not None and _v1_cgroup(parent / name, files, limits):
            limits.applied[what] = "cgroup"
    if "v2" in own and any(w not in limits.applied for w in wanted):
        _v2_cgroup(own["v2"] / name, memory, period, quota, config.pids_limit, limits)
    for what in wanted:
        limits.applied.setdefault(what, "none")
    if limits.applied["memory"] == "none" and memory:
        limits.rlimits["as"] = max(1, memory // 1024)
        limits.applied["memory"] = "rlimit (address space)"
    if limits.applied["pids"] == "none" and config.pids_limit and os.geteuid() != 0:
        limits.rlimits["nproc"] = config.pids_limit
        limits.applied["pids"] = "rlimit (processes of this uid)"
    missing = [k for k, v in limits.applied.items() if v == "none"]
    if missing:
        log.warning(
            "enroot sandbox %s: no cgroup could be created for %s (no delegation?): not enforced",
            name,
            ", ".join(missing),
        )
    return limits


def _v1_cgroup(d: Path, files: list[tuple[str, int]], limits: Limits) -> bool:
    try:
        d.mkdir(exist_ok=True)
    except OSError:
        return False
    if d not in limits.cgroups:
        limits.cgroups.append(d)
    for fname, value in files:
        f = d / fname
        if fname == "memory.memsw.limit_in_bytes" and not f.exists():
            continue  # swap accounting off: memory.limit_in_bytes alone
        try:
            f.write_text(str(value))
        except OSError as e:
            log.warning("cannot set %s: %s", f, e)
            return False
    return True


def _v2_cgroup(d: Path, memory: int, period: int, quota: int, pids: int, limits: Limits) -> None:
    want = {"memory": memory, "cpu": quota, "pids": pids}
    try:
        available = set((d.parent / "cgroup.subtree_control").read_text().split())
        if not any(want[c] and c in available for c in want):
            return
        d.mkdir(exist_ok=True)
    except OSError:
        return
    limits.cgroups.append(d)
    files = {
        "memory": [("memory.max", memory), ("memory.swap.max", 0)],
        "cpu": [("cpu.max", f"{quota} {period}")],
        "pids": [("pids.max", pids)],
    }
    for ctrl, value in want.items():
        if not value or ctrl not in available:
            continue
        try:
            for fname, v in files[ctrl]:
                (d / fname).write_text(str(v))
        except OSError:
            continue
        limits.applied["cpus" if ctrl == "cpu" else ctrl] = "cgroup"


def limited_argv(argv: list[str], limits: Limits) -> list[str]:
    """``argv`` in the sandbox's cgroups, or under its rlimits."""
    if not (limits.cgroups or limits.rlimits):
        return argv
    return ["bash", "-c", ENTER_SCRIPT, "swerl-enter", *limits.enter_args(), "--", *argv]


def jail_argv(name: str, argv: list[str], *, network: bool, lifetime: float, limits: Limits) -> list[str]:
    """``argv`` (an ``enroot start``) inside swerl's namespaces, cgroups and lifetime."""
    unshare = ["unshare", "--fork", "--kill-child", "--pid", "--mount-proc", "--uts", "--ipc"]
    if not network:
        unshare.append("--net")
    life = str(max(1, int(lifetime))) if lifetime else "0"
    jail = [
        sys.executable,
        "-I",
        "-S",
        "-c",
        JAIL_SETUP,
        f"{JAIL_MARK}:{name}",
        "0" if network else "1",
        life,
    ]
    return limited_argv([*unshare, "--", *jail, *argv], limits)


_CAP = re.compile(r"(?:CAP_)?([A-Za-z_]+)\Z")

PRIVILEGE_SCRIPT = r"""
if ! command -v setpriv >/dev/null 2>&1; then
    echo "swerl: the image has no setpriv (util-linux), which the enroot backend needs to bound" \
        "capabilities to cap_add" >&2
    exit 127
fi
exec setpriv --bounding-set "$1" --inh-caps -all --no-new-privs -- "${@:2}"
"""

ROOT_USERS = ("", "root", "0", "0:0", "root:root")


def privilege_prefix(config: SandboxConfig) -> list[str]:
    """argv prefix run inside the container: capabilities bounded to ``cap_add`` and
    ``no_new_privs`` set (as Docker's ``cap_drop=ALL``, ``cap_add``, ``no-new-privileges``)."""
    caps = []
    for cap in config.cap_add:
        m = _CAP.match(cap.strip())
        if not m:
            raise ConfigError(f"invalid capability in cap_add: {cap!r}")
        caps.append("+all" if m.group(1).upper() == "ALL" else f"+{m.group(1).lower()}")
    return ["bash", "-c", PRIVILEGE_SCRIPT, "swerl-priv", ",".join(["-all", *caps])]
