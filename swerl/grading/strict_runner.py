"""The test runner of swerl's strict grading: pytest, started from outside the repository.

Copied into the grading sandbox (next to a key and a config mirror, never inside
``/testbed``) and run by the eval script wherever it calls pytest. Standard
library only, and Python 3.6 syntax: it runs under the task image's interpreter.

It pins what the change cannot configure: the base commit's pytest configuration
(``-c`` and ``--rootdir`` from the mirror of the base commit's config files),
plugin auto-loading off with the base environment's plugins enabled by name, the
launcher's own directory and the working directory off ``sys.path`` while pytest
and its dependencies import. And it reports each test's outcome, chained with an
HMAC keyed by a secret the grader holds, to a descriptor opened before
collection; the closing record is written only after ``pytest.main`` returns.
What the tested code can still do from inside this process is in the README
("What code inside the test process can still do").
"""

import hashlib
import hmac
import json
import os
import sys

CONFIG_NAMES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
SECTIONS = {
    "pyproject.toml": "[tool.pytest.ini_options]",
    "tox.ini": "[pytest]",
    "setup.cfg": "[tool:pytest]",
}
WATCHED = ("pytest", "_pytest", "pluggy")
"""Modules whose functions and classes the tested code may not replace."""


class Channel:
    """Append-only records, each MAC chained to the one before (a dropped or forged line breaks it)."""

    def __init__(self, fd, key):
        self.fd, self.key, self.mac, self.seq = fd, key, "", 0

    def write(self, record):
        record = dict(record, seq=self.seq)
        payload = json.dumps(record, sort_keys=True)
        self.mac = _mac(self.key, (self.mac + payload).encode())
        # what json.dumps({"r": record, "mac": mac}, sort_keys=True) gives, without a second encode
        os.write(self.fd, ('{"mac": "' + self.mac + '", "r": ' + payload + "}\n").encode())
        self.seq += 1


def _mac(key, data):
    """HMAC-SHA256 hex digest (one C call on 3.7+, where ``hmac.digest`` exists)."""
    if _DIGEST is not None:
        return _DIGEST(key, data, "sha256").hex()
    return hmac.new(key, data, hashlib.sha256).hexdigest()


_DIGEST = getattr(hmac, "digest", None)


def snapshot():
    """Every function, class and method of pytest, _pytest and pluggy, by identity."""
    seen = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or name.split(".")[0] not in WATCHED:
            continue
        seen[("module", name)] = mod
        for attr, value in list(vars(mod).items()):
            if callable(value) or isinstance(value, property):
                seen[(name, attr)] = value
            if isinstance(value, type) and getattr(value, "__module__", "") == name:
                for cattr, cvalue in list(vars(value).items()):
                    if callable(cvalue) or isinstance(cvalue, (property, staticmethod, classmethod)):
                        seen[(name, attr, cattr)] = cvalue
    return seen


def _own(value):
    """Whether ``value`` comes from pytest, _pytest or pluggy themselves (they patch their own
    classes while configuring, e.g. the legacypath plugin)."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        value = value.fget
    path = code_file(value) if value is not None else ""
    if path:
        return any(os.path.realpath(path).startswith(d + os.sep) for d in _watched_dirs())
    return str(getattr(value, "__module__", "")).split(".")[0] in WATCHED


def _watched_dirs():
    out = []
    for name in WATCHED:
        mod = sys.modules.get(name)
        path = getattr(mod, "__file__", None)
        if path:
            out.append(os.path.realpath(os.path.dirname(path)))
    return out


def changed_since(seen):
    out = []
    for key, value in seen.items():
        if key[0] == "module":
            now = sys.modules.get(key[1])
        elif len(key) == 2:
            now = vars(sys.modules.get(key[0], object)).get(key[1])
        else:
            cls = vars(sys.modules.get(key[0], object)).get(key[1])
            now = vars(cls).get(key[2]) if isinstance(cls, type) else None
        if now is not value and (key[0] == "module" or not _own(now)):
            out.append(".".join(key[1:]) if key[0] == "module" else ".".join(key))
    return sorted(out)


def code_file(fn):
    code = getattr(fn, "__code__", None) or getattr(vars(type(fn)).get("__call__"), "__code__", None)
    return getattr(code, "co_filename", "") or ""


class Reporter:
    """The pytest plugin: each test's outcome from its reports and from its own call."""

    def __init__(self, channel, seen, changed, root):
        self.channel, self.seen, self.changed, self.root = channel, seen, changed, root
        self.phases, self.raised, self.tampered, self.count, self.config = {}, set(), [], 0, None
        self.startup, self.startup_ids = [], set()
        self.why_file = {}  # code file name -> _foreign's answer (one realpath per file, not per test)

    def _foreign(self, fn):
        path = code_file(fn)
        if path.startswith("<"):
            return "generated code " + path
        why = self.why_file.get(path)
        if why is None:
            full = os.path.realpath(os.path.join(self.root, path))
            rel = os.path.relpath(full, self.root)
            why = self.why_file[path] = "a file the change touched: " + rel if rel in self.changed else ""
        return why

    def pytest_configure(self, config):
        self.config = config
        os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)  # the tests' own pytest runs autoload
        self.startup = [impl.function for _, impl in self.hookimpls(config)]  # kept alive: ids stay unique
        self.startup_ids = set(map(id, self.startup))

    @staticmethod
    def hookimpls(config):
        pm = config.pluginmanager
        for name in dir(pm.hook):
            caller = getattr(pm.hook, name, None)
            for impl in getattr(caller, "get_hookimpls", lambda: [])():
                yield name, impl

    def pytest_runtest_logreport(self, report):
        phases = self.phases.setdefault(report.nodeid, {})
        phases[report.when] = (report.outcome, bool(getattr(report, "wasxfail", False)))
        if report.when == "teardown":
            self._finish(report.nodeid)

    def _finish(self, nodeid):
        phases = self.phases.pop(nodeid)
        setup, call, teardown = (phases.get(w, (None, False)) for w in ("setup", "call", "teardown"))
        if call[0] == "failed":
            status = "FAILED"
        elif "failed" in (setup[0], teardown[0]):
            status = "ERROR"
        elif "skipped" in (setup[0], call[0]):
            status = "XFAIL" if setup[1] or call[1] else "SKIPPED"
        elif call[0] == "passed":
            status = "XPASS" if call[1] else "PASSED"
        else:
            status = "ERROR"  # no call phase reported
        if status == "PASSED" and nodeid in self.raised:
            status = "FAILED"
        self.channel.write({"test": nodeid, "status": status})
        self.count += 1

    def pytest_sessionfinish(self, session):
        self.check(session.config)

    def check(self, config):
        changed = changed_since(self.seen)
        if changed:
            self.tampered.append("the test framework was modified during the run: " + ", ".join(changed[:8]))
        if config is None:
            return
        for name, impl in self.hookimpls(config):
            # Plugins loaded while pytest configured itself are the base's (builtins, entry
            # points, initial conftests); one registered later from the change's code is not.
            why = "" if id(impl.function) in self.startup_ids else self._foreign(impl.function)
            if why:
                self.tampered.append(f"hook {name} registered by {why}")

    def close(self, exit_code):
        if not self.tampered:
            self.check(self.config)
        self.channel.write(
            {"end": True, "exit": int(exit_code), "tests": self.count, "tampered": sorted(set(self.tampered))}
        )


def _wrap_call(reporter):
    import pytest

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_call(item):
        try:
            why = reporter._foreign(item.obj)
        except Exception:  # items without a Python function (doctests, other plugins' items)
            why = ""
        outcome = yield
        if outcome.excinfo is not None or why:
            reporter.raised.add(item.nodeid)
        if why:
            reporter.tampered.append(f"test {item.nodeid} was replaced by {why}")

    return pytest_runtest_call


def pinned(args, mirror, cwd):
    """``args`` with the base commit's configuration file and rootdir, as pytest would find them."""
    if any(
        a in ("-c", "--rootdir", "--config-file") or a.startswith(("--rootdir=", "--config-file="))
        for a in args
    ):
        return args
    paths = [os.path.join(cwd, a.split("::")[0]) for a in args if not a.startswith("-")]
    paths = [p for p in paths if os.path.exists(p)] or [cwd]
    ancestor = os.path.commonpath([os.path.abspath(p) for p in paths])
    if not os.path.isdir(ancestor):
        ancestor = os.path.dirname(ancestor)
    here = ancestor
    while True:
        rel = os.path.relpath(here, cwd)
        if rel.startswith(".."):
            break
        for name in CONFIG_NAMES:
            copy = os.path.join(mirror, rel, name)
            if os.path.isfile(copy):
                with open(copy, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                if name not in SECTIONS or any(ln.strip() == SECTIONS[name] for ln in text.splitlines()):
                    return ["-c", copy, "--rootdir=" + here, *args]
        if here == cwd:
            break
        here = os.path.dirname(here)
    empty = os.path.join(os.path.dirname(mirror), "pytest.ini")
    with open(empty, "w") as f:
        f.write("[pytest]\n")
    return ["-c", empty, "--rootdir=" + cwd, *args]


def _inside(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def base_plugins():
    """Names of the pytest11 entry points installed now (before the run's code imports)."""
    try:
        from importlib import metadata
    except ImportError:
        try:
            import importlib_metadata as metadata
        except ImportError:
            return None
    names = set()
    for dist in metadata.distributions():
        for ep in getattr(dist, "entry_points", ()):
            if ep.group == "pytest11":
                names.add(ep.name)
    return sorted(names)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    mode, args = sys.argv[1], sys.argv[2:]
    os.environ.pop("PYTHONSAFEPATH", None)  # safe-path (3.11+) for this process, not the tests' own
    cwd = os.getcwd()
    key_file = os.path.join(here, "key")
    with open(key_file, "rb") as f:
        key = f.read().strip()
    os.unlink(key_file)
    fd = os.open(os.path.join(here, "verdict"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with open(os.path.join(here, "changed.json"), encoding="utf-8") as f:
        changed = set(json.load(f))
    # Nothing of the repository or of this directory is importable while pytest starts;
    # afterwards the path is the script's own (PYTHONPATH entries included), less this directory.
    kept = [p for p in sys.path if p and os.path.abspath(p) != here]
    sys.path[:] = [p for p in kept if not _inside(os.path.abspath(p), cwd)]
    import pytest

    plugins = base_plugins()  # from the environment's own metadata, not the repository's
    sys.path[:] = kept

    version = tuple(int(x) for x in pytest.__version__.split(".")[:2] if x.isdigit())
    extra = []
    if plugins is not None and version >= (5, 0):
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        for name in plugins:
            extra += ["-p", name]
    seen = snapshot()
    if mode == "module":  # `python -m pytest` puts the working directory first
        sys.path.insert(0, cwd)
    reporter = Reporter(Channel(fd, key), seen, changed, cwd)
    reporter.pytest_runtest_call = _wrap_call(reporter)
    channel = reporter.channel
    channel.write({"start": True, "plugins": plugins or [], "pytest": pytest.__version__})
    code = pytest.main(extra + pinned(args, os.path.join(here, "base"), cwd), plugins=[reporter])
    reporter.close(int(code))
    sys.stdout.flush()
    sys.exit(int(code))


if __name__ == "__main__":
    main()
