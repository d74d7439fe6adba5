"""How the strict runner starts and ends in the sandbox, on this machine's Python and pytest:
the launcher (``run.py``) runs the grader's bytecode of the runner only when this interpreter
can load it, else the runner's source; the test process ends without the interpreter's
teardown but with everything an exit owes the tests (threads joined, atexit handlers, flushed
streams, the same exit code)."""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import secrets
import subprocess
import sys
import types
from pathlib import Path

import pytest

from swerl.grading.channel import LAUNCHER, RUNNER_SOURCE, read_verdict, runner_bytecode


def _codes(code: types.CodeType):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def test_the_runner_bytecode_is_the_runner_compiled_where_it_runs(tmp_path):
    """Every code object carries the runner's path in the sandbox, as a compile there gives."""
    path = "/tmp/.swerl-strict-0123456789abcdef/runner.py"
    source = RUNNER_SOURCE.read_bytes()
    data = runner_bytecode(source, path)
    magic = importlib.util.MAGIC_NUMBER
    assert data[: len(magic)] == magic
    code = marshal.loads(data[len(magic) :])
    assert {c.co_filename for c in _codes(code)} == {path}
    assert code == compile(source, path, "exec", dont_inherit=True)
    assert runner_bytecode(source, "/elsewhere/runner.py") != data  # renamed per run, not cached whole


def _launch(run: Path, *flags: str) -> subprocess.CompletedProcess:
    (run / "run.py").write_text(LAUNCHER)
    return subprocess.run(
        [sys.executable, *flags, "-s", str(run / "run.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )


def _pyc(text: str, filename: str, magic: bytes = importlib.util.MAGIC_NUMBER) -> bytes:
    return magic + marshal.dumps(compile(text, filename, "exec", dont_inherit=True))


SAYS = "print('{}', __name__, __file__)\n"


@pytest.mark.parametrize(
    "pyc, flags, want",
    [
        ("ours", (), "bytecode"),
        ("none", (), "source"),
        ("other-magic", (), "source"),  # another interpreter's compile
        ("garbage", (), "source"),
        ("ours", ("-O",), "source"),  # an optimised run compiles asserts away: its own compile
    ],
)
def test_the_launcher_runs_the_bytecode_only_when_this_interpreter_can_load_it(tmp_path, pyc, flags, want):
    run = tmp_path / "run"
    run.mkdir()
    runner = run / "runner.py"
    runner.write_text(SAYS.format("source"))
    if pyc == "ours":
        (run / "runner.pyc").write_bytes(_pyc(SAYS.format("bytecode"), str(runner)))
    elif pyc == "other-magic":
        (run / "runner.pyc").write_bytes(_pyc(SAYS.format("bytecode"), str(runner), magic=b"\x00\x0d\r\n"))
    elif pyc == "garbage":
        (run / "runner.pyc").write_bytes(importlib.util.MAGIC_NUMBER + b"not marshal data")
    proc = _launch(run, *flags)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [want, "__main__", str(runner)], proc.stdout


TESTS = """import atexit, threading, time


def test_passes():
    def late():
        time.sleep(0.5)
        open("thread-done", "w").write("joined")

    threading.Thread(target=late).start()  # not a daemon: an exit waits for it
    atexit.register(lambda: open("atexit-done", "w").write("ran"))
    print("the test ran")


def test_fails():
    assert 1 == 2
"""


@pytest.mark.parametrize("bytecode", [True, False])
def test_the_test_process_ends_with_what_an_exit_owes_it(tmp_path, bytecode):
    """Threads joined and atexit handlers run before it ends, output flushed, exit code
    pytest's own (1: a test failed), the verdict signed and closed."""
    repo, run = tmp_path / "repo", tmp_path / "run"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_end.py").write_text(TESTS)
    (run / "base").mkdir(parents=True)
    source = RUNNER_SOURCE.read_bytes()
    (run / "run.py").write_text(LAUNCHER)
    (run / "runner.py").write_bytes(source)
    if bytecode:
        (run / "runner.pyc").write_bytes(runner_bytecode(source, str(run / "runner.py")))
    key = secrets.token_hex(32)
    (run / "key").write_text(key)
    (run / "changed.json").write_text(json.dumps([]))
    proc = subprocess.run(
        [sys.executable, "-s", str(run / "run.py"), "module", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-s", "tests/test_end.py"],
        cwd=repo, env={**os.environ, "PYTHONSAFEPATH": "1"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    v = read_verdict((run / "verdict").read_bytes(), key)
    assert v.tests == {"tests/test_end.py::test_passes": "PASSED", "tests/test_end.py::test_fails": "FAILED"}
    assert (v.sessions, v.closed, v.refused) == (1, 1, []), (v, proc.stdout[-2000:], proc.stderr[-2000:])
    assert proc.returncode == 1
    assert "the test ran" in proc.stdout and "1 failed, 1 passed" in proc.stdout
    assert (repo / "thread-done").read_text() == "joined"
    assert (repo / "atexit-done").read_text() == "ran"
    assert not (run / "key").exists()


LAZY = """import sys, types


class Lazy(types.ModuleType):  # apipkg's way (the py library): reading __dict__ imports everything
    @property
    def __dict__(self):
        open("dict-read", "w").write("read")
        return types.ModuleType.__dict__["__dict__"].__get__(self)


sys.modules["lazy_thing"] = Lazy("lazy_thing")


def test_passes():
    assert 1 + 1 == 2
"""


def test_the_end_of_run_check_runs_no_module_dict_property(tmp_path):
    """The check of every loaded module's globals reads them as the interpreter holds them:
    a lazy module's ``__dict__`` property (which imports all it names) is not run."""
    repo, run = tmp_path / "repo", tmp_path / "run"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_lazy.py").write_text(LAZY)
    (run / "base").mkdir(parents=True)
    (run / "run.py").write_text(LAUNCHER)
    (run / "runner.py").write_bytes(RUNNER_SOURCE.read_bytes())
    key = secrets.token_hex(32)
    (run / "key").write_text(key)
    (run / "changed.json").write_text(json.dumps([]))
    proc = subprocess.run(
        [sys.executable, "-s", str(run / "run.py"), "module", "-p", "no:cacheprovider", "-p", "no:randomly",
         "tests/test_lazy.py"],
        cwd=repo, env={**os.environ, "PYTHONSAFEPATH": "1"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    v = read_verdict((run / "verdict").read_bytes(), key)
    assert (v.tests, v.closed, v.refused) == ({"tests/test_lazy.py::test_passes": "PASSED"}, 1, []), (
        proc.stdout
    )
    assert not (repo / "dict-read").exists()


def test_the_setup_mirrors_the_base_text_of_changed_sources(tmp_path):
    """The set-up command writes, before the eval script runs, the base commit's text of each
    changed source the runner asks about (base-src/), beside the config mirror (base/): what
    the file held at the base, not what the change made of it; names with spaces quoted."""
    from swerl.grading.channel import RunDir, setup_command

    repo, run = tmp_path / "repo", RunDir(str(tmp_path / "run"))
    (repo / "pkg dir").mkdir(parents=True)
    (repo / "pkg dir" / "mod.py").write_text("class Num:\n    pass\n")
    (repo / "setup.cfg").write_text("[tool:pytest]\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    base = subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    (repo / "pkg dir" / "mod.py").write_text("class Near:\n    pass\n")  # the change
    for sub in ("base", "base-src/pkg dir"):
        (tmp_path / "run" / sub).mkdir(parents=True)
    cmd = setup_command(run, base, ["setup.cfg"], ["pkg dir/mod.py"])
    subprocess.run(["bash", "-c", cmd], cwd=repo, check=True)
    assert (tmp_path / "run" / "base-src" / "pkg dir" / "mod.py").read_text() == "class Num:\n    pass\n"
    assert (tmp_path / "run" / "base" / "setup.cfg").read_text() == "[tool:pytest]\n"
    bad = subprocess.run(["bash", "-c", setup_command(run, base, [], ["missing.py"])], cwd=repo)
    assert bad.returncode != 0  # a file the base does not have fails the set-up


PROBE = """import importlib.util, os, sys

spec = importlib.util.spec_from_file_location("runner", "/tmp/probe-runner.py")
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
if sys.argv[1] == "protected":
    runner._not_dumpable()
held = ("KEY" + "0123456789abcdef" * 4).encode()  # what the parent holds, as it holds the key
pid = os.fork()
if pid == 0:
    ppid, found = os.getppid(), False
    try:
        with open("/proc/%d/maps" % ppid) as maps, open("/proc/%d/mem" % ppid, "rb", 0) as mem:
            for line in maps:
                lo, hi = [int(x, 16) for x in line.split()[0].split("-")]
                if "rw" in line.split()[1] and hi - lo < (64 << 20):
                    try:
                        mem.seek(lo)
                        found = found or held in mem.read(hi - lo)
                    except OSError:
                        pass
        print("read the parent's memory; found:", found, flush=True)
    except OSError as e:
        print("cannot read the parent's memory:", e.strerror, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_the_parent_holding_the_key_keeps_its_memory_from_the_test_process(base_image, sandbox_config):
    """The runner's parent holds the key; it makes itself not dumpable before the test process
    goes on, so that process (same user, no CAP_SYS_PTRACE: no sandbox has it) cannot read the
    parent's memory. Without that step the same probe finds what the parent holds."""
    from swerl.sandbox.docker import DockerSandbox

    sb = DockerSandbox(base_image, sandbox_config).start()
    try:
        sb.write_file("/tmp/probe-runner.py", RUNNER_SOURCE.read_bytes())
        sb.write_file("/tmp/probe.py", PROBE.encode())
        said = {
            how: sb.execute(f"python3 /tmp/probe.py {how}", cwd="/tmp").output
            for how in ("open", "protected")
        }
    finally:
        sb.close()
    assert "read the parent's memory; found: True" in said["open"], said
    assert "cannot read the parent's memory: Permission denied" in said["protected"], said
