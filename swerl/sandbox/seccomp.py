"""A syscall filter equivalent to Docker's default seccomp profile, compiled by libseccomp.

Docker's profile is an allowlist: every syscall the kernel knows is allowed except those
its documentation lists as blocked (namespaces, mounts, keyrings, kernel modules, BPF,
perf, clocks, reboot, ...), some of which come back with a capability (``cap_add``), as
in Docker. Syscalls unknown to the filter (newer than libseccomp) fail with ENOSYS, as
runc does, so libc falls back to older ones; blocked ones fail with EPERM; ``clone3``
fails with ENOSYS (so libc uses ``clone``, whose namespace flags the filter can see).

The filter is built with libseccomp (through ``pyseccomp``, a ctypes binding with the API
of libseccomp's own Python binding) and exported as a BPF program, which swerl's enroot
jail loads in the sandbox's last process before it execs the sandbox's first command, so
the filter binds everything the sandbox runs and nothing of Enroot's own setup (which
needs mounts and namespaces). Without libseccomp a sandbox is refused, never started
unfiltered.
"""

from __future__ import annotations

import errno
import functools
import tempfile

from swerl.errors import BackendUnavailable

# Namespace flags clone may not carry without CAP_SYS_ADMIN (Docker's masked-clone rule).
CLONE_NAMESPACES = 0x00020000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x02000000
# personality values Docker allows: PER_LINUX, PER_LINUX32, UNAME26 (|), query.
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)

ALWAYS = ""
BLOCKED: dict[str, str] = {
    # name -> the capability that allows it back (ALWAYS: blocked whatever cap_add says)
    **dict.fromkeys(("add_key", "keyctl", "request_key"), ALWAYS),
    **dict.fromkeys(
        ("create_module", "get_kernel_syms", "query_module", "nfsservctl", "uselib", "ustat", "sysfs"),
        ALWAYS,
    ),
    **dict.fromkeys(
        ("_sysctl", "vm86", "vm86old", "modify_ldt", "afs_syscall", "tuxcall", "vserver"), ALWAYS
    ),
    **dict.fromkeys(("security", "putpmsg", "getpmsg"), ALWAYS),
    **dict.fromkeys(("io_uring_setup", "io_uring_enter", "io_uring_register"), ALWAYS),
    **dict.fromkeys(
        (
            "mount",
            "umount",
            "umount2",
            "pivot_root",
            "unshare",
            "setns",
            "bpf",
            "perf_event_open",
            "fanotify_init",
            "lookup_dcookie",
            "name_to_handle_at",
            "quotactl",
            "quotactl_fd",
            "swapon",
            "swapoff",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
            "move_mount",
            "open_tree",
            "mount_setattr",
            "sethostname",
            "setdomainname",
        ),
        "SYS_ADMIN",
    ),
    **dict.fromkeys(("init_module", "finit_module", "delete_module"), "SYS_MODULE"),
    **dict.fromkeys(("kexec_load", "kexec_file_load", "reboot"), "SYS_BOOT"),
    **dict.fromkeys(("clock_settime", "clock_adjtime", "settimeofday", "stime"), "SYS_TIME"),
    **dict.fromkeys(("get_mempolicy", "set_mempolicy", "mbind", "move_pages"), "SYS_NICE"),
    **dict.fromkeys(("kcmp", "userfaultfd"), "SYS_PTRACE"),
    **dict.fromkeys(("iopl", "ioperm"), "SYS_RAWIO"),
    "acct": "SYS_PACCT",
    "syslog": "SYSLOG",
    "vhangup": "SYS_TTY_CONFIG",
    "open_by_handle_at": "DAC_READ_SEARCH",
    "chroot": "SYS_CHROOT",
}
"""Docker's documented list of syscalls its default profile blocks, with the capability that
re-allows each (the kernel still checks that capability itself)."""


def _binding():
    try:
        import pyseccomp
    except (ImportError, OSError, RuntimeError) as e:  # pyseccomp raises when libseccomp is missing
        raise BackendUnavailable(
            "the enroot backend filters syscalls like Docker's default seccomp profile and needs "
            f"libseccomp and its Python binding (pyseccomp, the `enroot` extra, and apt libseccomp2): {e}"
        ) from e
    return pyseccomp


def _arches(sc) -> list[int]:
    native = sc.system_arch()
    if native == sc.Arch.X86_64:
        return [native, sc.Arch.X86, sc.Arch.X32]  # Docker's amd64 profile takes the 32-bit ABIs too
    return [native]


@functools.lru_cache(maxsize=1)
def known_syscalls() -> frozenset[str]:
    """Every syscall name libseccomp knows on this machine's architectures."""
    sc = _binding()
    names = set()
    for arch in _arches(sc):
        for nr in range(1024):
            try:
                name = sc.resolve_syscall(arch, nr)
            except (ValueError, OSError):
                continue
            if name:
                names.add(name.decode() if isinstance(name, bytes) else name)
    return frozenset(names)


def _caps(cap_add: tuple[str, ...]) -> set[str]:
    caps = {c.strip().upper().removeprefix("CAP_") for c in cap_add}
    if "ALL" in caps:
        caps |= set(BLOCKED.values()) - {ALWAYS}
    return caps


@functools.lru_cache(maxsize=32)
def docker_default_bpf(cap_add: tuple[str, ...]) -> bytes:
    """The BPF program of Docker's default profile for a container with ``cap_add``."""
    sc = _binding()
    caps = _caps(cap_add)
    f = sc.SyscallFilter(sc.ERRNO(errno.ENOSYS))
    for arch in _arches(sc)[1:]:
        f.add_arch(arch)
    f.set_attr(sc.Attr.CTL_OPTIMIZE, 2)  # a binary tree: a few comparisons per syscall
    sys_admin = "SYS_ADMIN" in caps
    for name in sorted(known_syscalls()):
        if name in ("clone", "clone3", "personality"):
            continue
        blocked_unless = BLOCKED.get(name)
        allowed = blocked_unless is None or (blocked_unless != ALWAYS and blocked_unless in caps)
        f.add_rule(sc.ALLOW if allowed else sc.ERRNO(errno.EPERM), name)
    if sys_admin:
        f.add_rule(sc.ALLOW, "clone")
        f.add_rule(sc.ALLOW, "clone3")
    else:
        f.add_rule(sc.ALLOW, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_NAMESPACES, 0))
        f.add_rule(
            sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_NAMESPACES, CLONE_NAMESPACES)
        )
        # clone3 keeps the default action, ENOSYS
    for value in PERSONALITIES:
        f.add_rule(sc.ALLOW, "personality", sc.Arg(0, sc.EQ, value))
    with tempfile.TemporaryFile() as tmp:
        f.export_bpf(tmp)
        tmp.seek(0)
        return tmp.read()


def available() -> str:
    """Empty when a filter can be built here, else why not."""
    try:
        docker_default_bpf(("CHOWN",))
    except BackendUnavailable as e:
        return str(e)
    return ""


LOADER = r"""
def load_seccomp(prog):
    # prctl(PR_SET_NO_NEW_PRIVS) and prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &sock_fprog):
    # the program is libseccomp's export, loaded as is.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(prog, len(prog))
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    fprog = Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(fprog), 0, 0):
        raise OSError(ctypes.get_errno(), "cannot load the seccomp filter")
"""
"""Python source of ``load_seccomp(prog)``, run by the jail (stdlib only: the jail runs ``-I -S``)."""

__all__ = ["BLOCKED", "LOADER", "available", "docker_default_bpf", "known_syscalls"]
