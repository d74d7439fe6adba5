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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_PACKAGES = ["docker.io", "debootstrap"]
TEST_PACKAGES = [*RUN_PACKAGES, "slurm-wlm", "munge", "bubblewrap", "squashfuse", "iproute2"]
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


def pip_install(extras: str) -> None:
    spec = f"{ROOT}[{extras}]" if extras else str(ROOT)
    sh(sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-e", spec)


def start_slurm() -> None:
    """A real one-node Slurm cluster (munge auth) for the Slurm tests."""
    if ok("sinfo", "-h") and ok("scontrol", "ping"):
        return
    host = socket.gethostname()
    mem_mb = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.9)
    cpus = os.cpu_count() or 1
    for d, owner in (
        ("/run/munge", "munge"),
        ("/var/spool/slurmctld", "root"),
        ("/var/spool/slurmd", "root"),
    ):
        Path(d).mkdir(parents=True, exist_ok=True, mode=0o755)
        shutil.chown(d, owner, owner)
    SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
    SLURM_CONF.write_text(
        f"""ClusterName=swerl
SlurmctldHost={host}
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurmctld.log
SlurmdLogFile=/var/log/slurmd.log
NodeName={host} CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=main Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""
    )
    if not ok("pgrep", "-x", "munged"):
        sh("su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged")
    for daemon in ("slurmctld", "slurmd"):
        if not ok("pgrep", "-x", daemon):
            sh(f"/usr/sbin/{daemon}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True).stdout.strip()
        if out in ("idle", "mix", "alloc"):
            return
        if out in ("down", "drain", "down*", "drain*"):
            ok("scontrol", "update", f"nodename={host}", "state=resume")
        time.sleep(1)
    raise BootstrapError("Slurm did not become ready; see /var/log/slurmctld.log and /var/log/slurmd.log")


def build_images() -> None:
    sh(sys.executable, "-m", "swerl.cli", "images", "build-base")
    if (ROOT / "envs" / "swerl-mini" / "tasks.jsonl").exists():
        sh(sys.executable, "-m", "swerl.cli", "tasks", "build-images", "swerl-mini")


def run(args: argparse.Namespace) -> int:
    apt_install(RUN_PACKAGES)
    start_dockerd()
    pip_install("")
    build_images()
    rollout = args.rest or ["default"]
    return sh(sys.executable, "-m", "swerl.cli", "rollout", *rollout, check=False).returncode


def test(args: argparse.Namespace) -> int:
    apt_install(TEST_PACKAGES)
    start_dockerd()
    start_slurm()
    pip_install("test")
    build_images()
    os.chdir(ROOT)
    lint = sh(sys.executable, "-m", "ruff", "check", "swerl", "tests", check=False).returncode
    fmt = sh(sys.executable, "-m", "ruff", "format", "--check", "swerl", "tests", check=False).returncode
    tests = sh(sys.executable, "-m", "pytest", "-q", "-ra", *args.rest, check=False).returncode
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
