"""Strict grading's test run: an eval script the change cannot configure, a verdict it cannot forge.

The instance's eval script runs unchanged but for a preamble: every ``git`` it runs
has hooks and fsmonitor off (``core.hooksPath=/dev/null`` through
``GIT_CONFIG_PARAMETERS``), no user site-packages, and ``pytest`` / ``py.test`` /
``python -m pytest`` / ``python3 -m pytest`` are shell functions that start
:mod:`swerl.grading.strict_runner` from a directory outside the repository
instead. That runner pins the base commit's pytest configuration, enables the base
environment's plugins by name with auto-loading off, and writes each test's
outcome, HMAC-chained with a key only the grader and the runner hold, to a file
descriptor it opens before collection. :func:`read_verdict` verifies the chain
and its closing record; without them a pytest run is refused.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import importlib.util
import json
import marshal
import re
import secrets
import shlex
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT
from swebench.image_builder.constants import CONTAINER_WORKDIR

from swerl.grading.window import first_code_step, shell_functions, with_window

RUNNER_SOURCE = Path(__file__).with_name("strict_runner.py")
LAUNCHER = '''\
import sys


def _runner():
    """swerl's strict runner (runner.py beside this file) as code: from runner.pyc, the grader's
    compile of it (this interpreter's magic number, then marshal data), when it was made for
    this interpreter; else from the source. A script is compiled on every run (no cache)."""
    path = __file__[: __file__.rindex("/") + 1] + "runner.py"
    magic = getattr(sys.modules.get("_frozen_importlib_external"), "MAGIC_NUMBER", None)
    if magic and not sys.flags.optimize:
        try:
            with open(path + "c", "rb") as f:
                data = f.read()
            if data[: len(magic)] == magic:
                import marshal

                return path, marshal.loads(data[len(magic) :])
        except (OSError, ValueError, EOFError, TypeError):
            pass
    with open(path, "rb") as f:
        return path, compile(f.read(), path, "exec", dont_inherit=True)


__file__, _code = _runner()
del _runner
exec(_code)
'''
"""``run.py`` in the sandbox: starts the runner (``runner.py``) as ``__main__``, from the
bytecode :func:`runner_bytecode` made when the sandbox's interpreter can load it."""
PYTEST_COMMAND = re.compile(
    r"^\s*(?:\w+=\S*\s+)*(?:pytest|py\.test|python3?(?:\.\d+)?\s+-m\s+pytest)(?:\s|$)", re.M
)
CONFIG_NAMES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


@dataclass
class RunDir:
    """Where strict grading's runner lives in the sandbox (outside the repository), and its key."""

    path: str
    key: str = field(default_factory=lambda: secrets.token_hex(32))
    window_key: str = field(default_factory=lambda: secrets.token_hex(32))
    """Signs the pre-test window's watcher's record (``swerl.grading.window``)."""

    @classmethod
    def new(cls) -> RunDir:
        return cls(f"/tmp/.swerl-strict-{secrets.token_hex(8)}")

    @property
    def verdict(self) -> str:
        return f"{self.path}/verdict"

    @property
    def window(self) -> str:
        return f"{self.path}/window"


@functools.lru_cache(maxsize=2)
def _compiled(source: bytes) -> types.CodeType:
    return compile(source, "runner.py", "exec", dont_inherit=True)


def _renamed(code: types.CodeType, filename: str) -> types.CodeType:
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def runner_bytecode(source: bytes, path: str) -> bytes:
    """``source`` (the runner's) compiled by this interpreter once, every code object named
    ``path`` (where it runs, as if compiled there): the magic number, then marshal data. The
    launcher uses it only under an interpreter with the same magic number (else it compiles
    the source); it saves that compile (~10 ms) on every strict pytest run."""
    return importlib.util.MAGIC_NUMBER + marshal.dumps(_renamed(_compiled(source), path))


def runs_pytest(eval_script: str) -> bool:
    """Whether the test command between the markers starts pytest in a way the preamble catches."""
    body = eval_script.split(START_TEST_OUTPUT, 1)[-1].split(END_TEST_OUTPUT, 1)[0]
    return bool(PYTEST_COMMAND.search(body))


SHELL_LOOKUPS = r"""_swerl_which() { _swerl_path=; hash "$1" 2>/dev/null && _swerl_path=${BASH_CMDS[$1]-}; [ -n "$_swerl_path" ] || _swerl_path=$(type -P "$1"); [ -n "$_swerl_path" ]; }
_swerl_script_python() { local _swerl_path= l= a=(); _swerl_which "$1" && IFS= read -r l < "$_swerl_path"; case $l in '#!'*) read -r -a a <<< "${l#??}" ;; esac; l=${a[0]-}; if [ "${l##*/}" = env ]; then a=("${a[@]:1}"); while case ${a[0]-} in -*) true ;; *) false ;; esac; do a=("${a[@]:1}"); done; fi; [ -n "${a[0]-}" ] && _swerl_py=${a[0]}; }
"""
"""Bash functions the preamble's stand-ins look commands up with, in the eval script's own
shell (no subshell, no ``sed`` / ``awk`` process on every pytest call): ``_swerl_which NAME``
sets ``_swerl_path`` to NAME's path on ``PATH`` (as ``type -P``: ``hash`` searches ``PATH``
again and ``BASH_CMDS`` holds what it found); ``_swerl_script_python NAME`` sets ``_swerl_py``
to the interpreter of the script NAME (its ``#!`` line's program, or the one after ``env`` and
its options), and fails when NAME is missing or has no such line."""


def preamble(run: RunDir, window: bool = False) -> str:
    """Shell lines put before the eval script's own (after its shebang and ``set`` line); with
    ``window``, the pre-test window's watcher's functions too (``swerl.grading.window``)."""
    runner = shlex.quote(f"{run.path}/run.py")
    return (
        f"""\
export GIT_CONFIG_PARAMETERS="'core.hooksPath=/dev/null' 'core.fsmonitor=false'"
export PYTHONNOUSERSITE=1
_swerl_pytest() {{ local py="$1" mode="$2"; shift 2; PYTHONSAFEPATH=1 "$py" -s {runner} "$mode" "$@"; }}
{SHELL_LOOKUPS}pytest() {{ local _swerl_py=python3; _swerl_script_python pytest || true; _swerl_pytest "$_swerl_py" script "$@"; }}
py.test() {{ local _swerl_py=python3; _swerl_script_python py.test || true; _swerl_pytest "$_swerl_py" script "$@"; }}
python() {{ if [ "${{1-}}" = -m ] && [ "${{2-}}" = pytest ]; then shift 2; local _swerl_path=; _swerl_which python || true; _swerl_pytest "$_swerl_path" module "$@"; else command python "$@"; fi; }}
python3() {{ if [ "${{1-}}" = -m ] && [ "${{2-}}" = pytest ]; then shift 2; local _swerl_path=; _swerl_which python3 || true; _swerl_pytest "$_swerl_path" module "$@"; else command python3 "$@"; fi; }}
"""
    ) + (shell_functions(run.path, CONTAINER_WORKDIR) if window else "")


def strict_script(eval_script: str, run: RunDir) -> str:
    """The eval script with the preamble after its first lines (shebang, ``set``), and the
    pre-test window's watcher around its steps that can run the change's code (none: the
    script is unchanged but for the preamble)."""
    lines = eval_script.splitlines(keepends=True)
    head = 0
    while head < len(lines) and (lines[head].startswith("#!") or lines[head].startswith("set ")):
        head += 1
    body = "".join(lines[head:])
    window = first_code_step(body) is not None
    return "".join(lines[:head]) + preamble(run, window) + with_window(body)


def config_files(tracked: Iterable[str]) -> list[str]:
    """The paths among ``tracked`` (the base commit's files) that pytest may read its
    configuration from: the files the runner's ``base/`` mirror holds."""
    return sorted(p for p in tracked if PurePosixPath(p).name in CONFIG_NAMES)


def setup_command(run: RunDir, base_commit: str, configs: Iterable[str], sources: Iterable[str] = ()) -> str:
    """Fill the mirror of the base commit's pytest config files under ``base/``, and the base
    text of ``sources`` (changed Python files) under ``base-src/`` (their directories come with
    the run directory's archive): one ``git cat-file`` a file, names quoted, never parsed; a
    file that cannot be read fails the set-up. Run before the eval script: no code of the
    change has run yet."""
    d = run.path
    git = "git -c core.hooksPath=/dev/null cat-file blob"
    pairs = [(p, f"{d}/base/{p}") for p in configs] + [(p, f"{d}/base-src/{p}") for p in sources]
    return " && ".join(
        [f"{git} {shlex.quote(f'{base_commit}:{p}')} > {shlex.quote(to)}" for p, to in pairs] or [":"]
    )


@dataclass
class Verdict:
    """What the runner reported: each test's status, how it ended, and what it refused."""

    tests: dict[str, str] = field(default_factory=dict)
    sessions: int = 0
    closed: int = 0
    refused: list[str] = field(default_factory=list)
    framework: list[str] = field(default_factory=list)
    """Packages of the repository pytest started from (it is pytest, pluggy, ...): their code
    ran as the runner's own."""


def read_verdict(raw: bytes | None, key: str) -> Verdict:
    """Verify the chained records; anything unverifiable is a refusal, never a result."""
    v = Verdict()
    if raw is None:
        v.refused.append("the test run left no verdict (the strict runner never started)")
        return v
    mac, k = "", key.encode()
    for n, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
        try:
            rec = json.loads(line)
            payload = json.dumps(rec["r"], sort_keys=True)
        except (ValueError, KeyError, TypeError):
            v.refused.append(f"verdict line {n} is not a record")
            return v
        if rec["r"].get("start"):
            mac = ""
        want = hmac.new(k, (mac + payload).encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(want, str(rec.get("mac", ""))):
            v.refused.append(f"verdict line {n} does not carry the grader's key (forged or reordered)")
            return v
        mac, r = want, rec["r"]
        if r.get("start"):
            v.sessions += 1
            v.framework = sorted(set(v.framework) | set(r.get("framework") or []))
        elif r.get("end"):
            v.closed += 1
            v.refused += [f"strict runner: {t}" for t in r.get("tampered", [])]
        elif "test" in r:
            v.tests[r["test"]] = r["status"]
    if not v.sessions:
        v.refused.append("the test run left no verdict (the strict runner never started)")
    elif v.closed < v.sessions:
        v.refused.append("the test process ended without the strict runner's closing record")
    return v
