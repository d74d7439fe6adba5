"""Set up a fresh Debian machine and run swerl: the README's two commands.

    python3 -m swerl.bootstrap run    # install everything, build images, run a real rollout
    python3 -m swerl.bootstrap test   # install test needs (Slurm too), then lint and pytest

Standard library only: it runs before swerl's dependencies are installed. Every
step is idempotent and skips work already done, so a rerun is fast.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_PACKAGES = ["docker.io", "debootstrap"]
TEST_PACKAGES = [*RUN_PACKAGES, "slurm-wlm", "munge", "bubblewrap", "squashfuse", "iproute2", "libseccomp2"]
"""squashfuse: the enroot backend starts sandboxes from the .sqsh where it exists (as Enroot does)."""
SLURM_CONF = Path("/etc/slurm/slurm.conf")


def say(msg: str) -> None:
    print(f"[swerl] {msg}", flush=True)


def sh(*cmd: str, check: bool = True, quiet: bool = False, **kw: object) -> subprocess.CompletedProcess:
    if not quiet:
        say("$ " + " ".join(cmd))
    return subprocess.run(cmd, check=check, **kw)  # type: ignore[call-overload]


def ok(*cmd: str) -> bool:
    return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def apt_install(packages: list[str]) -> None:
    """Install missing Debian packages in one apt run (apt runs must not overlap)."""
    missing = [p for p in packages if not _installed(p)]
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit(f"[swerl] need root to install {missing}: rerun as root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    sh("apt-get", "update", "-qq", env=env)
    sh("apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing, env=env)


def _installed(package: str) -> bool:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return out.stdout.strip() == "install ok installed"


class BootstrapError(RuntimeError):
    """A setup step failed; the message says which and where its log is."""


def start_dockerd(timeout: float = 90.0) -> None:
    """Start dockerd detached (double fork) unless one answers, and wait until it does.

    Detached, because a daemon that is our child becomes our zombie when it stops:
    a long-lived caller that never waits on it (this bootstrap while pytest runs)
    would hold a dead pid that looks alive to anyone watching /proc.
    """
    if ok("docker", "info"):
        return
    say("starting dockerd")
    with open("/var/log/swerl-dockerd.log", "ab") as log:
        subprocess.run(
            ["setsid", "-f", "dockerd"], stdin=subprocess.DEVNULL, stdout=log, stderr=log, check=True
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok("docker", "info"):
            return
        time.sleep(0.5)
    raise BootstrapError("dockerd did not come up; see /var/log/swerl-dockerd.log")


def is_checkout(root: Path = ROOT) -> bool:
    """Whether swerl runs from a source checkout (``pyproject.toml`` beside it), not site-packages."""
    return (root / "pyproject.toml").is_file() and (root / "configs").is_dir()


def pip_install(extras: str) -> None:
    """Install the checkout (editable); an installed swerl (``pip install .``) is used as it is."""
    if not is_checkout():
        say(f"using the installed swerl at {ROOT / 'swerl'} (not a checkout: nothing to pip install)")
        put_scripts_on_path()
        return
    spec = f"{ROOT}[{extras}]" if extras else str(ROOT)
    sh(sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-e", spec)
    put_scripts_on_path()


def put_scripts_on_path() -> None:
    """Make the just-installed ``swerl`` script callable: pyenv only sees it after ``pyenv rehash``.

    Elsewhere, say where it is when that directory is not on PATH (a ``--user`` or venv install).
    """
    if shutil.which("pyenv"):  # harmless when this Python is not pyenv's
        sh("pyenv", "rehash", check=False)
    scripts = Path(sysconfig.get_path("scripts"))
    if shutil.which("swerl") is None:
        say(f"the swerl script is in {scripts}, which is not on PATH: add it, or run `python3 -m swerl.cli`")


# verl declares transformers<5.11, which the train extra's transformers pin rules out, so it
# comes without its dependencies, with what its agent-loop module imports (README, "verl").
VERL_NO_DEPS = ["verl==0.9.1", "tensordict==0.10.0", "pyvers==0.1.0"]
VERL_IMPORTS = ["hydra-core==1.3.2", "codetiming", "cachetools"]


def pip_install_verl() -> None:
    pip = (sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check")
    sh(*pip, *VERL_IMPORTS)
    sh(*pip, "--no-deps", *VERL_NO_DEPS)


# SkyRL's trainer package pins transformers<=5.8 (the train extra pins 5.17), so it gets a venv
# of its own that sees this Python's packages; tests/test_skyrl.py checks SkyRL's config path in it.
SKYRL_VENV = Path.home() / ".cache" / "swerl" / "skyrl-venv"
SKYRL_PACKAGES = ["skyrl==0.3.0", "loguru==0.7.3"]


def make_skyrl_venv() -> None:
    python = SKYRL_VENV / "bin" / "python"
    if not python.exists():
        sh(sys.executable, "-m", "venv", "--system-site-packages", str(SKYRL_VENV))
    sh(str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *SKYRL_PACKAGES)


SLURM_NODES = 2
"""Slurm node names on this one machine (``slurmd -N NAME``, each on its own port), so an
allocation spans two nodes for real: the first is the hostname, then ``HOST-2``, ..."""
SLURMD_PORT = 6818


def slurm_node_names(host: str) -> list[str]:
    return [host, *(f"{host}-{i}" for i in range(2, SLURM_NODES + 1))]


def slurm_conf(host: str, cpus: int, mem_mb: int) -> str:
    """slurm.conf for SLURM_NODES node names on this host (%n: each slurmd's own files).

    CPUs are what jobs share a node by (CR_Core): nothing enforces memory here, and with
    memory consumable a job without ``--mem`` would hold a whole node's memory.
    """
    nodes = slurm_node_names(host)
    lines = [
        f"NodeName={name} NodeHostname={host} NodeAddr={host} Port={SLURMD_PORT + i} "
        f"CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN"
        for i, name in enumerate(nodes)
    ]
    return f"""ClusterName=swerl
SlurmctldHost={host}
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldLogFile=/var/log/slurmctld.log
SlurmdLogFile=/var/log/slurmd-%n.log
{chr(10).join(lines)}
PartitionName=main Nodes={",".join(nodes)} Default=YES MaxTime=INFINITE State=UP
"""


def _daemon_alive(pidfile: str, name: str) -> bool:
    try:
        pid = int(Path(pidfile).read_text().split()[0])
        return Path(f"/proc/{pid}/comm").read_text().strip() == name
    except (OSError, ValueError, IndexError):
        return False


def _stop_daemons(name: str, timeout: float = 30.0) -> None:
    """End every ``name`` process (by pid) so a new slurm.conf takes effect."""
    out = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout.split()
    for pid in out:
        ok("kill", pid)
    deadline = time.monotonic() + timeout
    while ok("pgrep", "-x", name) and time.monotonic() < deadline:
        time.sleep(0.2)


def start_slurm() -> None:
    """A real Slurm cluster of SLURM_NODES nodes on this machine (munge auth) for the Slurm tests.

    Rewrites slurm.conf and restarts the daemons only when the config changed; starts any
    daemon that is missing (another user of the machine may restart slurmd for a plugin).
    """
    host = socket.gethostname()
    mem_mb = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.9)
    conf = slurm_conf(host, os.cpu_count() or 1, mem_mb)
    nodes = slurm_node_names(host)
    changed = not SLURM_CONF.exists() or SLURM_CONF.read_text() != conf
    alive = all(_daemon_alive(f"/run/slurmd-{n}.pid", "slurmd") for n in nodes)
    if not changed and alive and ok("scontrol", "ping") and _slurm_ready(nodes, wait=0):
        return
    dirs = [("/run/munge", "munge"), ("/var/spool/slurmctld", "root"), ("/var/spool/slurmd", "root")]
    for d, owner in [*dirs, *((f"/var/spool/slurmd/{n}", "root") for n in nodes)]:
        Path(d).mkdir(parents=True, exist_ok=True, mode=0o755)
        shutil.chown(d, owner, owner)
    if changed:
        SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
        say(f"writing {SLURM_CONF} ({len(nodes)} nodes) and restarting slurmctld/slurmd")
        for daemon in ("slurmd", "slurmctld"):
            _stop_daemons(daemon)
        SLURM_CONF.write_text(conf)
    if not ok("pgrep", "-x", "munged"):
        sh("su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged")
    if not ok("pgrep", "-x", "slurmctld"):
        sh("/usr/sbin/slurmctld")
    for node in nodes:
        if not _daemon_alive(f"/run/slurmd-{node}.pid", "slurmd"):
            sh("/usr/sbin/slurmd", "-N", node)
    if not _slurm_ready(nodes, wait=60):
        raise BootstrapError(
            "Slurm did not become ready; see /var/log/slurmctld.log and /var/log/slurmd-*.log"
        )


def _slurm_ready(nodes: list[str], wait: float) -> bool:
    """Every node idle (or busy); nodes that came back down are resumed."""
    deadline = time.monotonic() + wait
    while True:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True).stdout
        states = dict(line.split() for line in out.splitlines() if line.strip())
        if all(states.get(n) in ("idle", "mix", "alloc") for n in nodes):  # "idle*": not responding
            return True
        for n, state in states.items():
            if state.startswith(("down", "drain")):
                ok("scontrol", "update", f"nodename={n}", "state=resume")
        if time.monotonic() >= deadline:
            return False
        time.sleep(1)


HARBOR = "harbor==0.26.0"
HARBOR_VENV = Path(os.environ.get("SWERL_CACHE", Path.home() / ".cache" / "swerl")) / "harbor-venv"
"""Harbor (Python >= 3.12) in a venv of its own, for the test that loads swerl's exported task
folders with Harbor's own loader; swerl itself never imports it."""


def newer_python() -> str | None:
    """A Python >= 3.12 on this machine (pyenv's or the system's), or None."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(pyenv.glob("3.1[2-9]*/bin/python3")) if pyenv.is_dir() else []
    found += [Path(p) for p in map(shutil.which, ("python3.13", "python3.12")) if p]
    return str(found[0]) if found else None


def install_harbor_venv() -> None:
    python = newer_python()
    if python is None:
        say("no Python >= 3.12 here: the test against Harbor's own task loader will be skipped")
        return
    if not (HARBOR_VENV / "bin" / "python").exists():
        sh(python, "-m", "venv", str(HARBOR_VENV))
    sh(
        str(HARBOR_VENV / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        HARBOR,
    )


class _Background(threading.Thread):
    def __init__(self, fn: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.fn, self.error = fn, None

    def run(self) -> None:
        try:
            self.fn()
        except Exception as e:  # reported by the caller after join()
            self.error = e


def start_vllm_venv() -> _Background:
    """vLLM in its own venv (its torch/transformers ranges), for the tests against a real vLLM server."""
    from swerl.integrations.vllm import install_venv, venv_dir, venv_python

    if venv_python() is None:
        say(f"installing vLLM into {venv_dir()} in the background")
    job = _Background(install_venv)
    job.start()
    return job


def build_images() -> None:
    sh(sys.executable, "-m", "swerl.cli", "images", "build-base")
    sh(sys.executable, "-m", "swerl.cli", "tasks", "build-images", "swerl-mini")  # bundled: any directory


def run(args: argparse.Namespace) -> int:
    apt_install(RUN_PACKAGES)
    start_dockerd()
    pip_install("")
    build_images()
    rollout = args.rest or ["default"]
    return sh(sys.executable, "-m", "swerl.cli", "rollout", *rollout, check=False).returncode


def test(args: argparse.Namespace) -> int:
    if not is_checkout():
        raise BootstrapError(
            f"`test` runs swerl's tests, which only a checkout has ({ROOT} is an installed swerl): "
            "run `python3 -m swerl.bootstrap test` inside a clone of the repository"
        )
    apt_install(TEST_PACKAGES)
    start_dockerd()
    start_slurm()
    pip_install("test,train")  # train: torch (CPU build, pinned in pyproject.toml), transformers, trl
    vllm = start_vllm_venv()  # a few minutes: meanwhile verl and the images
    pip_install_verl()
    make_skyrl_venv()
    install_harbor_venv()
    build_images()
    vllm.join()
    if vllm.error is not None:
        raise BootstrapError(f"the vLLM venv could not be installed: {vllm.error}")
    os.chdir(ROOT)
    lint = sh(sys.executable, "-m", "ruff", "check", ".", check=False).returncode  # the whole checkout
    fmt = sh(sys.executable, "-m", "ruff", "format", "--check", ".", check=False).returncode
    tests = sh(
        sys.executable, "-m", "pytest", "-q", "-ra", "--durations=25", *args.rest, check=False
    ).returncode
    if lint or fmt:
        say("lint or format check failed")
    return tests or lint or fmt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m swerl.bootstrap", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["run", "test"])
    parser.add_argument(
        "rest", nargs=argparse.REMAINDER, help="passed on to `swerl rollout` (config, overrides) or to pytest"
    )
    args = parser.parse_args(argv)
    try:
        return run(args) if args.what == "run" else test(args)
    except BootstrapError as e:
        print(f"[swerl] {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
