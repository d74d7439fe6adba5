"""Strict grading's pre-test window: the eval script's steps before the test command.

Real SWE-bench eval scripts reinstall the package before the tests (``pip install -e .``,
``python setup.py develop``), and a reinstall runs the change's code as root (setuptools
imports the package for an ``attr:`` version, a ``setup.py`` may import it). The grader knows
the script: :func:`first_code_step` says whether any step before the test command can run code
the change controls. A script whose steps are only shell builtins, ``git`` commands (with their
heredocs) and environment activation runs none and pays nothing. Otherwise
:func:`with_window` starts the watcher (``swerl/grading/prestep.py``, copied beside the strict
runner) right before that step and asks it for its report right before the test output starts;
:func:`judge` turns the signed report into refusals for ``GradeResult.integrity``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import shlex
from pathlib import Path, PurePosixPath

from swebench.harness.constants import START_TEST_OUTPUT

from swerl.grading.allowlist import GIT_INTERNAL_OK, RUNNER_MODULES, STDLIB, infra_reason

WATCHER_SOURCE = Path(__file__).with_name("prestep.py")
BUILTINS = frozenset(
    {"cd", ":", "echo", "set", "export", "true", "unset", "printf", "git", "pushd", "popd"}
    | {"rm", "mkdir", "touch", "chmod", "cp", "mv", "cat", "ls", "test", "["}
)
"""Commands of a pre-test step that run nothing the change controls (``git``: hooks and
fsmonitor are off for every git the strict script runs; filters come from the base's files;
the file utilities are the image's, outside the source tree the change may write)."""
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_OPERATORS = frozenset({";", "&&", "||", "|", "&", "(", ")"})
MAX_NAMED = 12
"""Refusals named one by one; the rest are counted (a reinstall of a big package may leave many)."""


def _logical_lines(lines: list[str]) -> list[tuple[int, str, str | None]]:
    """(index of its first line, the command text, its heredoc delimiter or None) for each
    command line, continuation lines joined; heredoc bodies are skipped."""
    out, i = [], 0
    while i < len(lines):
        start, text = i, lines[i].rstrip("\n")
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1] + lines[i].rstrip("\n")
        m = _HEREDOC.search(text)
        out.append((start, text, m.group(2) if m else None))
        i += 1
        if m:
            while i < len(lines) and lines[i].rstrip("\n").strip() != m.group(2):
                i += 1
            i += 1
    return out


def _runs_code(text: str, heredoc: str | None) -> bool:
    """Whether one command line may run code that is not the shell's or git's."""
    if "$(" in text or "`" in text or "<(" in text or ">(" in text:
        return True
    try:
        lex = shlex.shlex(text, posix=True, punctuation_chars=";&|()")
        lex.whitespace_split, lex.commenters = True, "#"
        tokens = list(lex)
    except ValueError:
        return True
    commands: list[list[str]] = [[]]
    for tok in tokens:
        if tok in _OPERATORS or set(tok) <= set(";&|()"):
            commands.append([])
        else:
            commands[-1].append(tok)
    for words in commands:
        while words and _ASSIGN.match(words[0]):
            words = words[1:]
        if not words:
            continue
        head = words[0]
        if heredoc is not None and head != "git":
            return True
        if head in ("source", ".") and len(words) >= 2 and words[1].endswith("/activate"):
            continue
        if head == "conda" and len(words) >= 2 and words[1] in ("activate", "deactivate"):
            continue
        if head not in BUILTINS:
            return True
    return False


def first_code_step(eval_script: str) -> int | None:
    """The line index of the first step before the test output that can run code the change
    controls (a reinstall, ``python``, ``make``, a script); None when every step is a shell
    builtin, a ``git`` command or an environment activation."""
    lines = eval_script.splitlines(keepends=True)
    for start, text, heredoc in _logical_lines(lines):
        if START_TEST_OUTPUT in text:
            return None
        if start == 0 and text.startswith("#!"):
            continue
        if _runs_code(text, heredoc):
            return start
    return None


def shell_functions(run_path: str, repo: str) -> str:
    """The preamble's two functions: start the watcher (as a coprocess, whose pipes only this
    shell holds) and wait until it listed everything; ask for its report and wait for it."""
    d = shlex.quote(run_path)
    return f"""\
_swerl_window_open() {{ local py= said= _swerl_py= _swerl_path=; if _swerl_script_python pytest; then py=$_swerl_py; elif _swerl_which python3 || _swerl_which python; then py=$_swerl_path; fi; coproc "$py" -I -S {d}/prestep.py {d} {shlex.quote(repo)}; read -r -u "${{COPROC[0]}}" said || true; }}
_swerl_window_close() {{ local said=; if [ -n "${{COPROC_PID-}}" ] && [ -n "${{COPROC[1]-}}" ]; then echo check >&"${{COPROC[1]}}"; read -r -u "${{COPROC[0]}}" said || true; fi; }}
"""


def with_window(body: str) -> str:
    """``body`` (the eval script after the preamble) with the watcher started right before its
    first code step and asked right before the test output starts; unchanged when it has none."""
    first = first_code_step(body)
    if first is None:
        return body
    lines = body.splitlines(keepends=True)
    out = [*lines[:first], "_swerl_window_open\n"]
    closed = False
    for line in lines[first:]:
        if not closed and START_TEST_OUTPUT in line:
            out.append("_swerl_window_close\n")
            closed = True
        out.append(line)
    return "".join(out)


def judge(raw: bytes | None, key: str, tests: list[str]) -> tuple[list[str], dict]:
    """The watcher's signed record -> (refusals, the record). ``tests``: the files the script's
    git steps write (the test patch's)."""
    if raw is None:
        return ["pre-test window: the watcher left no record (it never ran or was stopped)"], {}
    payload, _, mac = raw.rpartition(b"\n")
    want = hmac.new(key.encode(), payload, hashlib.sha256).hexdigest().encode()
    if not payload or not hmac.compare_digest(want, mac.strip()):
        return ["pre-test window: the watcher's record does not carry its key (forged)"], {}
    rec = json.loads(payload)
    out = [f"pre-test window: {why}" for why in _repo_refusals(rec.get("repo", []), tests)]
    out += [f"pre-test window: {why}" for why in _outside_refusals(rec.get("outside", []))]
    out += [f"pre-test window: a process it started is still running: {p}" for p in rec.get("leftover", [])]
    if len(out) > MAX_NAMED:
        out = [*out[:MAX_NAMED], f"pre-test window: and {len(out) - MAX_NAMED} more refused"]
    return out, rec


def _repo_refusals(entries: list[list[str]], tests: list[str]) -> list[str]:
    """What a window step wrote in the repository that the allowlist would not take from the
    change. Build products (``build/``, ``*.egg-info/``, compiled extensions) and source files
    are the change's code: the watcher handed them to the runner as changed files."""
    out = []
    for path, what, kind in entries:
        p = PurePosixPath(path)
        if path in GIT_INTERNAL_OK or path.startswith(".git/objects/") or path in tests:
            continue
        if p.parts[0] == ".git":
            out.append(f"{path}: written inside .git")
            continue
        if p.parts[0] == "build" or any(part.endswith(".egg-info") for part in p.parts[:-1]):
            continue
        if kind == "f" and p.suffix in (".so", ".pyd") and what != "removed":
            continue
        why = infra_reason(path, tests)
        if not why and kind == "l":
            why = "a symbolic link"
        elif not why and kind != "f" and what != "removed":
            why = "not a regular file"
        if not why and what == "new":
            root = p.parts[0].removesuffix(".py") if len(p.parts) == 1 or p.parts[1] == "__init__.py" else ""
            if root in RUNNER_MODULES or root in STDLIB:
                why = f"shadows the installed module {root!r}"
        if why:
            out.append(f"{path}: {why} ({what} in the repository)")
    return out


def _outside_refusals(entries: list[dict]) -> list[str]:
    """Outside the repository only the reinstalled distribution's own files may change, and a
    start-up file only as an honest reinstall rewrites it (the same content; a ``.pth`` of path
    lines into the repository; an entry-point file declaring no pytest plugin)."""
    out = []
    for e in entries:
        path, what, name = e["path"], e["what"], PurePosixPath(e["path"]).name
        startup = "same" in e or (
            what == "removed" and (name.endswith(".pth") or name.startswith("__editable__"))
        )
        if startup:
            if what == "removed" and e.get("own"):
                continue
            if e.get("same") or e.get("paths_ok"):
                continue
            if name == "entry_points.txt" and e.get("own") and not e.get("plugins"):
                continue
            why = "a start-up file (runs or names code when the interpreter or pytest starts)"
        elif e.get("own") and e.get("kind") == "f":
            continue
        elif e.get("own"):
            why = "not a regular file"
        else:
            why = "not a file of the reinstalled distribution"
        out.append(f"{path}: {what} outside the repository, {why}")
    return out
