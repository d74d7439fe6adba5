"""The user's surface, tried as a new user would: `python -m swerl`, resume, interrupt, fail.

Every test runs the real command line in a subprocess (``python -m swerl``, this
checkout on PYTHONPATH) against the real Docker daemon and, where a run starts,
a real local Ray.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swerl.sandbox.base import RUN_LABEL
from swerl.tasks.sources import load_tasks

ROOT = Path(__file__).resolve().parents[1]
SUITE = {i.instance_id: i for i in load_tasks("swerl-mini")}
FOUR = ["swerl__textkit-1", "swerl__intervals-2", "swerl__textkit-2", "swerl__tinyconf-1"]


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    e.pop("RAY_ADDRESS", None)
    return e | extra


def swerl(*args: str, timeout: float = 300, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swerl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env(**extra),
    )


def leftovers(docker_client, run_id: str) -> list:
    """swerl containers of a run (its sandboxes are labelled with actor ids RUN_ID-aN)."""
    # sparse: the list alone, no inspect per container (which fails when anyone's container goes meanwhile)
    found = docker_client.containers.list(all=True, sparse=True, filters={"label": "swerl.owner=swerl"})
    return [c for c in found if (c.attrs.get("Labels") or {}).get(RUN_LABEL, "").startswith(f"{run_id}-")]


# ------------------------------------------------------------- entry points
def test_python_m_swerl_and_version():
    r = swerl("--version")
    assert r.returncode == 0 and r.stdout.strip() == "swerl 0.1.0", r.stderr
    r = swerl("--help")
    assert r.returncode == 0 and "usage: swerl" in r.stdout


def test_json_into_head_ends_without_a_traceback(tmp_path):
    # More output than a pipe holds, so the writer really meets a closed pipe.
    base = SUITE["swerl__textkit-1"].to_dict()
    many = tmp_path / "many.jsonl"
    many.write_text(
        "".join(json.dumps(base | {"instance_id": f"swerl__textkit-{n}"}) + "\n" for n in range(3000))
    )
    p = subprocess.Popen(
        [sys.executable, "-m", "swerl", "tasks", "list", str(many), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(),
    )  # fmt: skip
    assert p.stdout.readline().strip() == b"["
    p.stdout.close()  # what `head -1` does once it has its line
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 128 + signal.SIGPIPE
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_overrides_may_follow_flags():
    # Before, `submit CONFIG --wait slurm.nodes=...` was "unrecognized arguments" under the top-level usage.
    r = swerl("cluster", "slurm", "submit", "default", "--wait", "slurm.nodes=lots")
    assert r.returncode == 2 and "slurm.nodes" in r.stderr and "unrecognized" not in r.stderr, r.stderr
    r = swerl("rollout", "default", "--json", "task_ids=[nope__x-1]")
    assert r.returncode == 2 and "nope__x-1" in r.stderr, r.stderr
    r = swerl("rollout", "default", "--json", "not-an-override")
    assert r.returncode == 2 and "usage: swerl rollout" in r.stderr and "not-an-override" in r.stderr


def test_reap_needs_a_scope_and_dry_run_removes_nothing(base_image, docker_client):
    from swerl.sandbox.base import SandboxConfig
    from swerl.sandbox.docker import DockerSandbox

    r = swerl("reap")
    assert r.returncode == 2 and all(f in r.stderr for f in ("--run-id", "--orphans", "--all")), r.stderr
    sb = DockerSandbox(base_image, SandboxConfig(run_id="test-surface-reap")).start()
    try:
        r = swerl("reap", "--run-id", "test-surface-reap", "--dry-run", "--json")
        assert r.returncode == 0, r.stderr
        (row,) = json.loads(r.stdout)["would_remove"]
        assert row["run_id"] == "test-surface-reap"
        assert sb.execute("echo alive").output == "alive\n"  # not removed
        r = swerl("reap", "--run-id", "test-surface-reap", "--json")
        assert r.returncode == 0 and json.loads(r.stdout) == {"removed": 1}
    finally:
        sb.close()


def test_demo_json_is_json(base_image):
    r = swerl("demo", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["image"] == base_image and "git version" in data["commands"][1]["output"]
    assert data["p50_ms_per_command"] > 0


def test_tasks_validate_json_is_json(task_images, tmp_path):
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps(SUITE["swerl__textkit-1"].to_dict()) + "\n")
    r = swerl("tasks", "validate", str(one), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    (row,) = json.loads(r.stdout)
    assert row["instance_id"] == "swerl__textkit-1" and row["gold"] == "resolved" and row["ok"]


# ------------------------------------------------- fail before Ray, fast
def test_bad_task_id_writes_nothing(tmp_path):
    out = tmp_path / "bad"
    r = swerl("rollout", "default", f"output_dir={out}", "task_ids=[swerl__textkit-1,nope__x-9]")
    assert r.returncode == 2 and "nope__x-9" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_missing_image_is_exit_3_before_ray(docker_client, tmp_path):
    tasks = tmp_path / "missing.jsonl"
    tasks.write_text(
        json.dumps(SUITE["swerl__textkit-1"].to_dict() | {"image": "swerl-test-missing:none"}) + "\n"
    )
    out = tmp_path / "run"
    r = swerl("rollout", "default", f"output_dir={out}", f"tasks={tasks}")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "swerl-test-missing:none" in r.stderr and f"build-images {tasks}" in r.stderr
    assert "starting Ray" not in r.stdout and not out.exists()


def test_unreachable_docker_is_exit_3(tmp_path):
    out = tmp_path / "run"
    r = swerl("rollout", "default", f"output_dir={out}", DOCKER_HOST=f"unix://{tmp_path}/none.sock")
    assert r.returncode == 3 and "cannot reach the Docker daemon" in r.stderr, r.stderr
    assert "starting Ray" not in r.stdout and not out.exists()


# ------------------------------------------ interrupt, refuse, resume
def start_rollout(out: Path, *extra: str) -> subprocess.Popen:
    args = ["rollout", "default", f"output_dir={out}", f"task_ids=[{','.join(FOUR)}]",
            "rollout.num_actors=1", "rollout.envs_per_actor=1", *extra]  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "swerl", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip


def interrupt_after_first_episode(p: subprocess.Popen, signum: int) -> tuple[list[str], str, int]:
    lines = []
    try:
        for line in p.stdout:
            lines.append(line)
            if line.startswith("[1/4]"):
                p.send_signal(signum)
                break
        rest, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
    return lines + rest.splitlines(keepends=True), err, p.returncode


@pytest.fixture(scope="module")
def interrupted(task_images, tmp_path_factory):
    """A rollout stopped by SIGINT after its first episode: (out, stdout, stderr, returncode)."""
    out = tmp_path_factory.mktemp("surface") / "run"
    lines, err, rc = interrupt_after_first_episode(start_rollout(out), signal.SIGINT)
    return out, "".join(lines), err, rc


def test_sigint_saves_says_how_to_resume_and_closes_sandboxes(interrupted, docker_client):
    out, stdout, err, rc = interrupted
    assert rc == 130, stdout + err
    run_id = re.search(r"^run (\S+):", stdout, re.M).group(1)
    assert "starting Ray..." in stdout and "config: " in stdout
    assert "Token authentication is enabled" not in err  # Ray's notice on every start, filtered
    assert re.search(r"\[1/4\] swerl__textkit-1 #0: resolved reward=1\.0 .*elapsed \d+:\d\d, ETA ", stdout)
    assert (
        "interrupted by SIGINT" in err and "saved in" in err and "Resume with: swerl rollout default" in err
    )
    saved = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(saved) >= 1 and all(e["status"] == "resolved" for e in saved)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run_id"] == run_id and summary["interrupted"] is True
    assert leftovers(docker_client, run_id) == []


def test_changed_config_refuses_then_resumes_anyway(interrupted, docker_client):
    out, _, _, _ = interrupted
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    args = ["rollout", "default", f"output_dir={out}", f"task_ids=[{','.join(FOUR)}]", "env.max_steps=40",
            "backend.sandbox.memory=3g"]  # fmt: skip
    r = swerl(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "env.max_steps: 50 -> 40" in r.stderr and "backend.sandbox.memory: '4g' -> '3g'" in r.stderr
    assert "--resume-anyway" in r.stderr and "starting Ray" not in r.stdout
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing written

    done = len((out / "episodes.jsonl").read_text().splitlines())
    r = swerl(*args, "--resume-anyway")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"resuming: {done} of 4 episode(s) done" in r.stdout
    assert f"[{done + 1}/4]" in r.stdout and "[1/4]" not in r.stdout  # the counter goes on
    (kept,) = out.glob("config.before-*.yaml")
    assert kept.read_bytes() == before["config.yaml"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 4 and summary["new_episodes"] == 4 - done and not summary["interrupted"]
    assert leftovers(docker_client, summary["run_id"]) == []


def test_sigterm_is_an_interrupt_too(task_images, tmp_path, docker_client):
    out = tmp_path / "run"
    lines, err, rc = interrupt_after_first_episode(start_rollout(out), signal.SIGTERM)
    assert rc == 128 + signal.SIGTERM, "".join(lines) + err
    assert "interrupted by SIGTERM" in err and "Resume with:" in err
    run_id = json.loads((out / "summary.json").read_text())["run_id"]
    assert leftovers(docker_client, run_id) == []


def test_sigterm_while_ray_blocks_is_still_named_sigterm(ray_session):
    """Ray's core worker hands a handler's exception back as a bare KeyboardInterrupt; the
    run must still say SIGTERM (and exit 143), whichever moment the signal lands in."""
    import threading

    import ray

    from swerl.rollout.run import SigtermAsInterrupt

    @ray.remote
    def slow() -> None:
        time.sleep(60)

    ref = slow.remote()
    with SigtermAsInterrupt() as signals:
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
        with pytest.raises(KeyboardInterrupt) as caught:
            ray.wait([ref], timeout=30)
        assert signals.interrupted(caught.value).signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is not signals._handle  # restored on the way out
    ray.cancel(ref, force=True)


# ------------------------------------------------ a missing image is final
def test_missing_image_is_never_retried(task_images, ray_session):
    """Past the preflight (an image removed mid-run, a remote cluster): one attempt, the cause shown."""
    from swerl.episode import Episode
    from swerl.grading import grade
    from swerl.policies.registry import make_policy
    from swerl.progress import RunProgress
    from swerl.rollout.runner import RolloutRunner
    from swerl.tasks.instance import Instance

    task = Instance.from_dict(SUITE["swerl__textkit-1"].to_dict() | {"image": "swerl-test-missing:none"})
    g = grade(task, task.patch, retries=2)  # eval's path
    assert g.status.value == "infra_error" and g.attempts == 1 and "ImageMissing" in g.error

    with RolloutRunner([task], make_policy("gold", [task]), num_actors=1, max_retries=2) as runner:
        (ep,) = runner.run()
    assert ep.infra_error and ep.retries == 0 and runner.stats["retried"] == 0
    lines: list[str] = []
    progress = RunProgress(write=lines.append, live=False)
    progress.start(1)
    progress.episode(ep)
    assert "infra_error" in lines[0] and "ImageMissing" in lines[0] and "swerl-test-missing:none" in lines[0]
    assert isinstance(ep, Episode)


def test_live_display_on_a_terminal_shows_elapsed_eta_and_mean():
    from swerl.episode import Episode
    from swerl.progress import RunProgress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Tty()
    progress = RunProgress(screen)
    assert progress.live
    progress.start(3, done=1, rewards=[1.0])
    progress.episode(Episode("t-1", 0, status="resolved", reward=1.0, timings={"total": 1.5}))
    progress.episode(
        Episode("t-2", 0, status="infra_error", error="SandboxError: it died", timings={"total": 0.2})
    )
    time.sleep(0.1)
    progress.stop()
    text = screen.getvalue()
    assert "[2/3] t-1 #0: resolved reward=1.0" in text and "[3/3] t-2 #0: infra_error" in text
    assert "SandboxError: it died" in text and "3/3" in text and "infra errors 1" in text
    assert "mean reward 1.00" in text


# ------------------------------------------------- round three (issue 31)
def test_tasks_validate_without_docker_or_an_image_is_exit_3(task_images, tmp_path):
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps(SUITE["swerl__textkit-1"].to_dict()) + "\n")
    r = swerl("tasks", "validate", str(one), DOCKER_HOST=f"unix://{tmp_path}/none.sock")
    assert r.returncode == 3 and "cannot reach the Docker daemon" in r.stderr, r.stdout + r.stderr
    assert "MISMATCH" not in r.stdout and "Traceback" not in r.stderr
    missing = tmp_path / "missing.jsonl"
    missing.write_text(
        json.dumps(SUITE["swerl__textkit-1"].to_dict() | {"image": "swerl-test-missing:v"}) + "\n"
    )
    r = swerl("tasks", "validate", str(missing))
    assert r.returncode == 3 and "swerl-test-missing:v" in r.stderr and f"build-images {missing}" in r.stderr
    assert "MISMATCH" not in r.stdout and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_kuberay_submit_without_the_kubernetes_extra_is_exit_3(tmp_path):
    # sys.modules[name] = None is how Python itself makes a module unimportable.
    code = (
        "import sys; sys.modules['kubernetes'] = None; from swerl.cli import main; "
        f"sys.exit(main(['cluster', 'kuberay', 'submit', {str(ROOT / 'configs' / 'kuberay.yaml')!r}]))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "pip install 'swerl[kubernetes]'" in r.stderr and "Traceback" not in r.stderr


def test_gymnasium_make_works_in_a_fresh_interpreter(tmp_path, hook_site):
    """Gymnasium >= 1.0 has no plugin entry points: the ``.pth`` hook an install puts in site-packages
    registers swerl's ids when Gymnasium is imported, without importing swerl. Here ``site`` itself
    processes the hook's files (as setup.py makes them) from a site directory, as it does at
    interpreter start."""
    code = (
        f"import site; site.addsitedir({str(hook_site)!r}); import sys, gymnasium; "
        "assert 'swerl' not in sys.modules, 'the hook imported swerl'; "
        "env = gymnasium.make(sys.argv[1], tasks='swerl-mini'); "
        "print(type(env.unwrapped).__name__, len(env.unwrapped.tasks))"
    )

    def make(env_id: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code, env_id], cwd=tmp_path, capture_output=True, text=True,
                              env=env(**extra), timeout=120)  # fmt: skip

    for r in (make("swerl/SWE-v0"), make("swerl:swerl/SWE-v0", SWERL_GYMNASIUM_HOOK="0")):
        assert r.returncode == 0 and r.stdout.split() == ["SWEEnv", str(len(SUITE))], r.stderr
    r = make("swerl/SWE-v0", SWERL_GYMNASIUM_HOOK="0")  # the opt-out: nothing registered
    assert r.returncode == 1 and "NamespaceNotFound" in r.stderr, r.stderr


def test_a_stale_hook_is_silent_at_interpreter_start(tmp_path, hook_site):
    """A ``.pth`` an older install left behind, its module gone or broken, prints no traceback
    (``site`` prints one for each failing line, before every program); the interpreter runs on."""
    # `python -S`: this environment's own hook stays out; its packages are importable, after the
    # site directory (so that its copy of the module is the one found)
    start = "import site, sys; sys.path[:0] = [sys.argv[1]]; sys.path += site.getsitepackages(); "
    run = "site.addsitedir(sys.argv[1]); import gymnasium; print('swerl/SWE-v0' in gymnasium.registry)"
    gone = "sys.modules['_swerl_gymnasium'] = None; "  # what `import` meets when no copy exists
    module = hook_site / "_swerl_gymnasium.py"
    source = module.read_bytes()
    cases = [
        (gone, source),
        ("", b"raise ImportError('swerl is gone')\n"),
        ("", source.replace(b"def install(", b"def _renamed(")),
        ("", source),  # the guard hides nothing else: the intact hook registers
    ]
    for prefix, content in cases:
        module.write_bytes(content)
        r = subprocess.run([sys.executable, "-S", "-c", start + prefix + run, str(hook_site)], cwd=tmp_path,
                           capture_output=True, text=True, env=env(), timeout=120)  # fmt: skip
        registered = content == source and not prefix
        assert (r.returncode, r.stdout, r.stderr) == (0, f"{registered}\n", ""), (prefix, r.stderr)


def test_a_finished_run_is_not_resumed_on_another_kind_of_place(task_images, tmp_path):
    """A laptop run then the cluster command: refused (exit 2), not "1 of 1 done" with nothing run."""
    out = tmp_path / "laptop"
    args = ["rollout", "default", f"output_dir={out}", "task_ids=[swerl__tinyconf-1]", "rollout.num_actors=1"]
    r = swerl(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^Ray: a local Ray at \S+ \(1 node\(s\)\)", r.stdout, re.M), r.stdout
    assert json.loads((out / "summary.json").read_text())["place"] == {"kind": "local", "ray_address": None}

    t0 = time.monotonic()
    r = swerl(*args)  # everything done: no Ray is started
    assert r.returncode == 0 and "nothing to run" in r.stdout and "starting Ray" not in r.stdout, r.stdout
    assert time.monotonic() - t0 < 30

    before = {p.name: p.read_bytes() for p in out.iterdir()}
    r = swerl(*args, "ray.address=127.0.0.1:1")  # a cluster: refused before joining it
    assert r.returncode == 2 and "made on a local Ray on this machine" in r.stderr, r.stdout + r.stderr
    assert "the Ray cluster at 127.0.0.1:1" in r.stderr and "--resume-anyway" in r.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    r = swerl("cluster", "ray", "submit", "default", f"output_dir={out}", "--address", "http://127.0.0.1:1")
    assert r.returncode == 2 and "made on a local Ray" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.slow
def test_cluster_ray_up_and_down_end_only_what_swerl_started(tmp_path):
    from swerl.cluster.local_ray import LocalRayCluster, _pids_under

    other = LocalRayCluster(port=38379, dashboard_port=38265, num_cpus=1).start()  # someone else's Ray
    try:
        # Head only: a joining worker is `up`'s LocalRayCluster.add_node, tested in test_multinode.py.
        r = swerl("cluster", "ray", "up", "--port", "37379", "--dashboard-port", "37265", "--num-cpus", "1",
                  "--workers", "0")  # fmt: skip
        try:
            assert r.returncode == 0, r.stdout + r.stderr
            assert "export RAY_ADDRESS=127.0.0.1:37379 RAY_AUTH_MODE=token" in r.stdout
            assert "swerl cluster ray down --port 37379" in r.stderr
            count = (
                "import ray; ray.init(address='127.0.0.1:37379'); print(sum(n['Alive'] for n in ray.nodes()))"
            )
            c = subprocess.run([sys.executable, "-c", count], capture_output=True, text=True, timeout=120,
                               env=env(RAY_AUTH_MODE="token"))  # fmt: skip
            assert c.stdout.strip().splitlines()[-1] == "1", c.stderr[-2000:]
            again = swerl("cluster", "ray", "up", "--port", "37379", "--dashboard-port", "37265")
            assert again.returncode == 2 and "already runs" in again.stderr
        finally:
            d = swerl("cluster", "ray", "down", "--port", "37379")
        assert d.returncode == 0 and "ended" in d.stderr, d.stderr
        root = LocalRayCluster(port=37379, dashboard_port=0).root
        assert _pids_under(root) == []
        assert other.nodes["head"].process.poll() is None and _pids_under(other.root)  # untouched
        assert swerl("cluster", "ray", "down", "--port", "37379").returncode == 2
    finally:
        other.stop()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_llm_policy_with_no_server_is_exit_3_in_one_line_before_ray(tmp_path):
    out = tmp_path / "llm"
    url = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    r = swerl("rollout", "default", "policy.name=llm", "policy.options.model=m", f"policy.options.base_url={url}",
              f"output_dir={out}", OPENAI_API_KEY="")  # fmt: skip
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [
        f"swerl: infrastructure error: the policy's model server at {url.rstrip('/')} does not answer "
        "([Errno 111] Connection refused): start it, or set policy.options.base_url"
    ]
    assert "starting Ray" not in r.stdout and not out.exists()


def test_a_keyless_server_needs_no_key_and_one_with_a_key_says_so(monkeypatch):
    """Real sockets: a server with no key (as vLLM without --api-key), one that wants a key (401)."""
    import http.server
    import threading

    from swerl.errors import BackendUnavailable
    from swerl.policies.llm import LLMPolicy
    from swerl.preflight import check_policy

    class Server(http.server.BaseHTTPRequestHandler):
        key: str | None = None

        def do_GET(self):
            ok = self.key is None or self.headers.get("Authorization") == f"Bearer {self.key}"
            body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
            self.send_response(200 if ok else 401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        check_policy("llm", {"base_url": url})  # keyless: passes with no key set
        assert [m.id for m in LLMPolicy("m", base_url=url)._chat().models.list()] == ["m"]
        Server.key = "sk-local"
        with pytest.raises(
            BackendUnavailable, match=r"refused the request \(401.*set OPENAI_API_KEY.*not set"
        ):
            check_policy("llm", {"base_url": url})
        monkeypatch.setenv("MY_KEY", "sk-local")
        check_policy("llm", {"base_url": url, "api_key_env": "MY_KEY"})
    finally:
        httpd.shutdown()


def test_a_batch_with_no_valid_action_is_said_out_loud():
    from swerl.episode import Episode, Step
    from swerl.rollout.checks import NoActionStreak, no_valid_action_warning, tail

    def ep(task: str, *observations: str) -> Episode:
        steps = [Step(i, "I think the bug is in", o) for i, o in enumerate(observations, 1)]
        return Episode(task, 0, steps=steps, status="empty_patch", reward=0.0, reason="no_action")

    bad = [ep("t-1", "Invalid action: no JSON tool call or bash block"), ep("t-2", "Invalid action: x")]
    text = no_valid_action_warning(bad, max_new_tokens=64)
    assert text and "none of the 2 episode(s)" in text and "max_new_tokens=64" in text
    assert "'I think the bug is in'" in text and "Training with your own model" in text
    assert (
        no_valid_action_warning([*bad, ep("t-3", "Invalid action: x", "<returncode>0</returncode>")]) is None
    )
    assert no_valid_action_warning([]) is None
    # verl's loops see one episode each: a streak of `after` in a row stands for the batch
    streak, good = NoActionStreak(after=2), ep("t-3", "<returncode>0</returncode>")
    said = [streak.add(e) for e in (bad[0], good, bad[0], bad[1], bad[0], bad[1])]
    assert [bool(s) for s in said] == [False, False, False, True, False, True]
    assert "2 episodes in a row had no valid action" in said[3] and "4 episodes in a row" in said[5]
    # An infra error's tail starts at a word, not mid-word ("kendUnavailable").
    error = "Traceback ...\n" + "x" * 400 + " swerl.errors.BackendUnavailable: cannot reach the Docker daemon"
    assert tail(error, 80) == "...swerl.errors.BackendUnavailable: cannot reach the Docker daemon"
    assert tail("short", 80) == "short"


def test_ray_s_raylet_state_dump_is_left_out_of_the_cli_output():
    """What Ray's driver printed when a node's raylet was killed mid-run (tests/test_multinode.py
    kills one for real and checks the command's output)."""
    import io

    from swerl.rayoutput import RayDumpFilter

    out = io.StringIO()
    f = RayDumpFilter(out)
    dump = "".join(
        f"    [state-dump] \tNodeManager.Op{i} - 1 total (0 active), Execution time: mean = 1ms\n"
        for i in range(20)
    )
    f.write(
        "(raylet) Raylet is terminated. Termination is unexpected. Last 20 lines of the Raylet logs:\n" + dump
    )
    f.write("\n")
    f.write("[2/8] swerl__textkit-1 #0: resolved reward=1.0 (97.2 s)\n")
    assert out.getvalue() == (
        "(raylet) Raylet is terminated. Termination is unexpected. Last 20 lines of the Raylet logs:\n"
        "    [swerl: 20 line(s) of the raylet's state dump left out; Ray's logs keep them]\n"
        "\n[2/8] swerl__textkit-1 #0: resolved reward=1.0 (97.2 s)\n"
    )
    assert f.isatty() is False and f.getvalue() == out.getvalue()  # the rest is the stream's


def test_ctrl_c_in_the_sandbox_shell_kills_the_command_not_the_session(task_images):
    p = subprocess.Popen([sys.executable, "-m", "swerl", "sandbox", "shell", "swerl__textkit-1"], env=env(),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        p.stdin.write("echo ready\nsleep 100 & sleep 90; echo never\n")
        p.stdin.flush()
        assert p.stdout.readline() == "ready\n"
        time.sleep(1.0)  # the sleeps are running
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        p.stdin.write("ps -eo args 2>/dev/null | grep -c '^sleep [19]0' || true\necho after\nexit\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "^C: killed" in err and "Traceback" not in err, err
    assert out.splitlines()[-2:] == ["0", "after"] and "never" not in out, out  # both sleeps are gone
    assert time.monotonic() - t0 < 60
