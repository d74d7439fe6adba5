"""A real multi-node Ray cluster on one machine: ``ray start --head`` plus worker raylets.

Each node is its own ``ray start --block`` process with its own port block
(``swerl.cluster.slurm.ray_port_options``), temp dir and a custom resource named
after the node, so placement is observable and nothing clashes with another Ray
on the same machine. Nodes are ended by pid, never with ``ray stop`` (which ends
every Ray of the user on the machine). For tests, benchmarks and trying the
cluster path on a laptop:

    with LocalRayCluster(port=26379, dashboard_port=26265) as cluster:
        cluster.add_node("worker")
        os.environ["RAY_ADDRESS"] = cluster.address   # then ray.address=auto
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from swerl.cluster.slurm import PORT_BLOCK, ray_binary, ray_port_options
from swerl.errors import ConfigError, InfraError

HEAD = "head"
STARTED = "Ray runtime started."


@dataclass
class RayNode:
    """One ``ray start --block`` process and what it was started with."""

    name: str
    index: int
    process: subprocess.Popen
    log: Path

    def processes(self) -> list[int]:
        """Pids of this node's Ray processes (the raylet, GCS, agents...), from /proc."""
        return _descendants(self.process.pid)

    def raylet_pid(self) -> int:
        for pid in self.processes():
            if _comm(pid) == "raylet":
                return pid
        raise InfraError(f"node {self.name} has no raylet running (log {self.log})")


@dataclass
class LocalRayCluster:
    """A head node at ``port`` (dashboard at ``dashboard_port``), then ``add_node`` for workers."""

    port: int
    dashboard_port: int
    temp_dir: str = "/tmp/swerl-ray-local-{port}"
    """Short: Unix socket paths under it must fit in 107 bytes."""
    num_cpus: int = 2
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment of every node (and so of every worker process), e.g. PYTHONPATH."""
    join_timeout: float = 120.0
    detach: bool = False
    """Start the nodes in their own session, to outlive this process (``swerl cluster ray up``)."""
    nodes: dict[str, RayNode] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        """Every node's temp dir is under it: so a pid is ours only if its command line names it."""
        return Path(self.temp_dir.format(port=self.port))

    @property
    def address(self) -> str:
        """The GCS address: what RAY_ADDRESS, ``ray.init(address=...)`` and joining nodes use."""
        return f"127.0.0.1:{self.port}"

    @property
    def dashboard_url(self) -> str:
        """The dashboard's HTTP address: what ``ray job submit --address`` takes."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    def node_env(self) -> dict[str, str]:
        """The environment of the nodes; clients need the same RAY_AUTH_MODE (token auth)."""
        return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0", **self.env}

    def start(self) -> LocalRayCluster:
        if HEAD in self.nodes:
            return self
        ensure_auth_token()
        head = ["--head", f"--port={self.port}", "--include-dashboard=true", "--dashboard-host=127.0.0.1"]
        self._start_node(HEAD, [*head, f"--dashboard-port={self.dashboard_port}"])
        return self

    def add_node(self, name: str, num_cpus: int | None = None) -> RayNode:
        """Start a worker raylet that joins the head, with a custom resource ``name``."""
        if name in self.nodes:
            raise ConfigError(f"a node named {name} is already running")
        return self._start_node(name, [f"--address={self.address}"], num_cpus)

    def _start_node(self, name: str, role: list[str], num_cpus: int | None = None) -> RayNode:
        index = max((n.index for n in self.nodes.values()), default=-1) + 1
        temp = self.root / name
        temp.mkdir(parents=True, exist_ok=True)
        base = self.port + index * PORT_BLOCK
        argv = [
            ray_binary(),
            "start",
            "--block",
            "--disable-usage-stats",
            *role,
            f"--node-name={name}",
            f"--num-cpus={num_cpus or self.num_cpus}",
            f'--resources={{"{name}": 1}}',
            f"--temp-dir={temp}",
            *ray_port_options(base),
        ]
        log = temp / "ray-start.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                env=self.node_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=self.detach,
            )
        node = self.nodes[name] = RayNode(name, index, proc, log)
        try:
            self.wait_alive(name)
        except BaseException:
            self.stop_node(name)
            raise
        return node

    def wait_alive(self, name: str) -> None:
        """Until the node's ``ray start`` says the runtime started (it has registered with the GCS)."""
        deadline = time.monotonic() + self.join_timeout
        node = self.nodes[name]
        while STARTED not in node.log.read_text(errors="replace"):
            if node.process.poll() is not None:
                raise InfraError(f"Ray node {name} exited: {node.log.read_text(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                raise InfraError(f"Ray node {name} did not start within {self.join_timeout:g} s ({node.log})")
            time.sleep(0.2)

    def kill_raylet(self, name: str) -> int:
        """SIGKILL the node's raylet (its workers and its ``ray start`` follow); returns the pid."""
        pid = self.nodes[name].raylet_pid()
        os.kill(pid, signal.SIGKILL)
        return pid

    def freeze_raylet(self, name: str) -> int:
        """SIGSTOP the node's raylet, as a hung machine: the GCS counts it alive (and places work on
        it) until its health checks time out. ``kill_raylet`` still ends it. Returns the pid."""
        pid = self.nodes[name].raylet_pid()
        os.kill(pid, signal.SIGSTOP)
        return pid

    def stop_node(self, name: str, timeout: float = 20.0) -> None:
        """End one node's processes by pid: SIGTERM its ``ray start``, then SIGKILL what is left."""
        node = self.nodes.pop(name, None)
        if node is None:
            return
        pids = node.processes()
        if node.process.poll() is None:
            node.process.terminate()
            try:
                node.process.wait(timeout)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait()
        for pid in pids:
            if str(self.root) in _cmdline(pid):  # still ours (not a pid reused since)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def stop(self) -> None:
        """Workers first, then the head. Idempotent."""
        for name in sorted(self.nodes, key=lambda n: n == HEAD):
            self.stop_node(name)

    def __enter__(self) -> LocalRayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


STATE = "swerl-cluster.json"
"""What ``up`` started, in the cluster's temp root: so ``down`` ends exactly that, by pid."""


def up(port: int, dashboard_port: int, workers: int = 1, num_cpus: int = 2) -> LocalRayCluster:
    """Start a head and ``workers`` worker nodes that outlive this process; record their pids."""
    cluster = LocalRayCluster(port=port, dashboard_port=dashboard_port, num_cpus=num_cpus, detach=True)
    state = cluster.root / STATE
    if state.exists() and any(_alive_in(pid, cluster.root) for pid in _state_pids(state)):
        raise ConfigError(
            f"a cluster started by swerl already runs on port {port}: `swerl cluster ray down --port {port}`"
        )
    try:
        cluster.start()
        for i in range(1, workers + 1):
            cluster.add_node(f"worker{i}")
    except BaseException:
        cluster.stop()
        raise
    pids = {name: node.process.pid for name, node in cluster.nodes.items()}
    state.write_text(json.dumps({"port": port, "dashboard_port": dashboard_port, "nodes": pids}))
    return cluster


def down(port: int, timeout: float = 30.0) -> int:
    """End the nodes ``up`` started on ``port``, and every process under their temp root; how many.

    Scoped by pid and by the cluster's own temp dir in each command line, so no other Ray on
    the machine is touched (``ray stop`` would end them all).
    """
    root = Path(LocalRayCluster.temp_dir.format(port=port))
    state = root / STATE
    if not state.exists():
        raise ConfigError(
            f"no cluster started by `swerl cluster ray up --port {port}` ({state} does not exist)"
        )
    starters = [pid for pid in _state_pids(state) if _alive_in(pid, root)]
    for pid in starters:  # `ray start --block` ends its node's processes on SIGTERM
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(_alive_in(pid, root) for pid in starters) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _pids_under(root)
    for pid in left:
        _signal(pid, signal.SIGKILL)
    state.unlink()
    return len(starters) + len(left)


def _state_pids(state: Path) -> list[int]:
    try:
        return [int(pid) for pid in json.loads(state.read_text())["nodes"].values()]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _alive_in(pid: int, root: Path) -> bool:
    """``pid`` runs, and is still one of this cluster's processes (not a pid reused since)."""
    return f"{root}/" in _cmdline(pid) and _comm(pid) != "" and not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _pids_under(root: Path) -> list[int]:
    """Every live process whose command line names a path under ``root``."""
    own = os.getpid()
    return [
        int(d.name)
        for d in Path("/proc").iterdir()
        if d.name.isdigit() and int(d.name) != own and _alive_in(int(d.name), root)
    ]


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def ensure_auth_token() -> None:
    """Ray's token auth needs a token every node and client shares; make one if there is none."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    if path.exists() and path.stat().st_size:
        return
    subprocess.run([ray_binary(), "get-auth-token", "--generate"], check=True, capture_output=True)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first), from /proc/PID/task/*/children."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
