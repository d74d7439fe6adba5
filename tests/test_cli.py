"""The command line, run for real."""

from __future__ import annotations

import json
import subprocess
import sys

from swerl.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swerl.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_help_everywhere():
    for args in (
        ["--help"],
        ["images", "build-base", "--help"],
        ["reap", "--help"],
        ["tasks", "list", "--help"],
    ):
        r = run_cli(*args)
        assert r.returncode == 0 and "usage" in r.stdout


def test_build_base_is_cached(base_image):
    r = run_cli("images", "build-base", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["image"] == base_image


def test_demo_runs_commands_in_a_sandbox(base_image):
    r = run_cli("demo")
    assert r.returncode == 0, r.stderr
    assert "git version" in r.stdout and "per command" in r.stdout


def test_reap_reports_what_it_removed(base_image, docker_client):
    from swerl.sandbox.base import SandboxConfig
    from swerl.sandbox.docker import DockerSandbox

    sb = DockerSandbox(base_image, SandboxConfig(run_id="test-cli-reap")).start()
    try:
        r = run_cli("reap", "--run-id", "test-cli-reap", "--json")
        assert r.returncode == 0 and json.loads(r.stdout) == {"removed": 1}
    finally:
        sb.close()


def test_infra_error_has_its_own_exit_code(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    assert main(["reap"]) == 3
    assert "cannot reach the Docker daemon" in capsys.readouterr().err
