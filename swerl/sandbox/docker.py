"""Docker backend: one container per sandbox, one attach socket to its command server.

Uses the docker SDK (no ``docker`` CLI, no ``docker exec`` at all). The
container's PID 1 is a tiny bash init that reaps orphans and runs the command
server on the container's own stdin and stdout (``shell.ATTACHED_INIT``); the
client attaches before the start. An exec per sandbox would cost ~30 ms of CPU
(a runc exec) on top of the container's own ~160 ms, twice per episode (agent
and grading sandbox). The init exits when the sandbox's lifetime is over, or
when the client went away, so a sandbox left behind by a dead process stops on
its own even before the reaper removes it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shlex
import socket as pysocket
import struct
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker
import docker.errors
import requests

from swerl.errors import BackendUnavailable, ImageMissing, InfraError, SandboxClosed, SandboxError
from swerl.sandbox.base import (
    HOST_LABEL,
    OWNER_LABEL,
    PID_LABEL,
    RUN_LABEL,
    ChannelSandbox,
    ExecResult,
    SandboxConfig,
    of_run,
)
from swerl.sandbox.gate import raise_fd_limit, start_slot
from swerl.sandbox.shell import ATTACHED_INIT, SERVER_DIED, ShellChannel, server_command

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 10
"""Seconds an inspect may take when a command's channel is silent or broken."""


def _where() -> str:
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def connect(timeout: float = 120.0, pool_size: int = 10) -> docker.DockerClient:
    """A docker client, or BackendUnavailable saying how to fix it."""
    where = _where()
    try:
        client = docker.from_env(version="auto", timeout=int(timeout), max_pool_size=pool_size)
        if where.startswith("unix://"):
            # No proxy applies to a local socket, and requests' look-up of proxy variables
            # walked the whole environment on every call (a fifth of a call's client CPU).
            client.api.trust_env = False
        client.ping()
    except docker.errors.DockerException as e:
        raise BackendUnavailable(
            f"cannot reach the Docker daemon at {where}: {e}. "
            "Is dockerd running? Start it (`dockerd &` as root, or `systemctl start docker`) "
            "or set DOCKER_HOST."
        ) from e
    return client


@functools.lru_cache(maxsize=8)
def _shared(where: str, pid: int) -> docker.DockerClient:
    raise_fd_limit()
    return connect(pool_size=64)


def shared_client() -> docker.DockerClient:
    """The one client of this process for the current daemon: every sandbox shares its
    connection pool (one client per sandbox cost an idle connection and a ping each)."""
    return _shared(_where(), os.getpid())


DAEMON_UNREACHABLE = (requests.exceptions.ConnectionError, docker.errors.DockerException, ConnectionError)


@contextlib.contextmanager
def daemon_call(what: str) -> Iterator[None]:
    """Turn the daemon going away mid-call into an infra error (the SDK raises requests' errors)."""
    try:
        yield
    except docker.errors.APIError:
        raise
    except DAEMON_UNREACHABLE as e:
        raise BackendUnavailable(f"the Docker daemon went away while trying to {what}: {e}") from e


def require_image(client: docker.DockerClient, image: str) -> None:
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound as e:
        raise ImageMissing(
            f"image {image!r} is not present in the local Docker daemon and no registry is used. "
            "Build it: `swerl images build-base` for the base image, "
            "`swerl tasks build-images SUITE` for task images."
        ) from e
    except docker.errors.APIError as e:
        raise SandboxError(f"cannot inspect image {image!r}: {e}") from e


_STORAGE_PROBES: dict[str, str] = {}


def storage_limit_refusal(image: str, client: docker.DockerClient | None = None) -> str:
    """'' when this daemon can limit a container's writable layer (``--storage-opt size``), else why not.

    Only some storage drivers can (overlay2 on xfs mounted with pquota, btrfs, zfs, devicemapper),
    and ``docker info`` does not say whether the quota is on: create (never start) a container of
    ``image`` with a limit and read the daemon's answer. Once per daemon and process."""
    where = _where()
    if where not in _STORAGE_PROBES:
        client = client or shared_client()
        try:
            with daemon_call("probe --storage-opt"):
                c = client.api.create_container(
                    image, command=["true"], entrypoint=[], labels={OWNER_LABEL: "swerl", "swerl.probe": "storage"},
                    host_config=client.api.create_host_config(storage_opt={"size": "64M"}, network_mode="none"),
                )  # fmt: skip
            _remove_container(client, c["Id"])
            _STORAGE_PROBES[where] = ""
        except docker.errors.ImageNotFound:
            require_image(client, image)
            raise
        except docker.errors.APIError as e:
            driver = client.info().get("Driver", "?")
            _STORAGE_PROBES[where] = (
                f"the Docker daemon's storage driver ({driver}) cannot limit it: {e.explanation or e}"
            )
    return _STORAGE_PROBES[where]


class _FrameReader:
    """Demultiplexes docker's attach stream (8-byte frame headers, tty off)."""

    def __init__(self, sock: pysocket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.stderr = bytearray()

    def recv(self) -> bytes:
        while True:
            if len(self.buf) >= 8:
                kind, size = struct.unpack(">BxxxL", self.buf[:8])
                if len(self.buf) >= 8 + size:
                    payload = bytes(self.buf[8 : 8 + size])
                    del self.buf[: 8 + size]
                    if kind == 2:
                        self.stderr += payload
                        del self.stderr[:-65536]
                        continue
                    return payload
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError as e:
                raise TimeoutError(str(e)) from e
            if not chunk:
                return b""
            self.buf += chunk


def _remove_container(client: docker.DockerClient, container_id: str) -> None:
    """Remove a container; if the daemon is unreachable, leave it to the reaper (it is labelled)."""
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as e:
        if "already in progress" not in str(e):
            raise
    except (docker.errors.DockerException, OSError, requests.exceptions.ConnectionError) as e:
        log.warning("cannot remove container %s now (%s); `swerl reap` will", container_id[:12], e)


class DockerSandbox(ChannelSandbox):
    """A sandbox in a local (or DOCKER_HOST) Docker container."""

    backend = "docker"

    def __init__(
        self,
        image: str,
        config: SandboxConfig | None = None,
        client: docker.DockerClient | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(image, config)
        self.name = name
        self._client = client
        self.container_id: str | None = None
        self._sock: Any = None
        self._restarts = 0

    @property
    def describe(self) -> str:
        return f"docker sandbox {self.short_id} ({self.image})"

    @property
    def short_id(self) -> str:
        return (self.container_id or "unstarted")[:12]

    # ------------------------------------------------------------- lifecycle
    def start(self) -> DockerSandbox:
        self._refuse_if_closed()
        if self.container_id:
            return self
        client = self._client = self._client or shared_client()
        cfg = self.config
        with start_slot(cfg.start_gate, cfg.start_gate_scope or f"docker {_where()}", cfg.start_timeout):
            self._create(client)
            try:
                self._launch()
                return self
            except docker.errors.APIError as e:
                self.close()
                raise SandboxError(f"cannot start container {self.short_id}: {e}") from e
            except BaseException:
                self.close()
                raise

    def _create(self, client: docker.DockerClient) -> None:
        """Create the container (low-level API: the high-level one inspects it again after)."""
        cfg = self.config
        api = client.api
        host_config = api.create_host_config(
            network_mode="bridge" if cfg.network else "none",
            mem_limit=cfg.memory,
            memswap_limit=cfg.memory,
            nano_cpus=int(cfg.cpus * 1e9),
            pids_limit=cfg.pids_limit,
            cap_drop=["ALL"],
            cap_add=list(cfg.cap_add),
            security_opt=["no-new-privileges"],
            privileged=False,
            # The channel is the container's stdout: a log driver would write every reply to disk.
            log_config=docker.types.LogConfig(type="none"),
            storage_opt={"size": f"{cfg.storage_mb}M"} if cfg.storage_mb else None,
        )
        lifetime = str(int(cfg.lifetime))
        try:
            with daemon_call(f"create a container of {self.image}"):
                created = api.create_container(
                    self.image,
                    command=["bash", "-c", ATTACHED_INIT, "swerl-init", lifetime, *server_command(cfg)],
                    entrypoint=[],
                    # Not detached, so StdinOnce: stdin closes with the client, the server reads
                    # end of file, and the sandbox stops.
                    stdin_open=True,
                    name=self.name,
                    labels=cfg.all_labels(),
                    environment=dict(cfg.env),
                    working_dir=cfg.workdir,
                    user=cfg.user,
                    hostname="sandbox",
                    host_config=host_config,
                )
        except docker.errors.ImageNotFound as e:
            with daemon_call(f"check image {self.image}"):
                require_image(client, self.image)  # raises ImageMissing saying how to build it
            raise ImageMissing(f"image {self.image!r} vanished: {e}") from e
        except docker.errors.APIError as e:
            raise SandboxError(f"cannot create a container of {self.image!r}: {e}") from e
        self.container_id = created["Id"]
        self._own(_remove_container, client, self.container_id)

    def _launch(self) -> None:
        """Attach to the container's stdin and stdout, start it, and hand its server the script.

        Attached first, so nothing the server prints is missed; also how a container whose
        server died is brought back (its files kept)."""
        api = self._client.api
        self._close_transport()
        with daemon_call(f"start container {self.short_id}"):
            self._sock = api.attach_socket(
                self.container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            api.start(self.container_id)
        raw = getattr(self._sock, "_sock", self._sock)
        if raw.family in (pysocket.AF_INET, pysocket.AF_INET6):  # DOCKER_HOST=tcp://: no Nagle delay
            raw.setsockopt(pysocket.IPPROTO_TCP, pysocket.TCP_NODELAY, 1)
        reader = _FrameReader(raw)
        self._channel = ShellChannel(
            send=raw.sendall,
            recv=reader.recv,
            set_timeout=raw.settimeout,
            describe=self.describe,
            probe=self._gone,
        )
        self._channel.handshake(self.config.start_timeout)

    def _interrupt(self, server_pid: int, ctl: str) -> None:
        """A ``docker exec`` beside the attached channel, as the sandbox's user."""
        script = f"printf 'K\\n' >{shlex.quote(ctl)}"
        api = self._client.api
        try:
            with daemon_call(f"exec in container {self.short_id}"):
                exe = api.exec_create(self.container_id, ["sh", "-c", script], user=self.config.user or "")
                out = api.exec_start(exe["Id"])
                rc = api.exec_inspect(exe["Id"]).get("ExitCode")
        except docker.errors.APIError as e:
            raise SandboxError(f"{self.describe}: cannot exec beside the channel: {e}") from e
        if rc:
            raise SandboxError(
                f"{self.describe}: {script!r} exited {rc}: {out.decode(errors='replace')[-300:]}"
            )

    def _close_transport(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def commit(self, repository: str = "swerl-snapshot") -> str:
        """Commit the whole container to an image (the opt-in full snapshot); returns its name."""
        if not self.container_id:
            raise SandboxClosed("cannot commit a sandbox that is not started")
        tag = self.short_id
        try:
            self._client.api.commit(self.container_id, repository=repository, tag=tag, pause=True)
        except DAEMON_UNREACHABLE as e:
            raise SandboxError(f"docker commit of {self.short_id} failed: {e}") from e
        return f"{repository}:{tag}"

    # -------------------------------------------------------------- failures
    def _state(self) -> dict[str, Any] | None:
        """The container's State, or None when it no longer exists; asked with a short
        timeout, so a daemon stuck on the container (a removal under load holds its lock)
        cannot hold up a failing command for the client's full two minutes."""
        api = self._client.api
        try:
            # docker-py's inspect_container has no per-call timeout; its _get takes one.
            got = api._get(api._url("/containers/{0}/json", self.container_id), timeout=PROBE_TIMEOUT)
            return api._result(got, True)["State"]
        except docker.errors.NotFound:
            return None
        except requests.exceptions.Timeout as e:
            raise BackendUnavailable(
                f"the Docker daemon did not answer an inspect of {self.short_id} in {PROBE_TIMEOUT} s"
            ) from e

    def _gone(self) -> str | None:
        """Why the container cannot answer any more (removed, exited), or None while it can
        or the daemon cannot tell in time (the command's own deadline still applies)."""
        try:
            state = self._state()
        except (InfraError, docker.errors.DockerException, requests.exceptions.RequestException, OSError):
            return None
        if state is None:
            return "the container was removed during the command"
        if state.get("Running") and state.get("Status") not in ("removing", "dead"):
            return None
        return "the container stopped during the command"

    def _recover(self, started: float) -> ExecResult | None:
        if not self._restart_after_server_death():
            return None
        # The agent's own command exhausted processes or memory and took the server
        # with it: its doing, so a result (files kept), not an infra error.
        msg = (
            "[swerl: the sandbox's command server died during this command (out of processes "
            "or memory?); the sandbox was restarted: files are kept, running processes are gone]\n"
        )
        return ExecResult(msg.encode(), 137, time.monotonic() - started, killed_by_restart=True)

    def _restart_after_server_death(self) -> bool:
        """If the server died of the agent's doing, start the container again (at most 3 times).

        The init ends the container with :data:`SERVER_DIED` when its server died (killed by
        a command, or out of memory or processes); a container killed from outside, or whose
        init or lifetime ended, exits otherwise and stays an infra error."""
        if self._closed or self._restarts >= 3:
            return False
        try:
            deadline = time.monotonic() + 5.0
            while True:  # the stream ends as the container exits: let it finish exiting
                with daemon_call("inspect a container"):
                    state = self._state()
                if state is None:
                    return False
                if not state["Running"] or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            if state["Running"] or state.get("ExitCode") != SERVER_DIED:
                return False
            log.warning("command server of %s died; starting the container again", self.short_id)
            self._restarts += 1
            self._launch()
        except (InfraError, docker.errors.DockerException):
            return False
        return True

    def _state_hint(self) -> str:
        try:
            state = self._state()
        except Exception:
            return ""
        if state is None:
            return " (the container no longer exists)"
        return self._describe_state(state)

    @staticmethod
    def _describe_state(state: dict[str, Any]) -> str:
        bits = [f"status={state.get('Status')}"]
        if state.get("OOMKilled"):
            bits.append("OOMKilled")
        if state.get("ExitCode"):
            bits.append(f"exit={state.get('ExitCode')}")
        return f" (container {', '.join(bits)})"


def reap(
    run_id: str | None = None,
    client: docker.DockerClient | None = None,
    orphans_only: bool = False,
    workers: int = 8,
) -> int:
    """Remove swerl containers: of one run, or all of them, or those whose creator died.

    Returns how many were removed.
    """
    client = client or connect()
    doomed = [c["Id"] for c in reapable(run_id, client, orphans_only)]
    # A few removals at once: one at a time, a thousand sandboxes take minutes to reap.
    with ThreadPoolExecutor(
        max_workers=max(1, min(workers, len(doomed))), thread_name_prefix="swerl-reap"
    ) as ex:
        list(ex.map(functools.partial(_remove_container, client), doomed))
    return len(doomed)


def reapable(
    run_id: str | None = None, client: docker.DockerClient | None = None, orphans_only: bool = False
) -> list[dict[str, Any]]:
    """The containers ``reap`` would remove (the daemon's listing: Id, Names, Labels, ...).

    A run's sandboxes are those labelled ``run_id`` or ``run_id-...`` (see ``of_run``).
    """
    client = client or connect()
    with daemon_call("list containers to reap"):
        found = client.api.containers(all=True, filters={"label": [f"{OWNER_LABEL}=swerl"]})
    if run_id:
        found = [c for c in found if of_run((c.get("Labels") or {}).get(RUN_LABEL, ""), run_id)]
    return [c for c in found if not orphans_only or _creator_dead(c.get("Labels") or {})]


def _creator_dead(labels: dict[str, str]) -> bool:
    if labels.get(HOST_LABEL) != pysocket.gethostname():
        return False  # cannot tell for another host's containers
    try:
        os.kill(int(labels.get(PID_LABEL, "0")), 0)
    except (ProcessLookupError, ValueError):
        return True
    except PermissionError:
        return False
    return False
