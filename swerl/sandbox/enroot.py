"""Enroot backend: Slurm clusters with Enroot (and optionally Pyxis), no Docker daemon.

Lifecycle, all through the ``enroot`` CLI as subprocesses:

1. ``enroot import -o CACHE/IMAGE.sqsh dockerd://IMAGE`` (or ``docker://[REGISTRY#]IMAGE``)
   once per image. Concurrent imports of one image (threads, actors, nodes sharing the
   cache) serialize on ``IMAGE.sqsh.lock`` and import to a temp file that is renamed
   into place atomically, so a reader never sees a half-written image.
2. ``enroot start --rw IMAGE.sqsh CMD`` per sandbox: enroot mounts the squashfs with
   squashfuse under an overlay whose upper layer is a tmpfs, so nothing is copied and
   nothing is left to delete (``start_from: image``, the default where squashfuse and
   ``/dev/fuse`` exist). Without them, ``enroot create -n swerl-<run id>-<pid>-<n>``
   unpacks the image per sandbox and ``enroot remove -f`` deletes it on close
   (``start_from: create``).
3. The start process's stdin/stdout carry swerl's command server (``shell.py``), so a
   command costs a few ms, not the ~0.2-0.3 s of an ``enroot start``. Before the server
   starts, swerl sends the sandbox's environment over the same pipe: exactly Docker's
   (the image's ENV, ``SandboxConfig.env`` with any characters, HOSTNAME, HOME), whatever
   enroot's login shell or ``-e`` parsing would make of it.
4. ``reap(run_id)`` removes a run's leftovers: created containers (by name in ``enroot
   list``, also ``pyxis_*`` ones in the node's default data path) and running sandboxes
   (by the pid file each one keeps in the runtime directory).

Isolation (``isolation: auto``: ``swerl`` as root, else ``enroot``): as root, swerl runs
``enroot start`` (no user namespace) inside its own pid, mount, uts, ipc, cgroup and
(``network: false``) network namespaces with a safe /proc, /sys and /dev, a cgroup with the
memory/cpu/pids limits and the sandbox's lifetime, then enters the container to load Docker's
default syscall filter and switch to ``SandboxConfig.user`` (see ``enroot_jail.py``);
everything the sandbox started dies with it. ``isolation: enroot`` (non-root) is Enroot's
own: user and mount namespaces, host pids visible, no syscall filter, root only, no limits
beyond rlimits and the Slurm job's cgroup, and the network isolated only with ``unshare
--net`` (root) or accepted with ``network_isolation: none``. In both, the server runs under
``setpriv``: capabilities bounded to ``cap_add`` and ``no_new_privs``. The enroot process itself gets a clean environment (PATH, HOME, USER,
LOGNAME, ENROOT_* site settings, swerl's ENROOT_*_PATH, ``enroot_env``): API keys in the host
environment never reach a sandbox. swerl's directories (``$XDG_CACHE_HOME/swerl/enroot`` or
``~/.cache/swerl/enroot``, or ``root``/$SWERL_ENROOT_ROOT) are created mode 0700; a
world-writable one is refused. ``cache_dir`` (images) may be on a shared filesystem.

Pyxis (``launcher: pyxis``), inside an allocation that is retained for the run:
``srun --overlap --nodes=1 --ntasks=1 --jobid=J --unbuffered --time=LIFETIME
--container-image=IMAGE.sqsh --container-writable --container-workdir=WORKDIR ...``, an
unnamed container (Pyxis removes it when the step ends), srun's stdin/stdout carrying the
command server. Preconditions: Enroot and Pyxis on the nodes; the image cache readable from
them (a shared ``cache_dir``: ``pyxis_image: dockerd://...`` re-imports on every srun);
SLURM_JOB_ID set (run inside ``salloc``/``sbatch``). Pyxis ignores ENROOT_*_PATH (the
node's enroot settings apply) and its containers share the host's network, so
``network_isolation`` must be ``none``; swerl adds a pid namespace inside the container
(``unshare``). Limits go to ``srun --mem``/``--cpus-per-task`` where Slurm enforces them,
else the config is refused (``pyxis_limit_args``). No syscall filter there.

The binary is ``enroot`` on PATH, or ``$SWERL_ENROOT``, or the ``enroot`` option.
Every failure or timeout of enroot or srun is a SandboxError carrying its stderr.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import logging
import math
import os
import re
import select
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from docker.utils import parse_bytes

from swerl.errors import BackendUnavailable, ConfigError, ImageMissing, SandboxError
from swerl.sandbox.base import ChannelSandbox, SandboxConfig
from swerl.sandbox.enroot_jail import (
    JAIL_MARK,
    ROOT_USERS,
    Limits,
    jail_argv,
    limited_argv,
    make_limits,
    privilege_prefix,
    write_etc,
)
from swerl.sandbox.seccomp import docker_default_bpf
from swerl.sandbox.shell import ShellChannel, encode_env, server_command

log = logging.getLogger(__name__)

ENV_BINARY = "SWERL_ENROOT"
ENV_ROOT = "SWERL_ENROOT_ROOT"
PASS_ENV = ("PATH", "HOME", "USER", "LOGNAME")
NAME_PREFIX = "swerl-"
_counter = itertools.count(1)
_LO_UP = 'ip link set lo up 2>/dev/null || ifconfig lo up 2>/dev/null; exec "$@"'


@dataclass(frozen=True)
class EnrootOptions:
    """``backend.options`` of the enroot backend (all optional)."""

    enroot: str = ""
    """The enroot binary; default $SWERL_ENROOT or ``enroot`` on PATH."""
    root: str = ""
    """Per-user directory (mode 0700); default $SWERL_ENROOT_ROOT, else under the XDG cache."""
    cache_dir: str = ""
    """Imported images (``*.sqsh``); default ROOT/images. May be shared between nodes."""
    data_dir: str = ""
    """Unpacked container roots (ENROOT_DATA_PATH); default ROOT/data. Best node-local."""
    source: str = "dockerd"
    """``dockerd`` (the node's docker daemon) or ``docker`` (a registry)."""
    registry: str = ""
    """For ``source: docker``: ``docker://REGISTRY#IMAGE``."""
    network_isolation: str = "auto"
    """``auto`` (a network namespace as root, else refuse), ``unshare``, or ``none`` (host network)."""
    isolation: str = "auto"
    """``swerl`` (swerl's namespaces, cgroup and safe /proc, /sys, /dev around enroot; needs
    root), ``enroot`` (Enroot's own), or ``auto`` (``swerl`` as root, else ``enroot``)."""
    start_from: str = "auto"
    """``image`` (``enroot start`` on the .sqsh: squashfuse, no copy), ``create`` (``enroot
    create`` per sandbox), or ``auto`` (``image`` where squashfuse and /dev/fuse exist)."""
    launcher: str = "enroot"
    """``enroot`` (enroot start on this node) or ``pyxis`` (srun --container-image)."""
    pyxis_image: str = ""
    """For pyxis: what ``--container-image`` gets; default the imported .sqsh."""
    srun_args: tuple[str, ...] = ()
    mounts: tuple[str, ...] = ()
    """``SRC:DST`` bind mounts (``-m``), e.g. a read-only dataset."""
    enroot_env: dict[str, str] = field(default_factory=dict)
    """Extra environment of the enroot process (ENROOT_SQUASH_OPTIONS, ...)."""
    import_timeout: float = 1800.0
    cli_timeout: float = 300.0
    """Timeout of create, remove and list."""

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> EnrootOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(f"unknown enroot backend option(s) {unknown}; known: {sorted(known)}")
        kw = dict(kwargs)
        for key in ("srun_args", "mounts"):
            if key in kw:
                kw[key] = tuple(kw[key])
        opts = cls(**kw)
        for key, allowed in (
            ("source", ("dockerd", "docker")),
            ("network_isolation", ("auto", "unshare", "none")),
            ("isolation", ("auto", "swerl", "enroot")),
            ("start_from", ("auto", "image", "create")),
            ("launcher", ("enroot", "pyxis")),
        ):
            if getattr(opts, key) not in allowed:
                raise ConfigError(f"enroot option {key} must be one of {allowed}, got {getattr(opts, key)!r}")
        return opts

    @property
    def binary(self) -> str:
        return self.enroot or os.environ.get(ENV_BINARY) or "enroot"

    @property
    def root_dir(self) -> Path:
        if self.root or os.environ.get(ENV_ROOT):
            return Path(self.root or os.environ[ENV_ROOT]).expanduser()
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(xdg) / "swerl" / "enroot"

    def dirs(self) -> dict[str, Path]:
        """The directories, created mode 0700 where missing."""
        root = private_dir(self.root_dir)
        return {
            "images": private_dir(Path(self.cache_dir).expanduser() if self.cache_dir else root / "images"),
            "data": private_dir(Path(self.data_dir).expanduser() if self.data_dir else root / "data"),
            "layers": private_dir(root / "layers"),
            "runtime": private_dir(root / "runtime"),
            "logs": private_dir(root / "logs"),
        }

    def process_env(self, dirs: dict[str, Path], extra: dict[str, str] | None = None) -> dict[str, str]:
        """The whole environment of an enroot process: nothing else of the host's."""
        env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
        env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        env["ENROOT_LOGIN_SHELL"] = "n"  # swerl sets the environment itself; /etc/profile only costs
        env |= {k: v for k, v in os.environ.items() if k.startswith("ENROOT_")}
        env |= {
            "ENROOT_DATA_PATH": str(dirs["data"]),
            "ENROOT_CACHE_PATH": str(dirs["layers"]),
            "ENROOT_RUNTIME_PATH": str(dirs["runtime"]),
        }
        return env | dict(self.enroot_env) | dict(extra or {})


def private_dir(path: Path) -> Path:
    """``path`` as a directory: missing levels are created mode 0700; world-writable is refused."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            continue
        os.chmod(d, 0o700)
    st = path.stat()
    if st.st_mode & 0o002:
        raise SandboxError(f"refusing to use {path}: it is world-writable (chmod o-w it or pick another)")
    return path


def _tail(data: bytes | str, n: int = 2000) -> str:
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    return text.strip()[-n:] or "(no stderr)"


def binary_missing(binary: str, what: str) -> BackendUnavailable:
    return BackendUnavailable(
        f"cannot run {binary!r} ({what}): not found. Install Enroot on the node(s), or set "
        f"backend.options.enroot or ${ENV_BINARY} to its path"
    )


def run_cli(argv: list[str], env: dict[str, str], timeout: float, what: str) -> str:
    """Run one enroot/srun command to completion; any failure is a SandboxError with its stderr."""
    try:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError as e:
        raise binary_missing(argv[0], what) from e
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _killpg(proc)
        out, err = proc.communicate()
        raise SandboxError(f"{what} timed out after {timeout:g} s: {_tail(err)}") from None
    if proc.returncode:
        raise SandboxError(f"{what} failed (exit {proc.returncode}): {_tail(err)}")
    return out.decode(errors="replace")


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def image_file_name(image: str, image_id: str = "") -> str:
    """``sweb.eval.x86_64.a__b-1:latest`` -> ``sweb.eval.x86_64.a__b-1+latest[-ID].sqsh``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "+", image)
    return f"{safe}-{image_id[:12]}.sqsh" if image_id else f"{safe}.sqsh"


def _docker_image_id(image: str) -> str:
    """The local daemon's id of ``image`` (so a rebuilt image is re-imported); "" if unknown."""
    try:
        import docker
        import docker.errors

        client = docker.from_env(timeout=10)
    except Exception:
        return ""
    try:
        return client.images.get(image).id.split(":")[-1]
    except docker.errors.ImageNotFound as e:
        raise ImageMissing(
            f"image {image!r} is not in the node's docker daemon, so `enroot import dockerd://` cannot "
            "export it. Build it (`swerl tasks build-images SUITE`) or use backend.options.source: docker"
        ) from e
    except Exception:
        return ""
    finally:
        client.close()


def safe_run_id(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)


def container_pattern(run_id: str | None) -> re.Pattern[str]:
    """Names swerl gives containers: ``swerl-<run id>-<pid>-<n>``; of one run, its parts'
    too (``<run id>-...``, as ``base.of_run``)."""
    rid = re.escape(safe_run_id(run_id)) + r"(?:-[A-Za-z0-9_.-]+)?" if run_id else r"[A-Za-z0-9_.-]+"
    return re.compile(rf"(?:pyxis_)?{NAME_PREFIX}{rid}-\d+-\d+")


def ensure_image(image: str, opts: EnrootOptions, dirs: dict[str, Path], env: dict[str, str]) -> Path:
    """The image's squashfs in the cache, importing it once (locked, temp file, atomic rename)."""
    image_id = _docker_image_id(image) if opts.source == "dockerd" else ""
    dst = dirs["images"] / image_file_name(image, image_id)
    if dst.is_file():
        return dst
    uri = f"dockerd://{image}"
    if opts.source == "docker":
        uri = f"docker://{opts.registry}#{image}" if opts.registry else f"docker://{image}"
    fd = os.open(f"{dst}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + opts.import_timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SandboxError(
                        f"waited {opts.import_timeout:g} s for another import of {image} ({dst}.lock)"
                    ) from None
                time.sleep(0.2)
        if dst.is_file():  # another process imported it while we waited
            return dst
        tmp = dst.with_name(f".{dst.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp.sqsh")
        try:
            run_cli(
                [opts.binary, "import", "-o", str(tmp), uri], env, opts.import_timeout, f"enroot import {uri}"
            )
            if not tmp.is_file():
                raise SandboxError(f"enroot import {uri} exited 0 but wrote no file at {tmp}")
            os.chmod(tmp, 0o600)
            os.replace(tmp, dst)
        finally:
            tmp.unlink(missing_ok=True)
        return dst
    finally:
        os.close(fd)


ENV_LOADER = 'export LC_ALL=C; IFS= read -r -N "$1" e && eval "$e" && shift && cd / && exec "$@"'
"""Reads the environment block (``environment_block``) from stdin, then execs the server in /
(where Docker's exec of it starts)."""

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def environment_block(config: SandboxConfig) -> bytes:
    """Shell code that gives the command server exactly the environment of a Docker exec:
    nothing of enroot's (it clears the caller's, its login shell resets PATH), the image's
    ENV (enroot import writes it to /etc/environment), HOSTNAME, then ``config.env``, then
    Docker's defaults for PATH and HOME where still unset."""
    head = (
        'for v in $(compgen -e); do unset -v "$v" 2>/dev/null; done\n'
        # bash gives itself an unexported PATH (ending in `.`) when it starts without one
        "unset -v PATH HOME\n"
        "if [ -r /etc/environment ]; then\n"
        '  while IFS= read -r l || [ -n "$l" ]; do\n'
        '    case $l in [A-Za-z_]*=*) export "$l" ;; esac\n'
        "  done </etc/environment\n"
        "fi\n"
        "export HOSTNAME=sandbox SHLVL=0\n"
    )
    tail = f'[ -n "${{PATH+x}}" ] || export PATH={DEFAULT_PATH}\n[ -n "${{HOME+x}}" ] || export HOME=~\n'
    return head.encode() + encode_env(dict(config.env)) + tail.encode()


class _Pipes:
    """send/recv/set_timeout over the start process's stdin and stdout for ShellChannel.

    Both ways wait in select under the timeout: a blocking write to a server that stopped
    reading (a frozen or dead sandbox whose pipe another process holds) would never return."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.fd, self.wfd = rfd, wfd
        os.set_blocking(wfd, False)
        self.timeout: float | None = None

    def set_timeout(self, timeout: float | None) -> None:
        self.timeout = timeout

    def recv(self) -> bytes:
        ready, _, _ = select.select([self.fd], [], [], self.timeout)
        if not ready:
            raise TimeoutError(f"no output within {self.timeout} s")
        return os.read(self.fd, 1 << 20)

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while view:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            _, ready, _ = select.select([], [self.wfd], [], left)
            if not ready:
                raise TimeoutError(f"the sandbox read no input for {self.timeout} s")
            try:
                view = view[os.write(self.wfd, view) :]
            except BlockingIOError:
                continue


@dataclass
class _Container:
    """What must be undone for one sandbox; also run by the finalizer (no ref to the sandbox)."""

    name: str
    binary: str
    env: dict[str, str]
    timeout: float
    what: str = "enroot start"
    """How errors name the start process (``srun (job J)`` under Pyxis)."""
    grace: float = 0.5
    """Seconds close waits for the start process to end by itself before killing it: a jail ends
    in a few ms; srun only after Pyxis has removed the step's container."""
    created: bool = False
    """An ``enroot create`` container exists that close must remove."""
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    pid_path: Path | None = None
    limits: Limits = field(default_factory=Limits)
    bpf_path: Path | None = None
    etc_dir: Path | None = None
    syscall_filter: str = "none"
    """``docker-default`` (Docker's default seccomp profile) or ``none``."""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        # stdin first: srun dies of SIGPIPE if its stdout closes before it ends, cutting short
        # Pyxis's removal of the step's container.
        with contextlib.suppress(OSError):
            proc.stdin.close()
        if _poll(proc, self.grace) is None:  # the server was told to quit
            _killpg(proc)
            proc.wait()
        with contextlib.suppress(OSError):
            proc.stdout.close()

    def destroy(self) -> None:
        self.stop()
        self.limits.remove()
        if self.created:
            self.created = False
            try:
                run_cli([self.binary, "remove", "-f", self.name], self.env, self.timeout, "enroot remove")
            except SandboxError as e:
                if "No such file or directory" not in str(e):  # reaped already
                    log.warning("cannot remove enroot container %s (reap it later): %s", self.name, e)
        for path in (self.log_path, self.pid_path, self.bpf_path):
            if path:
                path.unlink(missing_ok=True)
        if self.etc_dir:
            shutil.rmtree(self.etc_dir, ignore_errors=True)

    def stderr_tail(self) -> str:
        try:
            return _tail(self.log_path.read_bytes()) if self.log_path else ""
        except OSError:
            return ""


class EnrootSandbox(ChannelSandbox):
    """A sandbox in an Enroot container on this node (or, with Pyxis, on an allocated node)."""

    backend = "enroot"

    def __init__(
        self, image: str, config: SandboxConfig | None = None, name: str | None = None, **options: Any
    ) -> None:
        super().__init__(image, config)
        self.options = EnrootOptions.from_kwargs(options)
        rid = safe_run_id(self.config.run_id)
        self.name = name or f"{NAME_PREFIX}{rid}-{os.getpid()}-{next(_counter)}"
        self._c: _Container | None = None

    @property
    def describe(self) -> str:
        return f"enroot sandbox {self.name} ({self.image})"

    @property
    def limits(self) -> dict[str, str]:
        """How each limit (memory, cpus, pids) is enforced: ``cgroup``, ``rlimit ...`` or ``none``."""
        return dict(self._c.limits.applied) if self._c else {}

    @property
    def syscall_filter(self) -> str:
        """``docker-default`` (Docker's default seccomp profile, under ``isolation: swerl``) or ``none``."""
        return self._c.syscall_filter if self._c else "none"

    @property
    def memory_usage(self) -> int | None:
        """Bytes charged to the sandbox's memory cgroup (None without one)."""
        return self._c.limits.memory_usage() if self._c else None

    # ------------------------------------------------------------- lifecycle
    def start(self) -> EnrootSandbox:
        self._refuse_if_closed()
        if self._c is not None:
            return self
        opts = self.options
        isolate_net = self._network_isolation()
        jail = self._jail()
        pyxis_limits = pyxis_limit_args(self.config) if opts.launcher == "pyxis" else None
        self._check_user(jail)
        dirs = opts.dirs()
        _KNOWN_OPTIONS[(opts.binary, str(opts.root_dir), opts.data_dir)] = opts
        env = opts.process_env(dirs)
        if jail:
            # No user namespace: the jail's own namespaces, bounded capabilities and syscall filter
            # isolate the sandbox as Docker's do, and setuid, su and chown are real (in a user
            # namespace enroot's filter fakes them: they succeed and change nothing).
            env["ENROOT_ALLOW_SUPERUSER"] = "y"
        if opts.launcher == "enroot" and shutil.which(opts.binary, path=env.get("PATH")) is None:
            # Checked here, not only when a command fails: a cached image needs no enroot call
            # before the start, and the start runs enroot under wrappers that hide a missing binary.
            raise binary_missing(opts.binary, f"to start {self.name}")
        sqsh = ensure_image(self.image, opts, dirs, env)
        c = self._c = _Container(self.name, opts.binary, env, opts.cli_timeout)
        self._own(c.destroy)
        try:
            if opts.launcher == "enroot":
                argv = self._enroot_argv(c, sqsh, dirs, jail, isolate_net)
                penv = env
            else:
                assert pyxis_limits is not None
                c.limits = Limits(applied=pyxis_limits[1])
                argv, penv = self._pyxis_argv(sqsh, pyxis_limits[0]), self._pyxis_env(env)
                c.what, c.grace = f"srun (job {os.environ['SLURM_JOB_ID']})", opts.cli_timeout
            self._launch(c, argv, penv, dirs)
        except BaseException:
            self.close()
            raise
        return self

    def _jail(self) -> bool:
        mode = self.options.isolation
        if self.options.launcher == "pyxis" or mode == "enroot":
            return False
        if os.geteuid() != 0:
            if mode == "swerl":
                raise ConfigError(
                    "isolation: swerl needs root (it creates pid, mount and network namespaces and a "
                    "cgroup around enroot); use isolation: enroot to accept Enroot's own isolation"
                )
            return False
        return True

    def _check_user(self, jail: bool) -> None:
        user = self.config.user or "root"
        if jail:
            if not re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*(:[A-Za-z0-9_.][A-Za-z0-9_.-]*)?", user):
                raise ConfigError(f"invalid user {user!r}: expected NAME, UID, NAME:GROUP or UID:GID")
            return
        if user not in ROOT_USERS:
            raise ConfigError(
                f"the enroot backend cannot run a sandbox as user {user!r} without swerl's isolation "
                "(isolation: swerl, as root): Enroot alone maps only one uid into a container (root, uid "
                "map `0 0 1`, or the calling user), so no other user exists there to switch to. Use user: "
                "root (capabilities are still bounded to cap_add)"
            )

    def _from_image(self) -> bool:
        mode = self.options.start_from
        if mode != "auto":
            return mode == "image"
        return bool(shutil.which("squashfuse")) and os.path.exists("/dev/fuse")

    def _network_isolation(self) -> bool:
        mode = self.options.network_isolation
        if self.config.network or mode == "none":
            return False
        if self.options.launcher == "pyxis":
            raise ConfigError(
                "Pyxis containers share the host network and swerl cannot isolate them: set "
                "backend.options.network_isolation: none to accept that, or use launcher: enroot as root"
            )
        if mode == "auto" and os.geteuid() != 0:
            raise ConfigError(
                "the enroot backend isolates the network with a network namespace, which needs root. "
                "Enroot itself shares the host network: set backend.options.network_isolation: none to "
                "accept that (sandboxes can then reach the network), or run as root"
            )
        return True

    def _inner(self) -> list[str]:
        """What enroot/srun runs in the container: privileges, then the environment, then the server."""
        n = len(environment_block(self.config))
        env_loader = ["bash", "-c", ENV_LOADER, "swerl-env", str(n)]
        return [
            *privilege_prefix(self.config, switch_user=self._jail()),
            *env_loader,
            *server_command(self.config),
        ]

    def _enroot_argv(
        self, c: _Container, sqsh: Path, dirs: dict[str, Path], jail: bool, isolate_net: bool
    ) -> list[str]:
        opts, cfg = self.options, self.config
        target = str(sqsh)
        if not self._from_image():
            run_cli(
                [opts.binary, "create", "-n", self.name, target], c.env, opts.cli_timeout, "enroot create"
            )
            c.created, target = True, self.name
        argv = [opts.binary, "start", "--rw"]
        if os.geteuid() != 0:
            argv.append("--root")  # the server may then bound its capabilities itself
        for m in opts.mounts:
            argv += ["-m", m]
        argv.append(target)
        if jail:
            prog = docker_default_bpf(tuple(cfg.cap_add))  # refuses (BackendUnavailable) without libseccomp
            c.limits = make_limits(self.name, cfg)
            c.pid_path = dirs["runtime"] / f"{self.name}.jail"
            c.bpf_path = dirs["runtime"] / f"{self.name}.bpf"
            c.bpf_path.write_bytes(prog)
            c.etc_dir = write_etc(dirs["runtime"] / f"{self.name}.etc", network=not isolate_net)
            c.syscall_filter = "docker-default"
            quiet = passwd_hooks(opts.binary, c.env)
            return jail_argv(
                self.name,
                argv,
                self._inner(),
                network=not isolate_net,
                lifetime=cfg.lifetime,
                limits=c.limits,
                bpf=c.bpf_path,
                etc=c.etc_dir,
                skip=quiet,
            )
        argv += self._inner()
        c.limits = make_limits(self.name, cfg)
        if isolate_net:
            argv = ["unshare", "--net", "--", "sh", "-c", _LO_UP, "swerl-netns", *argv]
        if cfg.lifetime:
            argv = ["timeout", "-s", "KILL", str(int(cfg.lifetime)), *argv]
        return limited_argv(argv, c.limits)

    def _pyxis_argv(self, sqsh: Path, limit_args: list[str]) -> list[str]:
        cfg, opts = self.config, self.options
        job = os.environ.get("SLURM_JOB_ID")
        if not job:
            raise SandboxError(
                "launcher: pyxis runs `srun --jobid=...` inside a Slurm allocation, but SLURM_JOB_ID is "
                "not set: run swerl inside salloc/sbatch"
            )
        image = opts.pyxis_image or str(sqsh)
        if "://" in image:
            log.warning(
                "pyxis_image %s makes Pyxis import the image on every srun (~25 s per sandbox); "
                "leave pyxis_image empty to use the shared .sqsh cache (cache_dir)",
                image,
            )
        # --unbuffered: without it srun holds back output that does not end in a newline,
        # and the command server's replies are length-framed, not lines.
        argv = ["srun", "--overlap", "--nodes=1", "--ntasks=1", f"--jobid={job}", "--unbuffered"]
        if cfg.lifetime:
            argv.append(f"--time={max(1, math.ceil(cfg.lifetime / 60))}")
        argv += [
            f"--container-image={image}",
            "--container-writable",
            "--no-container-mount-home",
            f"--container-workdir={cfg.workdir or '/'}",
        ]
        argv.append("--container-remap-root")
        argv += limit_args
        if opts.mounts:
            argv.append(f"--container-mounts={','.join(opts.mounts)}")
        # A pid namespace of the sandbox's own inside Pyxis's container (its user namespace has the
        # capabilities): host processes are invisible, and when the server exits the kernel kills
        # everything the sandbox started, even setsid/nohup ones.
        pidns = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--"]
        return [*argv, *opts.srun_args, *pidns, *self._inner()]

    def _pyxis_env(self, env: dict[str, str]) -> dict[str, str]:
        """What srun needs and nothing else: no SLURM_* of this job (--jobid names it), no ENROOT_*
        (Pyxis drops ENROOT_*_PATH; the node's enroot settings apply)."""
        keep = {k: v for k, v in env.items() if k in PASS_ENV}
        return keep | {k: os.environ[k] for k in ("SLURM_CONF",) if k in os.environ}

    def _launch(self, c: _Container, argv: list[str], env: dict[str, str], dirs: dict[str, Path]) -> None:
        c.log_path = dirs["logs"] / f"{self.name}.stderr"
        with open(os.open(c.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as err:
            try:
                c.proc = subprocess.Popen(
                    argv,
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    bufsize=0,
                    start_new_session=True,
                )
            except FileNotFoundError as e:
                raise BackendUnavailable(f"cannot run {argv[0]!r} to start {self.name}: not found") from e
        if c.pid_path:
            record = {"pid": c.proc.pid, "cgroups": [str(d) for d in c.limits.cgroups]}
            c.pid_path.write_text(json.dumps(record))
        assert c.proc.stdin is not None and c.proc.stdout is not None
        pipes = _Pipes(c.proc.stdout.fileno(), c.proc.stdin.fileno())
        self._channel = ShellChannel(
            send=pipes.send,
            recv=pipes.recv,
            set_timeout=pipes.set_timeout,
            describe=self.describe,
            probe=self._gone,
        )
        try:
            pipes.set_timeout(self.config.start_timeout)
            pipes.send(environment_block(self.config))
            self._channel.handshake(self.config.start_timeout)
        except (SandboxError, OSError) as e:
            rc = _poll(c.proc, 2.0)
            how = f"exited {rc}" if rc is not None else "is still running"
            raise SandboxError(f"{self.describe}: {e}; {c.what} {how}: {c.stderr_tail()}") from e

    def _live_channel(self) -> ShellChannel:
        channel = super()._live_channel()
        c = self._c
        if c is not None and c.proc is not None and c.proc.poll() is not None:
            # Whatever died first (enroot, srun, the jail, the lifetime timer): the sandbox is gone.
            raise SandboxError(f"{self.describe} is gone{self._state_hint()}")
        return channel

    def _gone(self) -> str | None:
        """Why the sandbox cannot answer any more: its start process ended (a process the
        sandbox left behind may still hold the pipe open)."""
        c = self._c
        rc = c.proc.poll() if c is not None and c.proc is not None else None
        return None if rc is None else f"{c.what} exited {rc} during the command"

    @property
    def alive(self) -> bool:
        c = self._c
        return super().alive and bool(c and c.proc and c.proc.poll() is None)

    def _interrupt(self, server_pid: int, ctl: str) -> None:
        """Through the host's view of the sandbox: Enroot has no exec into a running container,
        but its processes are this host's (unless Pyxis ran it on another node)."""
        if not write_beside(server_pid, ctl, b"K\n"):
            raise SandboxError(f"{self.describe}: its command server is not a process of this host")

    def _state_hint(self) -> str:
        c = self._c
        if not c or not c.proc:
            return ""
        rc = c.proc.poll()
        return f" ({c.what} exited {rc}: {c.stderr_tail()})" if rc is not None else ""


def write_beside(inner_pid: int, path: str, data: bytes) -> bool:
    """Write ``data`` into ``path`` as the process whose pid in its own pid namespace is
    ``inner_pid`` sees it (``/proc/PID/root``), for the one such process of this host that
    has ``path`` (a server's mktemp directory tells sandboxes apart). False if none has."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            nspid = next(ln for ln in (entry / "status").read_text().splitlines() if ln.startswith("NSpid:"))
            if int(nspid.split()[-1]) != inner_pid:
                continue
            target = entry / "root" / path.lstrip("/")
            if not target.exists():
                continue
            fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)  # a fifo with its reader: never blocks
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            return True
        except (OSError, StopIteration, ValueError):
            continue
    return False


def passwd_hooks(binary: str, env: dict[str, str]) -> list[str]:
    """Enroot's ``10-shadow.sh`` hooks (site and user config), which rewrite the image's
    /etc/passwd and /etc/group (mode 0600, entries dropped) for a user namespace's mapped user.
    Without a user namespace the jail mounts them non-executable, so Enroot skips them and the
    image's files stay as in Docker."""
    sysconf = env.get("ENROOT_SYSCONF_PATH", "")
    if not sysconf:
        path = shutil.which(binary, path=env.get("PATH"))
        try:
            text = Path(path).read_text(errors="replace") if path else ""
        except OSError:
            text = ""
        m = re.search(r'config::export ENROOT_SYSCONF_PATH\s+"([^"]+)"', text)
        sysconf = m.group(1) if m else "/etc/enroot"
    xdg = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME", "/root"), ".config")
    config = env.get("ENROOT_CONFIG_PATH") or os.path.join(xdg, "enroot")
    hooks = [os.path.join(d, "hooks.d", "10-shadow.sh") for d in (sysconf, config)]
    return [h for h in hooks if os.path.isfile(h)]


def slurm_enforcement() -> dict[str, bool]:
    """Whether this cluster's Slurm confines a step to its ``--mem`` and ``--cpus-per-task``
    (TaskPlugin task/cgroup with ConstrainRAMSpace / ConstrainCores), from ``scontrol show config``."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "config"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    conf = {}
    for line in out.splitlines():
        key, eq, value = line.partition("=")
        if eq:
            conf[key.strip()] = value.strip()
    cgroup = "task/cgroup" in conf.get("TaskPlugin", "")
    yes = lambda key: conf.get(key, "").lower() == "yes"  # noqa: E731
    return {"memory": cgroup and yes("ConstrainRAMSpace"), "cpus": cgroup and yes("ConstrainCores")}


def pyxis_limit_args(config: SandboxConfig) -> tuple[list[str], dict[str, str]]:
    """srun options for the sandbox's limits under Pyxis, and how each is enforced; a limit Slurm
    would not enforce is a ConfigError (never a sandbox that silently runs unlimited)."""
    memory = parse_bytes(config.memory) if config.memory else 0
    enforced = slurm_enforcement() if (memory or config.cpus) else {}
    args: list[str] = []
    applied: dict[str, str] = {}
    refused: list[str] = []
    if memory and enforced["memory"]:
        args.append(f"--mem={max(1, math.ceil(memory / 2**20))}M")
        applied["memory"] = "slurm --mem (task/cgroup)"
    elif memory:
        refused.append(
            "memory (srun --mem, enforced only with TaskPlugin=task/cgroup and ConstrainRAMSpace=yes)"
        )
    if config.cpus and enforced["cpus"]:
        args.append(f"--cpus-per-task={max(1, math.ceil(config.cpus))}")
        applied["cpus"] = "slurm --cpus-per-task, whole cpus (task/cgroup)"
    elif config.cpus:
        refused.append(
            "cpus (srun --cpus-per-task, enforced only with TaskPlugin=task/cgroup and ConstrainCores=yes)"
        )
    if config.pids_limit:
        refused.append("pids_limit (Slurm has no per-step process limit)")
    if refused:
        raise ConfigError(
            "launcher: pyxis cannot enforce "
            + "; ".join(refused)
            + " on this cluster. Set those limits to 0 "
            "in backend.sandbox to run without them (the Slurm job's own limits still apply), or use "
            "launcher: enroot as root (a cgroup per sandbox)"
        )
    for what in ("memory", "cpus", "pids"):
        applied.setdefault(what, "none (not asked)")
    return args, applied


def _poll(proc: subprocess.Popen, wait: float) -> int | None:
    try:
        return proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        return None


_KNOWN_OPTIONS: dict[tuple[str, str, str], EnrootOptions] = {}
"""Option sets this process used, so ``reap(run_id)`` also finds sandboxes in custom roots."""


def _reap_jails(runtime: Path, pattern: re.Pattern[str]) -> set[str]:
    """Kill running sandboxes of the pattern by their pid files; remove their cgroups."""
    killed = set()
    for path in runtime.glob(f"{NAME_PREFIX}*.jail"):
        name = path.name.removesuffix(".jail")
        if not pattern.fullmatch(name):
            continue
        try:
            record = json.loads(path.read_text())
            pid = int(record["pid"])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                mine = f"{JAIL_MARK}:{name}".encode() in f.read()
        except (OSError, ValueError, KeyError):
            mine, record = False, {"cgroups": []}
        if mine:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            killed.add(name)
        Limits(cgroups=[Path(d) for d in record.get("cgroups", [])]).remove()
        path.unlink(missing_ok=True)
    return killed


def reap(run_id: str | None = None, **options: Any) -> int:
    """End and remove swerl's enroot sandboxes: of one run, or all of them. Returns how many."""
    candidates = [EnrootOptions.from_kwargs(options)] if options else []
    candidates += [*_KNOWN_OPTIONS.values(), EnrootOptions()] if not options else []
    pattern = container_pattern(run_id)
    removed: set[str] = set()
    seen = set()
    for opts in candidates:
        key = (opts.binary, str(opts.root_dir), opts.data_dir)
        if key in seen:
            continue
        seen.add(key)
        if not (opts.data_dir or opts.root_dir.exists()):
            continue  # never used: nothing to reap, and no directories to create
        try:
            dirs = opts.dirs()
            env = opts.process_env(dirs)
            removed |= _reap_jails(dirs["runtime"], pattern)
            removed |= _remove_listed(opts, env, pattern)
        except SandboxError:
            if len(candidates) == 1:
                raise
            continue
        # The node's default data dir, where Pyxis keeps named containers (it may not exist).
        node_env = {k: v for k, v in env.items() if k not in _SWERL_PATHS}
        with contextlib.suppress(SandboxError):
            removed |= _remove_listed(opts, node_env, pattern)
    return len(removed)


_SWERL_PATHS = ("ENROOT_DATA_PATH", "ENROOT_CACHE_PATH", "ENROOT_RUNTIME_PATH")


def _remove_listed(opts: EnrootOptions, env: dict[str, str], pattern: re.Pattern[str]) -> set[str]:
    listing = run_cli([opts.binary, "list"], env, opts.cli_timeout, "enroot list")
    names = [n for n in listing.split() if pattern.fullmatch(n)]
    if names:
        run_cli([opts.binary, "remove", "-f", *names], env, opts.cli_timeout, "enroot remove")
    return {n.removeprefix("pyxis_") for n in names}
