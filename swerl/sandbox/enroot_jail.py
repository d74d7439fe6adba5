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
- Docker's read-only and masked /proc and /sys paths;
- a fresh read-only sysfs (of the sandbox's own network namespace, so only ``lo``)
  with only the sandbox's own cgroups, read-only;
- a ``/dev`` with only null, zero, full, random, urandom, tty, a private devpts, shm
  and mqueue (and fuse for enroot's squashfuse, removed before the sandbox runs);
- uts (hostname ``sandbox``), ipc and cgroup namespaces, a network namespace with only
  ``lo`` unless the sandbox may use the network, and Docker's hosts, hostname and
  resolv.conf where enroot binds the host's.

Enroot runs with ``ENROOT_ALLOW_SUPERUSER=y``: no user namespace, so uids are real (setuid,
su and chown work, ``user`` is honoured) instead of faked by Enroot's own seccomp filter. What
keeps the sandbox in, as in Docker, is then: capabilities bounded to ``cap_add`` and
``no_new_privs`` (``setpriv`` in the container, see ``privilege_prefix``), and Docker's
default syscall filter (``seccomp.py``), loaded by ``JOIN_SCRIPT`` after Enroot's setup (it
needs mounts and namespaces) and before the sandbox's first command. Limits: a cgroup per
sandbox (memory, cpu, pids) where swerl may create one, else rlimits (address space;
processes per uid for a non-root user), see ``Limits``.
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
from swerl.sandbox.seccomp import LOADER

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
def mask(path):  # Docker's masked paths: an empty read-only tmpfs on a directory, /dev/null on a file
    if os.path.isdir(path):
        mount("swerl-mask", path, "tmpfs", RDONLY | SAFE, "size=0,mode=555")
    elif os.path.exists(path):
        mount("/dev/null", path, flags=BIND)
mark, net, life, etc, cgroups, skip, *cmd = sys.argv[1:]
for hook in filter(None, skip.split(":")):  # enroot runs only executable hooks
    mount(hook, hook, flags=BIND)
    mount(hook, hook, flags=REMOUNT | BIND | RDONLY | SAFE)
with open("/proc/sys/kernel/hostname", "w") as f:
    f.write("sandbox")
# /etc files enroot binds into every container: swerl's instead of the host's
for name in ("hosts", "hostname", "resolv.conf"):
    if os.path.exists("/etc/" + name) and os.path.exists(os.path.join(etc, name)):
        mount(os.path.join(etc, name), "/etc/" + name, flags=BIND)
        mount("/etc/" + name, "/etc/" + name, flags=REMOUNT | BIND | RDONLY | SAFE)
nodes = [n for n in ("null", "zero", "full", "random", "urandom", "tty", "fuse") if os.path.exists("/dev/" + n)]
fds = {n: os.open("/dev/" + n, os.O_PATH) for n in nodes}
mount("swerl-dev", "/dev", "tmpfs", NOSUID | NOEXEC | NODEV, "mode=755")
# Only the sandbox's own cgroups (the host's tree would show every other container's), staged
# in /dev while the host's sysfs, with every cgroup mount under it, is detached for a fresh
# one (of this network namespace).
os.mkdir("/dev/.cg")
groups = [p.split("=", 1) for p in cgroups.split(":") if p]
for ctrl, path in groups:
    os.mkdir("/dev/.cg/" + ctrl)
    mount(path, "/dev/.cg/" + ctrl, flags=BIND)
if libc.umount2(b"/sys", 2):  # MNT_DETACH
    sys.exit(f"swerl: cannot isolate the sandbox: umount /sys: {os.strerror(ctypes.get_errno())}")
mount("sysfs", "/sys", "sysfs", SAFE)  # rw first: the host's sysfs (network: true) is busy read-only
mount("/sys", "/sys", flags=REMOUNT | BIND | RDONLY | SAFE)
for p in ("/sys/firmware", "/sys/devices/virtual/powercap"):
    mask(p)
if os.path.isdir("/sys/fs/cgroup"):
    mount("swerl-cgroup", "/sys/fs/cgroup", "tmpfs", SAFE, "mode=755")
    for ctrl, _ in groups:
        os.mkdir("/sys/fs/cgroup/" + ctrl)
        mount("/dev/.cg/" + ctrl, "/sys/fs/cgroup/" + ctrl, flags=MOVE)
        mount("/sys/fs/cgroup/" + ctrl, "/sys/fs/cgroup/" + ctrl, flags=REMOUNT | BIND | RDONLY | SAFE)
        os.rmdir("/dev/.cg/" + ctrl)
    mount("/sys/fs/cgroup", "/sys/fs/cgroup", flags=REMOUNT | RDONLY | SAFE)
os.rmdir("/dev/.cg")
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
for p in ("kcore", "keys", "timer_list", "sched_debug", "latency_stats", "timer_stats", "acpi", "asound", "scsi"):
    mask("/proc/" + p)
if net == "1":  # bring up lo (SIOCGIFFLAGS, SIOCSIFFLAGS)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH", b"lo", 0)))[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 1))
# Pid 1 becomes a bash that reaps orphans; its exit takes the whole sandbox down.
os.execvp("bash", ["bash", "-c", 'timeout -s KILL "$1" "${@:2}"; exit $?', mark, life, *cmd])
"""
"""Pid 1 of the sandbox's namespaces (one Python process, no forks): the mounts above, the
hostname, ``lo``, then exec of the init bash with the lifetime around the joiner."""

ANCHOR = ["bash", "-c", 'echo "$$" && exec sleep 2147483647', "swerl-anchor"]
"""What ``enroot start`` runs: it reports its pid and holds the container's namespaces."""

JOIN_SCRIPT = (
    r"""
import ctypes, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
def fail(msg):
    sys.exit(f"swerl: cannot start the sandbox: {msg}")
def check(rc, what):
    if rc:
        fail(f"{what}: {os.strerror(ctypes.get_errno())}")
bpf_path, n = sys.argv[1], int(sys.argv[2])
enroot, inner = sys.argv[3:3 + n], sys.argv[3 + n:]
with open(bpf_path, "rb") as f:
    prog = f.read()
os.unlink(bpf_path)
anchor = subprocess.Popen(enroot, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
line = anchor.stdout.readline()
if not line.strip().isdigit():
    fail(f"enroot start exited {anchor.wait()} before the container was up")
pid = int(line)
for ns, flag in (("user", 0x10000000), ("mnt", 0x00020000)):
    if os.readlink(f"/proc/{pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}"):
        fd = os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY)
        check(libc.setns(fd, flag), f"setns {ns}")
        os.close(fd)
if os.stat("/") != os.stat(f"/proc/{pid}/root"):
    os.chroot(f"/proc/{pid}/root")
os.chdir("/")
# What Docker does not show: the fuse device enroot's squashfuse needed, the host's machine-id.
if os.path.exists("/dev/fuse"):
    libc.umount2(b"/dev/fuse", 2)  # MNT_DETACH
    os.unlink("/dev/fuse")
if os.path.ismount("/etc/machine-id"):
    check(libc.umount2(b"/etc/machine-id", 2), "umount /etc/machine-id")
# Enroot's tmpfs /tmp, /run and /run/lock (mode 755: only root could write there): the image's own
# directories instead, on the writable layer, as in Docker.
for path in ("/var/lock", "/run/lock", "/var/run", "/run", "/tmp"):
    if os.path.ismount(path) and not os.path.islink(path):
        check(libc.umount2(path.encode(), 2), "umount " + path)
if os.path.ismount("/dev"):  # device nodes made in /dev stay inert, as in Docker (devices cgroup)
    check(libc.mount(b"/dev", b"/dev", None, 32 | 4096 | 2 | 4 | 8, None), "remount /dev nodev")
"""
    + LOADER
    + r"""
try:
    load_seccomp(prog)
except OSError as e:
    fail(e)
os.execvp(inner[0], inner)
"""
)
"""The sandbox's last host-side step, in the jail: start the container (``ANCHOR``), enter its
mount namespace as real root, hide what Docker hides, load the syscall filter (Docker's
default profile, compiled by libseccomp on the host), exec the sandbox's first command. The
filter binds the sandbox and nothing of Enroot's setup, which needs mounts and namespaces."""

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


def cgroup_spec(limits: Limits) -> str:
    """``NAME=DIR:...`` for the jail: each sandbox cgroup and the name of its hierarchy's mount."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split()[:1] in (["cgroup"], ["cgroup2"]):
                points.append(left.split()[4])
    out = []
    for d in limits.cgroups:
        mount = max((p for p in points if str(d).startswith(p + "/")), key=len, default="")
        if mount:
            out.append(f"{os.path.basename(mount)}={d}")
    return ":".join(out)


def write_etc(directory: Path, network: bool) -> Path:
    """The hosts, hostname and resolv.conf a Docker container gets, for the jail to bind over
    the host's (which enroot would bind into the container)."""
    directory.mkdir(mode=0o700, exist_ok=True)
    hosts = (
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n"
        "ff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n"
    )
    (directory / "hosts").write_text(hosts)
    (directory / "hostname").write_text("sandbox\n")
    try:  # Docker copies the host's resolver config, less loopback name servers
        lines = Path("/etc/resolv.conf").read_text().splitlines()
    except OSError:
        lines = []
    keep = [ln for ln in lines if not re.match(r"\s*nameserver\s+(127\.|::1\b)", ln)]
    (directory / "resolv.conf").write_text("".join(f"{ln}\n" for ln in keep))
    return directory


def jail_argv(
    name: str,
    enroot: list[str],
    inner: list[str],
    *,
    network: bool,
    lifetime: float,
    limits: Limits,
    bpf: Path,
    etc: Path,
    skip: tuple[str, ...] | list[str] = (),
) -> list[str]:
    """``enroot`` (an ``enroot start`` of ``ANCHOR``) inside swerl's namespaces, cgroups and
    lifetime, then ``inner`` in the container under the syscall filter ``bpf``."""
    unshare = ["unshare", "--fork", "--kill-child", "--pid", "--mount-proc", "--uts", "--ipc", "--cgroup"]
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
    jail += [str(etc), cgroup_spec(limits), ":".join(skip)]
    join = [sys.executable, "-I", "-S", "-c", JOIN_SCRIPT, str(bpf), str(len(enroot) + len(ANCHOR))]
    return limited_argv([*unshare, "--", *jail, *join, *enroot, *ANCHOR, *inner], limits)


_CAP = re.compile(r"(?:CAP_)?([A-Za-z_]+)\Z")

PRIVILEGE_SCRIPT = r"""
if ! command -v setpriv >/dev/null 2>&1; then
    echo "swerl: the image has no setpriv (util-linux), which the enroot backend needs to bound" \
        "capabilities to cap_add" >&2
    exit 127
fi
caps=$1 user=$2
shift 2
ids=()
if [ -n "$user" ]; then  # as Docker's --user: NAME|UID[:GROUP|GID], groups from the image's /etc/group
    u=${user%%:*} g=
    [ "$u" = "$user" ] || g=${user#*:}
    if ! uid=$(id -u "$u" 2>/dev/null); then
        case $u in *[!0-9]*) echo "swerl: no user $u in the image's /etc/passwd" >&2; exit 126 ;; esac
        uid=$u
    fi
    if [ -z "$g" ]; then
        g=$(id -g "$u" 2>/dev/null || echo 0)
    elif ! [[ $g =~ ^[0-9]+$ ]]; then
        g=$(getent group "$g" | cut -d: -f3)
        [ -n "$g" ] || { echo "swerl: no group ${user#*:} in the image's /etc/group" >&2; exit 126; }
    fi
    ids=(--reuid "$uid" --regid "$g" --clear-groups)
    id "$u" >/dev/null 2>&1 && ids[4]=--init-groups  # the user's groups in the image
fi
exec setpriv --bounding-set "$caps" --inh-caps -all --no-new-privs "${ids[@]}" -- "$@"
"""

ROOT_USERS = ("", "root", "0", "0:0", "root:root")


def privilege_prefix(config: SandboxConfig, *, switch_user: bool = False) -> list[str]:
    """argv prefix run inside the container: capabilities bounded to ``cap_add``, ``no_new_privs``
    set (as Docker's ``cap_drop=ALL``, ``cap_add``, ``no-new-privileges``) and, with
    ``switch_user`` (no user namespace: real uids), the uid, gid and groups of ``config.user``."""
    caps = []
    for cap in config.cap_add:
        m = _CAP.match(cap.strip())
        if not m:
            raise ConfigError(f"invalid capability in cap_add: {cap!r}")
        caps.append("+all" if m.group(1).upper() == "ALL" else f"+{m.group(1).lower()}")
    user = config.user if switch_user and config.user not in ROOT_USERS else ""
    return ["bash", "-c", PRIVILEGE_SCRIPT, "swerl-priv", ",".join(["-all", *caps]), user]
