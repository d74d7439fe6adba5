"""Grade a patch the way swebench's ``run_instance`` does, in a fresh sandbox.

Same patch-apply fallbacks (imported from the harness), same eval script (from
``make_test_spec``), same log parser and report logic (``get_logs_eval`` /
``get_eval_report``). What differs is the container lifecycle: one cheap
sandbox and one command channel instead of a container per ``docker exec``, no
15 s ``docker stop`` — and infrastructure failures are retried and reported as
such, never scored. ``mode="strict"`` runs the same path with a filter before and
a stricter reading after (see ``swerl.grading.integrity``).
"""

from __future__ import annotations

import io
import json
import logging
import os
import secrets
import shlex
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from swebench.harness.constants import CONTAINER_PATCH_FILE, FAIL_TO_PASS, PASS_TO_PASS
from swebench.harness.grading import get_eval_report, get_logs_eval
from swebench.harness.run_evaluation import GIT_APPLY_CMDS
from swebench.image_builder.constants import CONTAINER_WORKDIR

from swerl.errors import ImageMissing, InfraError, SandboxError
from swerl.grading.allowlist import LIST_TREE, Entry, classify, parse_listing, top_module
from swerl.grading.channel import (
    LAUNCHER,
    RUNNER_SOURCE,
    RunDir,
    Verdict,
    config_files,
    read_verdict,
    runner_bytecode,
    runs_pytest,
    setup_command,
    strict_script,
)
from swerl.grading.integrity import (
    STRICT_PREFIX,
    VERDICT_LOG,
    VERDICT_RUNNER,
    GradingMode,
    Integrity,
    instance_test_files,
    strict_reading,
)
from swerl.grading.result import GradeResult, GradeStatus
from swerl.grading.window import WATCHER_SOURCE, first_code_step
from swerl.grading.window import judge as judge_window
from swerl.sandbox.base import Sandbox, SandboxConfig
from swerl.tasks.history import SCRUB_SCRIPT
from swerl.tasks.instance import Instance

log = logging.getLogger(__name__)

SandboxFactory = Callable[[str], Sandbox]

# run_instance restores a pristine tree between apply attempts with this command
# (inline in the harness, so it cannot be imported).
RESET_TREE = "git checkout -- . ; git clean -fd"
EVAL_SCRIPT_PATH = "/eval.sh"
DEFAULT_TIMEOUT = 1800.0
"""Seconds the eval script may run; swebench's default test timeout."""


@dataclass
class Evaluation:
    """One run of the eval script in one sandbox (no retries, no verdict yet)."""

    applied: bool
    log: str = ""
    apply_output: str = ""
    apply_command: str = ""
    """The harness command that applied the patch (the reverse check's when already applied)."""
    timed_out: bool = False
    timings: dict[str, float] = field(default_factory=dict)
    integrity: Integrity | None = None
    """Strict mode's findings before the run (reverted paths, refusals)."""
    verdict: Verdict | None = None
    """Strict mode, pytest runs: what the strict runner reported on its keyed channel."""


def docker_factory(timeout: float = DEFAULT_TIMEOUT, run_id: str | None = None) -> SandboxFactory:
    """The default: a fresh DockerSandbox of the instance image, one client shared."""
    from swerl.sandbox.docker import DockerSandbox, connect

    client = None
    cfg = SandboxConfig(timeout=timeout, **({"run_id": run_id} if run_id else {}))

    def make(image: str) -> Sandbox:
        nonlocal client
        client = client or connect()
        return DockerSandbox(image, cfg, client=client)

    return make


def evaluate(
    instance: Instance,
    patch: str,
    factory: SandboxFactory,
    timeout: float,
    mode: GradingMode | str = GradingMode.OFFICIAL,
    sandbox: Sandbox | None = None,
) -> Evaluation:
    """Apply ``patch`` (if any) and run the eval script in a fresh sandbox.

    ``sandbox``: a started sandbox of the image to run in instead, left open for its owner
    (who must hand it over in the state a fresh one has).

    Strict mode first drops the git history past the base commit (the patch's code
    could fetch the fix from it), lists the tree, applies with no step that can write
    into ``.git``, lists it again and reverts what the allowlist does not accept
    (``swerl.grading.allowlist``), then runs the eval script under the strict runner
    (``swerl.grading.channel``). Raises InfraError when the sandbox fails; anything the
    patch causes is data.
    """
    spec = instance.test_spec()
    strict = GradingMode.parse(mode) is GradingMode.STRICT
    integrity = Integrity() if strict else None
    timings: dict[str, float] = {}
    t = time.monotonic()
    sb = sandbox or factory(spec.image)
    try:
        sb.start()
        timings["start"] = time.monotonic() - t
        t = time.monotonic()
        before: dict[str, Entry] = {}
        first, then, before_file = "", "", ""
        if integrity is not None and not patch:
            before = _scrub_and_list(sb)
            timings["scrub"] = time.monotonic() - t
            t = time.monotonic()
        elif integrity is not None:  # scrub and first listing in the apply command: one round trip
            before_file = f"/tmp/.swerl-before-{secrets.token_hex(8)}"
            first = _list_while_scrubbing(before_file)
            then = _tree_command(instance.base_commit)
        applied, apply_output, apply_command, listed, shown = (
            (True, "", "", None, None)
            if not patch
            else _apply(sb, patch, strict, then=then, first=first, first_file=before_file)
        )
        if before_file:  # printed by the apply command when short; else read back whole
            before = _listed_while_scrubbing(
                shown if shown is not None else _read_bytes(sb, before_file) or b""
            )
        timings["apply"] = time.monotonic() - t
        if integrity is not None and _GIT_WRITTEN in apply_output:
            integrity.reverted[".git"] = (
                "written by the `patch` fallback in its scratch copy (never reached the repository)"
            )
        if not applied:
            return Evaluation(False, apply_output=apply_output, timings=timings, integrity=integrity)
        run = None
        if integrity is not None:
            t = time.monotonic()
            changed, tracked = _enforce_allowlist(sb, instance, before, integrity, listed)
            timings["allowlist"] = time.monotonic() - t
            run = RunDir.new()
        t = time.monotonic()
        if run is None:
            _write(sb, EVAL_SCRIPT_PATH, spec.eval_script.encode())
            command = f"/bin/bash {EVAL_SCRIPT_PATH}"
        else:  # the runner's directory is filled by the same command that runs the script
            script = strict_script(spec.eval_script, run)
            sources = [p for p in changed if p.endswith(".py") and p in tracked]  # their base text
            command = _write_run_dir(sb, instance, run, changed, script, config_files(tracked), sources)
        r = sb.execute(command, cwd=CONTAINER_WORKDIR, timeout=timeout)
        timings["eval"] = time.monotonic() - t
        if run is not None and r.output.startswith(_SETUP_FAILED):
            raise SandboxError(f"cannot prepare the strict runner: {r.output[-500:]}")
        text = r.output
        if r.timed_out:  # what run_instance appends, so the log reads the same
            text += f"\n\nTimeout error: {timeout} seconds exceeded."
        verdict = None
        if run is not None and runs_pytest(spec.eval_script):
            verdict = read_verdict(_read_bytes(sb, run.verdict), run.key)
        if integrity is not None and run is not None and first_code_step(spec.eval_script) is not None:
            _judge_window(sb, run, instance, integrity, timings)
        if integrity is not None:
            integrity.verdict = VERDICT_RUNNER if verdict is not None else VERDICT_LOG
        return Evaluation(
            True, text, apply_output, apply_command=apply_command, timed_out=r.timed_out,
            timings=timings, integrity=integrity, verdict=verdict,
        )  # fmt: skip
    finally:
        if sandbox is None:
            t = time.monotonic()
            sb.close()
            timings["close"] = time.monotonic() - t


def _read_bytes(sb: Sandbox, path: str) -> bytes | None:
    try:
        return sb.read_file(path)
    except (OSError, SandboxError):
        return None


_SPLIT = b"\0//SWERL-SPLIT//\0"  # no path either listing can print: separates the two


def _tree_command(base: str = "") -> str:
    """:data:`LIST_TREE`; with ``base``, then the paths it tracks (after :data:`_SPLIT`)."""
    if not base:
        return LIST_TREE
    return (
        f"{{ {LIST_TREE} && printf '\\0//SWERL-SPLIT//\\0' && "
        f"git -c core.hooksPath=/dev/null ls-tree -r -z --name-only {shlex.quote(base)}; }}"
    )


def _list_tree(sb: Sandbox, base: str = "", raw: bytes | None = None) -> Any:
    """The repository's entries (``.git`` included); with ``base``, also the paths it tracks.

    Read from the command's output (``raw``: the output of :func:`_tree_command`, already
    read whole by the apply step's command); one too long for the output cap is written to a
    file and read back whole, so a listing is never cut."""
    cmd = _tree_command(base)
    if raw is None:
        r = sb.execute(cmd, cwd=CONTAINER_WORKDIR)
        raw = r.raw
        if r.ok and r.truncated:
            out = f"/tmp/.swerl-tree-{secrets.token_hex(6)}"
            r = sb.execute(f"{cmd} > {out}", cwd=CONTAINER_WORKDIR)
            raw = sb.read_file(out) if r.ok else b""
            sb.execute(f"rm -f {out}", cwd="/")
        if not r.ok:
            raise SandboxError(f"cannot list the repository: {r.output[-500:]}")
    if not base:
        return parse_listing(raw)
    listing, _, tracked = raw.partition(_SPLIT)
    return parse_listing(listing), {p.decode("utf-8", "surrogateescape") for p in tracked.split(b"\0") if p}


def _scrub_and_list_command() -> str:
    """Drop the history past the base commit (:data:`SCRUB_SCRIPT`), then list the tree."""
    return (
        f"bash -c {shlex.quote(SCRUB_SCRIPT)} scrub {shlex.quote(CONTAINER_WORKDIR)} && "
        f"printf '\\0//SWERL-SPLIT//\\0' && {LIST_TREE}"
    )


def _list_while_scrubbing(path: str) -> str:
    """:func:`_scrub_and_list_command`'s two steps at once, into ``path``: the listing, then
    :data:`_SPLIT`, what the scrub said and :data:`_LISTED`. The scrub of a clean repository
    writes nothing (it only reads and counts), so the listing taken beside it stands; after one
    that dropped something the tree is listed again. The scrub runs as a shell function in the
    command substitution's subshell (its ``set -e`` and ``exit`` end that subshell only). Fails
    (no :data:`_LISTED`) when either step did."""
    f = shlex.quote(path)
    scrub = f"_swerl_scrub {shlex.quote(CONTAINER_WORKDIR)}"  # a function: no second bash to start
    return (
        f"_swerl_scrub() {{\n{SCRUB_SCRIPT.strip()}\n}}\n"
        f"{{ {LIST_TREE} > {f} 2>&1 & l=$!; said=$({scrub} 2>&1); s=$?; wait $l; w=$?; "
        f"if [ $s -eq 0 ]; then case $said in *clean) ;; *) {LIST_TREE} > {f} 2>&1; w=$? ;; esac; fi; "
        f"[ $s -eq 0 ] && [ $w -eq 0 ] && printf '\\0//SWERL-SPLIT//\\0%s\\0//SWERL-LISTED//\\0' \"$said\" >> {f}; }}"
    )


def _scrub_and_list(sb: Sandbox) -> dict[str, Entry]:
    """Run :func:`_scrub_and_list_command` (one round trip). Raises SandboxError when either
    step failed."""
    r = sb.execute(_scrub_and_list_command(), cwd=CONTAINER_WORKDIR, timeout=600.0)
    if not r.ok and _SPLIT in r.raw:
        raise SandboxError(f"cannot list the repository: {r.output[-500:]}")
    said, split, listing = r.raw.partition(_SPLIT)
    _check_scrubbed(said if split else b"", r.raw)
    return _list_tree(sb) if r.truncated else parse_listing(listing)


def _listed_while_scrubbing(raw: bytes) -> dict[str, Entry]:
    """The listing in ``raw``, the file :func:`_list_while_scrubbing` wrote. Raises SandboxError
    when either step failed."""
    listing, split, said = raw.removesuffix(_LISTED).rpartition(_SPLIT)
    if not split:
        raise SandboxError(f"cannot scrub or list the repository: {raw[-500:].decode(errors='replace')}")
    _check_scrubbed(said, raw)
    return parse_listing(listing)


def _check_scrubbed(said: bytes, raw: bytes) -> None:
    """Raise unless the scrub's last line (``said``) says the history is clean or was scrubbed."""
    if said.decode(errors="replace").strip().splitlines()[-1:] not in (["clean"], ["scrubbed"]):
        raise SandboxError(f"cannot scrub the git history: {raw[-500:].decode(errors='replace')}")


def _nul_list(paths: list[str]) -> bytes:
    return b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths)


def _revert(sb: Sandbox, base: str, paths: list[str], tracked: set[str]) -> None:
    """Remove ``paths`` and check out from ``base`` those it tracks (literal, NUL-separated names)."""
    if not paths:
        return
    lst = f"/tmp/.swerl-revert-{os.getpid()}-{time.monotonic_ns()}"
    _write(sb, f"{lst}.rm", _nul_list(sorted(paths, reverse=True)))
    _write(sb, f"{lst}.co", _nul_list(sorted(p for p in paths if p in tracked)))
    r = sb.execute(
        f"xargs -0 -r rm -f -- < {lst}.rm && if [ -s {lst}.co ]; then GIT_LITERAL_PATHSPECS=1 "
        f"git -c core.hooksPath=/dev/null checkout {shlex.quote(base)} --pathspec-from-file={lst}.co "
        f"--pathspec-file-nul; fi; rc=$?; rm -f {lst}.rm {lst}.co; exit $rc",
        cwd=CONTAINER_WORKDIR,
    )
    if not r.ok:
        raise SandboxError(f"cannot revert paths to the base commit: {r.output[-500:]}")


def _importable(sb: Sandbox, names: set[str]) -> set[str]:
    """Which top-level names the sandbox's interpreters import from outside the repository."""
    if not names:
        return set()
    code = (
        "import importlib.util as u, sys; sys.path = [p for p in sys.path if p and not p.startswith("
        f"{CONTAINER_WORKDIR!r})]; print(' '.join(n for n in sys.argv[1:] if u.find_spec(n)))"
    )
    args = " ".join(map(shlex.quote, sorted(names)))
    r = sb.execute(
        f"for py in python3 python; do command -v $py >/dev/null && $py -c {shlex.quote(code)} {args}; done; true",
        cwd="/",
    )
    return set(r.output.split()) & names


def _enforce_allowlist(
    sb: Sandbox,
    instance: Instance,
    before: dict[str, Entry],
    integrity: Integrity,
    listed: bytes | None = None,
) -> tuple[list[str], set[str]]:
    """Revert what the allowlist refuses; record why (``listed``: the after-apply listing, when
    the apply step's command read it). -> (the accepted changed paths, the paths the base
    commit tracks)."""
    base = instance.base_commit
    after, tracked = _list_tree(sb, base, listed)
    change = classify(before, after, tracked, instance_test_files(instance.test_patch))
    for name in _importable(sb, change.created_roots):
        for p in list(change.accepted):
            if top_module(p, after) == name or p.split("/")[0] == name:
                change.accepted.remove(p)
                change.revert[p] = f"shadows the installed module {name!r}"
    _revert(sb, base, list(change.revert), tracked)
    candidates = [p for p in change.untracked_new if p in change.accepted]
    if candidates:
        lst = f"/tmp/.swerl-ignore-{time.monotonic_ns()}"
        _write(sb, lst, _nul_list(candidates))
        r = sb.execute(
            f"git -c core.hooksPath=/dev/null check-ignore -z --stdin < {lst}; rm -f {lst}",
            cwd=CONTAINER_WORKDIR,
        )
        ignored = [p for p in r.output.split("\0") if p in candidates]
        for p in ignored:
            change.accepted.remove(p)
            change.revert[p] = "hidden by an ignore rule of the base commit"
        _revert(sb, base, ignored, tracked)
    integrity.reverted.update(change.revert)
    integrity.refused += [f"{p}: {why} (cannot be restored)" for p, why in change.refuse.items()]
    return change.accepted, tracked


_SETUP_FAILED = "swerl: the strict runner's directory could not be prepared"
"""What the eval command prints first, instead of running the script, when the set-up fails
(the script's own output starts with its ``set -x`` trace, never with this)."""


def _write_run_dir(
    sb: Sandbox,
    instance: Instance,
    run: RunDir,
    changed: list[str],
    script: str,
    configs: list[str],
    sources: list[str] | tuple[str, ...] = (),
) -> str:
    """Write the strict runner, its key, the changed paths, the eval script and the directories
    of the base commit's config mirror (and of ``sources``' base text: changed Python files the
    base tracks, for the runner to tell a class the change added from one it only touched) as
    one archive (one write); -> the command that unpacks it, fills the mirrors
    (``channel.setup_command``), then runs the script (one round trip for all of it)."""
    buf = io.BytesIO()
    name = os.path.basename(run.path)
    dirs = {"", "base", "base-src"} | {f"base/{parent}" for p in configs for parent in _parents(p)}
    dirs |= {f"base-src/{parent}" for p in sources for parent in _parents(p)}
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for sub in sorted(dirs):
            info = tarfile.TarInfo(f"{name}/{sub}".rstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, 0o700
            tar.addfile(info)
        source = RUNNER_SOURCE.read_bytes()
        for member, data in (
            ("run.py", LAUNCHER.encode()),
            ("runner.py", source),
            ("runner.pyc", runner_bytecode(source, f"{run.path}/runner.py")),
            ("key", run.key.encode()),
            ("changed.json", json.dumps(changed).encode("utf-8", "surrogateescape")),
            ("eval.sh", script.encode()),
            *_window_members(instance, run, script),
        ):
            info = tarfile.TarInfo(f"{name}/{member}")
            info.size, info.mode = len(data), 0o600
            tar.addfile(info, io.BytesIO(data))
    d = shlex.quote(run.path)
    _write(sb, f"{run.path}.tar", buf.getvalue())
    setup = (
        f"{{ tar -C {shlex.quote(os.path.dirname(run.path))} -xf {d}.tar && : > {d}.tar && "
        f"{setup_command(run, instance.base_commit, configs, sources)}; }} >{d}.log 2>&1"
    )
    return (
        f"if ! {{ {setup}; }}; then echo {shlex.quote(_SETUP_FAILED)}; cat {d}.log; exit 1; fi; "
        f"{STRICT_PREFIX}/bin/bash {d}/eval.sh"
    )


def _window_members(instance: Instance, run: RunDir, script: str) -> list[tuple[str, bytes]]:
    """The watcher, its key and its settings, when the script starts it (none otherwise)."""
    if "_swerl_window_open\n" not in script:
        return []
    tests = json.dumps(instance_test_files(instance.test_patch)).encode("utf-8", "surrogateescape")
    return [
        ("prestep.py", WATCHER_SOURCE.read_bytes()),
        ("window-key", run.window_key.encode()),
        ("window.json", b'{"tests": ' + tests + b"}"),
    ]


def _judge_window(sb: Sandbox, run: RunDir, instance: Instance, integrity: Integrity, timings: dict) -> None:
    """The pre-test window's watcher's record -> refusals (``swerl.grading.window``); its own
    seconds (listing at the start, the check at the end) into ``timings``."""
    refused, rec = judge_window(
        _read_bytes(sb, run.window), run.window_key, instance_test_files(instance.test_patch)
    )
    integrity.refused += refused
    opened, checked = (rec.get("seconds") or [0.0, 0.0])[:2]
    timings["window_open"], timings["window_check"] = float(opened), float(checked)


def _parents(path: str) -> list[str]:
    """``a/b/c`` -> ``["a", "a/b"]``: the directories a path needs."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _write(sb: Sandbox, path: str, data: bytes) -> None:
    try:
        sb.write_file(path, data)
    except OSError as e:  # the patch has not touched anything outside /testbed yet
        raise SandboxError(f"cannot write {path} in the sandbox: {e}") from e


_GIT_WRITTEN = "swerl: the patch fallback wrote .git"
# Strict mode's `patch` step: in a scratch copy of HEAD outside the repository (the tree
# the harness resets to between attempts), so nothing it does can reach the repository's
# .git; the files it wrote (newer than the stamp) and removed are carried back, .git never.
SCRATCH_PATCH = (
    """set -o pipefail
s=$1; shift
mkdir -p "$s/t" && git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c tar.umask="$(umask)" archive HEAD | tar -C "$s/t" -xf - \
  && touch -d '1 second ago' "$s/stamp" || exit 125
(cd "$s/t" && "$@"); rc=$?
if [ -e "$s/t/.git" ] || [ -L "$s/t/.git" ]; then echo '"""
    + _GIT_WRITTEN
    + """'; rm -rf "$s/t/.git"; fi
if [ $rc -eq 0 ]; then
  (cd "$s/t" && find . ! -type d -newer "$s/stamp" -printf '%P\\0') > "$s/new" || exit 125
  git -c core.hooksPath=/dev/null ls-tree -r -z --name-only HEAD | while IFS= read -r -d '' p; do
    [ -e "$s/t/$p" ] || [ -L "$s/t/$p" ] || printf '%s\\0' "$p"; done > "$s/gone" || exit 125
  xargs -0 -r rm -f -- < "$s/gone" && { [ ! -s "$s/new" ] || tar -C "$s/t" --null -T "$s/new" -cf - | tar -xpf -; } || exit 125
fi
rm -rf "$s"; exit $rc
"""
)


_APPLYING = b"\0//SWERL-APPLYING//\0"
"""Printed once the ``first`` step succeeded, right before the first apply attempt."""
_LISTED = b"\0//SWERL-LISTED//\0"
"""Ends the strict ``first`` step's file once the scrub and the listing succeeded
(:func:`_list_while_scrubbing`)."""
_SHOWN = b"\0//SWERL-SHOWN//\0"
"""Follows the head of the ``first`` step's file, printed after :data:`_APPLYING` (no listing
entry starts with ``/``: a path is relative, a record starts with its type letter)."""
SHOWN_BYTES = 65536
"""How much of the ``first`` step's file the apply command prints: a small repository's whole
listing (read from the output, no round trip); a larger one is read back whole, and its
listing never crowds the after-apply listing out of the output cap."""
_CUT = b" bytes of output truncated ...]\n"
"""The end of the channel's notice where it dropped the middle of a long output."""
_APPLIED = b"\0//SWERL-APPLIED//\0"
"""Separates the apply command's own output from the listing run after it (neither a
``find -printf '%P'`` name nor a tracked path can hold it; the last one counts)."""


def _apply(
    sb: Sandbox, patch: str, strict: bool = False, then: str = "", first: str = "", first_file: str = ""
) -> tuple[bool, str, str, bytes | None, bytes | None]:
    """The harness's fallback chain, then its "already applied" reverse check.

    Strict mode runs the chain's ``patch`` step (which, unlike ``git apply``, would
    write into ``.git``) in a scratch copy of HEAD (:data:`SCRATCH_PATCH`). ``then``: a
    command run right after a successful apply in the same round trip, its output read whole;
    ``first``: one run before the first attempt in its round trip (its output must go to a file,
    ``first_file``, whose head the same command prints back: no round trip to read a short one),
    the apply only if it succeeds. -> (applied, every attempt's output, the command that applied
    it or "", ``then``'s output or None when it was not read whole, ``first_file``'s content
    when it ends with :data:`_LISTED` and was printed whole, else None)."""
    _write(sb, CONTAINER_PATCH_FILE, patch.encode())
    out, shown = "", None
    for attempt, cmd in enumerate(GIT_APPLY_CMDS):
        if attempt:
            sb.execute(RESET_TREE, cwd=CONTAINER_WORKDIR)
        run = f"{cmd} {CONTAINER_PATCH_FILE}"
        if strict and not cmd.startswith("git "):
            scratch = shlex.quote(f"/tmp/.swerl-patch-{secrets.token_hex(8)}")
            run = f"bash -c {shlex.quote(SCRATCH_PATCH)} scratch {scratch} {run}"
        if then:
            run = f"{run}; rc=$?; if [ $rc -eq 0 ]; then printf '\\0//SWERL-APPLIED//\\0'; {then} || rc=124; fi; exit $rc"
        timeout = None
        if first and not attempt:  # a scrub that repacks may take long: the time it had on its own
            show = (
                f" && head -c {SHOWN_BYTES} -- {shlex.quote(first_file)} && printf '\\0//SWERL-SHOWN//\\0'"
                if first_file
                else ""
            )
            run, timeout = f"{first} && printf '\\0//SWERL-APPLYING//\\0'{show} && {{ {run}; }}", 600.0
        r = sb.execute(run, cwd=CONTAINER_WORKDIR, timeout=timeout)
        raw, listed = r.raw, None
        if first and not attempt:
            if _APPLYING not in raw:
                raise SandboxError(
                    f"cannot scrub or list the repository (exit {r.returncode}): {r.output[-500:]}"
                )
            raw = raw.partition(_APPLYING)[2]
            if first_file:
                text, found, rest = raw.partition(_SHOWN)
                if not found and not r.truncated:  # the listing was made but cannot be printed
                    raise SandboxError(f"cannot read back the repository's listing: {r.output[-500:]}")
                complete = found and not r.truncated and text.endswith(_LISTED)
                shown = text if complete else None
                raw = rest if found else raw.rpartition(_CUT)[2]
        if then and _APPLIED in raw:
            raw, _, tail = raw.rpartition(_APPLIED)
            listed = tail if r.ok and not r.truncated else None
        if strict and r.returncode == 125:
            raise SandboxError(f"cannot run the patch fallback in a scratch copy: {r.output[-500:]}")
        if then and r.returncode == 124 and _APPLIED in raw:
            raise SandboxError(f"cannot list the repository: {r.output[-500:]}")
        out += f"$ {cmd}\n{raw.decode('utf-8', errors='replace')}"
        if r.ok:
            return True, out, cmd, listed, shown
    reverse = "git apply --check --reverse"
    r = sb.execute(f"{reverse} {CONTAINER_PATCH_FILE}", cwd=CONTAINER_WORKDIR)
    return r.ok, out, reverse if r.ok else "", None, shown


def judge(instance: Instance, patch: str, text: str) -> tuple[GradeStatus, dict[str, str], dict[str, Any]]:
    """swebench's verdict on a log: (status, parsed status map, report entry)."""
    spec = instance.test_spec()
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False, encoding="utf-8") as f:
        f.write(text)
    try:
        status_map, _found = get_logs_eval(spec, f.name)
        pred = {"instance_id": instance.instance_id, "model_patch": patch, "model_name_or_path": "swerl"}
        report = get_eval_report(spec, pred, f.name, include_tests_status=True)[instance.instance_id]
    finally:
        os.unlink(f.name)
    status = GradeStatus.RESOLVED if report["resolved"] else GradeStatus.UNRESOLVED
    return status, status_map, report


def grade(
    instance: Instance,
    patch: str | None,
    *,
    sandbox_factory: SandboxFactory | None = None,
    retries: int = 2,
    timeout: float = DEFAULT_TIMEOUT,
    mode: GradingMode | str = GradingMode.OFFICIAL,
    sandbox: Sandbox | None = None,
) -> GradeResult:
    """Grade ``patch`` for ``instance`` in a fresh sandbox of its image (or in ``sandbox``, see
    :func:`evaluate`; an infra error is then not retried: the sandbox is what failed).

    ``mode``: ``official`` is swebench's verdict; ``strict`` is for training (changes
    outside the source allowlist reverted, a verdict the tests cannot forge, a skip is not a
    pass, see ``swerl.grading.integrity``), its findings in ``GradeResult.integrity``.

    A patch that does not apply is patch_failed, failing tests are unresolved (both
    0.0). An InfraError is retried ``retries`` times, then reported as infra_error
    with reward None. A test run that exceeds ``timeout`` is the patch's doing
    (as in swebench, it is not resolved); a channel that stops answering is infra.
    """
    iid = instance.instance_id
    mode = GradingMode.parse(mode)
    if instance.graded_by_harbor:  # its tests/test.sh, in a fresh sandbox with the patch applied
        from swerl.grading.harbor import grade_harbor

        factory = sandbox_factory or docker_factory(timeout)
        return grade_harbor(instance, patch, sandbox_factory=factory, mode=mode, retries=retries)
    if patch is None or not patch.strip():
        return GradeResult(iid, GradeStatus.EMPTY_PATCH, error="empty patch", mode=mode.value)
    factory = sandbox_factory or docker_factory(timeout)
    errors: list[str] = []
    t0 = time.monotonic()
    for attempt in range(1, (retries if sandbox is None else 0) + 2):
        try:
            ev = evaluate(instance, patch, factory, timeout, mode, sandbox)
        except InfraError as e:
            log.warning("grading %s: attempt %d: infra error: %s", iid, attempt, e)
            errors.append(f"attempt {attempt}: {type(e).__name__}: {e}")
            if isinstance(e, ImageMissing):  # a retry cannot build the image: say so now
                break
            continue
        if not ev.applied:
            timings = {**ev.timings, "total": time.monotonic() - t0}
            return GradeResult(
                iid, GradeStatus.PATCH_FAILED, log=ev.apply_output, timings=timings,
                error="patch does not apply (every harness fallback failed)", attempts=attempt,
                mode=mode.value, integrity=ev.integrity, apply_output=ev.apply_output,
            )  # fmt: skip
        t = time.monotonic()
        status, status_map, report = judge(instance, patch, ev.log)
        timings = {**ev.timings, "judge": time.monotonic() - t, "total": time.monotonic() - t0}
        if ev.integrity is not None:
            if ev.timed_out:
                ev.integrity.refused.append(f"tests timed out after {timeout:g} s")
            reading = strict_reading(
                instance.test_spec(), patch, ev.log, status_map, ev.integrity, ev.verdict
            )
            status = GradeStatus.RESOLVED if reading.resolved else GradeStatus.UNRESOLVED
            status_map, report = reading.tests, reading.report
        tests_status = report.get("tests_status", {})
        error = ""
        if ev.timed_out:
            error = f"tests timed out after {timeout:g} s"
        elif not report["patch_successfully_applied"]:
            error = "no parseable test results in the log" + (
                f" ({report['infra_failure_reason']})" if report.get("infra_failure_reason") else ""
            )
        return GradeResult(
            iid,
            status,
            tests=status_map,
            fail_to_pass=tests_status.get(FAIL_TO_PASS, {"success": [], "failure": []}),
            pass_to_pass=tests_status.get(PASS_TO_PASS, {"success": [], "failure": []}),
            log=ev.log,
            timings=timings,
            error=error,
            attempts=attempt,
            report=report,
            mode=mode.value,
            integrity=ev.integrity,
            apply_command=ev.apply_command,
            apply_output=ev.apply_output,
        )
    return GradeResult(
        iid,
        GradeStatus.INFRA_ERROR,
        timings={"total": time.monotonic() - t0},
        error="\n".join(errors),
        attempts=len(errors),
        mode=mode.value,
    )


def grade_many(
    pairs: Iterable[tuple[Instance, str | None]], max_workers: int = 2, **kwargs: Any
) -> list[GradeResult]:
    """Grade (instance, patch) pairs in threads; results in input order."""
    pairs = list(pairs)
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        return list(pool.map(lambda p: grade(p[0], p[1], **kwargs), pairs))
