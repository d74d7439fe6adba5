"""Runs INSIDE a sandbox (its python3 + pytest, nothing of swerl): many test runs in one container.

``python3 probe.py JOB.json OUT.json``. The parent imports pytest once; each run is a
forked child that calls ``pytest.main`` with a result-collecting plugin, so a run costs
collection and the tests, not an interpreter. Jobs:

- ``baseline``: the whole suite ``runs`` times; the first run also records, per test,
  which code objects of the repository's source it called (call events only: cheap).
- ``mutants``: for each mutant, splice its lines into the file, run the given tests,
  restore the file byte for byte. A run past ``timeout`` is killed and reported. A
  mutant with ``confirm: N`` whose first run failed some of its tests and at most
  ``max_fail`` of them runs N times more in the same place (the runs that must agree),
  so a survivor costs no second sandbox and no second collection.

Bytecode is never written, so a mutated module cannot be served from a stale .pyc.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time

sys.dont_write_bytecode = True
import pytest  # noqa: E402


class Collect:
    """pytest plugin: one outcome per test id (passed / failed / skipped / xfail)."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        """Why each failed test failed (the crash line pytest reports), for problem statements."""

    def pytest_runtest_logreport(self, report) -> None:
        nid = report.nodeid
        if hasattr(report, "wasxfail"):
            self.outcomes[nid] = "xfail"
        elif report.failed:
            self.outcomes[nid] = "failed"
            crash = getattr(report.longrepr, "reprcrash", None)
            self.errors.setdefault(nid, (crash.message if crash else str(report.longrepr))[-400:])
        elif report.skipped:
            self.outcomes.setdefault(nid, "skipped")
        elif report.when == "call":
            self.outcomes.setdefault(nid, "passed")

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.outcomes[report.nodeid or "<collection>"] = "error"
            self.errors.setdefault(report.nodeid or "<collection>", why_uncollected(report))


def why_uncollected(report) -> str:
    """The line saying why a file could not be collected (``E   ImportError: ...``), not the traceback."""
    text = str(report.longrepr)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    said = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    return (said[-1] if said else lines[-1] if lines else "collection failed")[-300:]


class Tracer:
    """Which repository code objects each test calls: test id -> {"path:firstline"}."""

    def __init__(self, roots: list[str]) -> None:
        self.roots = tuple(os.path.abspath(r) + os.sep for r in roots)
        self.current: set[str] | None = None
        self.calls: dict[str, set[str]] = {}
        self.seen: dict[object, str | None] = {}

    def trace(self, frame, event, arg):
        code = frame.f_code
        key = self.seen.get(code, 0)
        if key == 0:
            fn = os.path.abspath(code.co_filename)
            key = f"{os.path.relpath(fn)}:{code.co_firstlineno}" if fn.startswith(self.roots) else None
            self.seen[code] = key
        if key is not None and self.current is not None:
            self.current.add(key)
        return None

    def pytest_runtest_protocol(self, item, nextitem):
        self.current = self.calls.setdefault(item.nodeid, set())
        sys.settrace(self.trace)
        import threading

        threading.settrace(self.trace)

    def pytest_runtest_logfinish(self, nodeid, location):
        sys.settrace(None)
        self.current = None


def run_pytest(
    args: list[str], timeout: float, trace_roots: list[str] | None = None, opts: tuple[str, ...] = ()
) -> dict:
    """One pytest run in a forked child; returns {"outcomes", "seconds", "status"[, "calls"]}."""
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    t = time.monotonic()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            os.setpgid(0, 0)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            collect = Collect()
            plugins: list[object] = [collect]
            tracer = Tracer(trace_roots) if trace_roots else None
            if tracer:
                plugins.append(tracer)
            pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", *opts, *args], plugins=plugins)
            data = {"outcomes": collect.outcomes, "errors": collect.errors}
            if tracer:
                data["calls"] = {k: sorted(v) for k, v in tracer.calls.items()}
            with open(out, "w") as f:
                json.dump(data, f)
            code = 0
        finally:
            os._exit(code)
    return _await_child(pid, out, t, t + timeout, poll=0.005)


def _await_child(pid: int, out: str, started: float, deadline: float, poll: float) -> dict:
    """Wait for a forked run (killing its group past ``deadline``) and read what it wrote to ``out``."""
    status = "ok"
    while True:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            status = "timeout"
            break
        time.sleep(poll)
    result = {"status": status, "seconds": time.monotonic() - started, "outcomes": {}}
    try:
        with open(out) as f:
            result.update(json.load(f))
    except (OSError, ValueError):
        if status == "ok":
            result["status"] = "crashed"
    os.unlink(out)
    return result


# ------------------------------------------------------------ in-process mode
# Collect once in this process, then per mutant fork: swap the mutated definition's code objects
# into the live functions (every reference sees them) and run only the chosen, already collected
# items. No file is written and nothing is re-collected, so a mutant costs its tests and a fork.
def _unwrap(obj):
    """The plain functions inside ``obj`` (a function, method wrapper, property, decorated callable)."""
    seen = 0
    out = []
    stack = [obj]
    while stack and seen < 20:
        seen += 1
        o = stack.pop()
        if hasattr(o, "__code__") and hasattr(o, "__defaults__"):
            out.append(o)
            continue
        if isinstance(o, property):
            stack.extend(f for f in (o.fget, o.fset, o.fdel) if f is not None)
            continue
        for attr in ("__wrapped__", "__func__", "func"):
            inner = getattr(o, attr, None)
            if inner is not None and inner is not o:
                stack.append(inner)
                break
    return out


def _transplant(old, new, swapped: list) -> None:
    if isinstance(old, type) and isinstance(new, type):
        for name, val in vars(new).items():
            if name in vars(old) and name not in ("__dict__", "__weakref__", "__doc__", "__module__"):
                _transplant(vars(old)[name], val, swapped)
        return
    olds, news = _unwrap(old), _unwrap(new)
    if len(olds) != len(news):
        raise ValueError("definitions do not pair up")
    for o, n in zip(olds, news, strict=False):
        if o.__code__.co_freevars != n.__code__.co_freevars:
            raise ValueError("free variables differ")
        if o.__code__ is not n.__code__:
            o.__code__ = n.__code__
            o.__defaults__ = n.__defaults__
            o.__kwdefaults__ = n.__kwdefaults__
            swapped.append(o)


def swap_in(m: dict) -> int:
    """Put mutant ``m`` into the live modules; the number of functions changed (0: could not)."""
    path = os.path.abspath(m["path"])
    mod = next(
        (x for x in list(sys.modules.values()) if os.path.abspath(getattr(x, "__file__", "") or "") == path),
        None,
    )
    if mod is None:
        return 0
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    s0, s1 = m["scope"][0] - 1, m["scope"][1]
    segment = "\n" * s0 + "".join(lines[s0 : m["lo"]]) + m["new"] + "".join(lines[m["hi"] : s1])
    ns = dict(vars(mod))
    exec(compile(segment, path, "exec"), ns)
    top = m["top"]
    swapped: list = []
    _transplant(vars(mod)[top], ns[top], swapped)
    return len(swapped)


def run_items(items: list, collect: Collect) -> None:
    from _pytest.runner import runtestprotocol

    for i, item in enumerate(items):
        for rep in runtestprotocol(item, nextitem=items[i + 1] if i + 1 < len(items) else None, log=False):
            collect.pytest_runtest_logreport(rep)


def fork_run(body, timeout: float) -> dict:
    """``body()`` -> dict in a forked child, killed past ``timeout``; adds status and seconds."""
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    t = time.monotonic()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)
            data = body()
            with open(out, "w") as f:
                json.dump(data, f)
            code = 0
        except BaseException as e:
            try:
                with open(out, "w") as f:
                    json.dump(
                        {"status": "noswap" if isinstance(e, NoSwap) else "crashed", "reason": repr(e)[:300]},
                        f,
                    )
            except BaseException:
                pass
        finally:
            os._exit(code)
    return _await_child(pid, out, t, t + timeout, poll=0.002)


class NoSwap(Exception):
    pass


class Driver:
    """pytest plugin that replaces the run loop: the job's runs over the collected items."""

    def __init__(self, job: dict, results: list) -> None:
        self.job, self.results = job, results
        self.uncollected: dict[str, str] = {}
        """Test files (node ids) whose collection failed, and why."""

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.uncollected[report.nodeid or "<collection>"] = why_uncollected(report)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session) -> bool:
        job = self.job
        by_id = {it.nodeid: it for it in session.items}
        timeout = float(job.get("timeout", 60))
        if job["kind"] == "baseline":
            for i in range(int(job.get("runs", 3))):
                roots = job.get("source_roots") if i == 0 else None
                self.results.append(
                    fork_run(
                        lambda roots=roots: self._run(session.items, roots),
                        float(job.get("baseline_timeout", 600)),
                    )
                )
            for run in self.results:
                run["uncollected"] = self.uncollected
            return True
        for m in job["mutants"]:
            items = [by_id[t] for t in m["tests"] if t in by_id]

            def body(m=m, items=items) -> dict:
                if not swap_in(m):
                    raise NoSwap("no function changed")
                return self._run(items, None)

            self.results.append({"id": m["id"], "runs": repeat(m, lambda body=body: fork_run(body, timeout))})
        return True

    def _run(self, items: list, roots: list | None) -> dict:
        collect = Collect()
        tracer = Tracer(roots) if roots else None
        if tracer:
            import threading

            for item in items:
                tracer.current = tracer.calls.setdefault(item.nodeid, set())
                sys.settrace(tracer.trace)
                threading.settrace(tracer.trace)  # code a test runs in its threads is code it calls
                try:
                    run_items([item], collect)
                finally:
                    sys.settrace(None)
                    threading.settrace(None)
        else:
            run_items(items, collect)
        data = {"outcomes": collect.outcomes, "errors": collect.errors}
        if tracer:
            data["calls"] = {k: sorted(v) for k, v in tracer.calls.items()}
        return data


def repeat(m: dict, run) -> list:
    """``m["runs"]`` runs of ``run()``, then ``m["confirm"]`` more if the first one is a candidate."""
    runs = [run() for _ in range(int(m.get("runs", 1)))]
    first = runs[0]
    failed = [t for t in m["tests"] if first.get("outcomes", {}).get(t) != "passed"]
    if m.get("confirm") and first["status"] == "ok" and 0 < len(failed) <= float(m.get("max_fail", 0)):
        runs += [run() for _ in range(int(m["confirm"]))]
    return runs


LOG = "/tmp/swerl_probe.log"


def main_inproc(job: dict) -> list | dict:
    """The job's results; or, when pytest stopped before running anything (a usage error, a conftest
    that does not import), ``{"fatal": ..., "exit": code}`` with what pytest said."""
    results: list = []
    log = os.open(LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)
    code = pytest.main(
        ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", *job.get("pytest_args", []), *job["files"]],
        plugins=[Driver(job, results)],
    )
    if not results and (job["kind"] == "baseline" or job.get("mutants")):
        with open(LOG, errors="replace") as f:
            said = [ln.rstrip() for ln in f.read().splitlines() if ln.strip()]
        return {"fatal": "\n".join(said[-12:])[-1500:], "exit": int(code)}
    return results


def main() -> int:
    job_path, out_path = sys.argv[1], sys.argv[2]
    with open(job_path) as f:
        job = json.load(f)
    os.chdir(job["root"])
    # as `python3 -m pytest` from the root (the eval script's run) has it: the root, then PYTHONPATH's entries
    for p in reversed(["."] + [p for p in job.get("pythonpath", []) if p != "."]):
        sys.path.insert(0, os.path.abspath(p))
    os.environ["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in job.get("pythonpath", []))
    timeout = float(job.get("timeout", 60))
    opts = tuple(job.get("pytest_args", ()))
    results: list = []
    if job.get("inproc"):
        out = main_inproc(job)
        with open(out_path, "w") as f:
            json.dump(out, f)
        return 0
    if job["kind"] == "baseline":
        for i in range(int(job.get("runs", 3))):
            roots = job.get("source_roots") if i == 0 else None
            results.append(run_pytest(job["tests"], float(job.get("baseline_timeout", 600)), roots, opts))
    else:
        for m in job["mutants"]:
            path = m["path"]
            with open(path, "rb") as f:
                original = f.read()
            lines = original.decode("utf-8").splitlines(keepends=True)
            mutated = "".join(lines[: m["lo"]]) + m["new"] + "".join(lines[m["hi"] :])
            try:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(mutated)
                runs = repeat(m, lambda m=m: run_pytest(m["tests"], timeout, None, opts))
            finally:
                with open(path, "wb") as f:
                    f.write(original)
            results.append({"id": m["id"], "runs": runs})
    with open(out_path, "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
