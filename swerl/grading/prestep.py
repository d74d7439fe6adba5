"""The pre-test window's watcher of swerl's strict grading: what the eval script's steps before
the test command (a reinstall of the package, which runs the change's code as root) wrote.

Copied into the runner's directory and started by the eval script (a bash coprocess: its pipes
are close-on-exec, so only the script's own shell can talk to it) right before the first step
that can run code the change controls, with ``-I -S``: nothing of the environment, no start-up
file. Standard library only, Python 3.6 syntax (the task image's interpreter). At the start it
takes both keys off the disk (the window never sees them), lists what the window could rewrite
(the repository, the interpreters' stdlib and site directories, their binaries and libraries,
the tools the script runs after it, this directory) with each file's inode and ctime (which no
code can set back), and hashes the start-up files an honest reinstall rewrites identically.
When the shell says the test command is next, it lists them again and reports every
difference, the reinstalled distribution's own files and the processes the window left running,
as a record signed with the window key (the grader judges it: ``swerl.grading.window``), removes
bytecode caches written in the window, adds the files the window wrote in the repository to the
runner's changed files, and puts the runner's key back for the runner to take.
"""

import hashlib
import hmac
import json
import os
import subprocess
import sys
import time

INFO = (
    "import json, site, sys, sysconfig; p = sysconfig.get_paths(); "
    "print(json.dumps({'exe': sys.executable, 'dirs': [p.get(k) for k in "
    "('stdlib', 'platstdlib', 'purelib', 'platlib', 'scripts')] + site.getsitepackages(), "
    "'libdir': sysconfig.get_config_var('LIBDIR')}))"
)
TOOLS = ("git", "sed", "awk", "bash", "sh", "env", "python", "python3", "pytest", "py.test")
LOADER = ("/etc/ld.so.preload", "/etc/ld.so.cache", "/etc/ld.so.conf")
STARTUP = (".pth", "sitecustomize.py", "usercustomize.py")


def _not_dumpable():
    """As the strict runner's (a standalone script too): prctl through ``_ctypes`` itself."""
    try:
        import _ctypes

        class Int(_ctypes._SimpleCData):
            _type_ = "i"

        class Function(_ctypes.CFuncPtr):
            _flags_, _restype_ = _ctypes.FUNCFLAG_CDECL, Int

        class Library:
            _handle = _ctypes.dlopen(None, 0)

        Function(("prctl", Library()))(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except Exception:
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
        except Exception:
            pass


def _take(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
        os.unlink(path)
        return data
    except OSError:
        return b""


def _interpreters():
    """Each interpreter the test command may start (this one, ``python``/``python3`` on PATH,
    pytest's shebang), with its directories: asked of each one now, before the window."""
    exes = {os.path.realpath(sys.executable)}
    for name in ("python", "python3", "pytest", "py.test"):
        path = _which(name)
        if path and name.startswith("py."):
            path = None
        if path and name == "pytest":
            try:
                with open(path, "rb") as f:
                    head = f.readline().decode("utf-8", "replace")
                words = head[2:].split() if head.startswith("#!") else []
                path = (
                    (words[1] if len(words) > 1 and words[0].endswith("/env") else words[0])
                    if words
                    else None
                )
                path = _which(path) if path and "/" not in path else path
            except OSError:
                path = None
        if path:
            exes.add(os.path.realpath(path))
    out = []
    for exe in sorted(exes):
        try:
            text = subprocess.check_output(
                [exe, "-I", "-S", "-c", INFO], stderr=subprocess.DEVNULL, timeout=60
            )
            out.append(json.loads(text.decode()))
        except Exception:
            out.append({"exe": exe, "dirs": [], "libdir": None})
    return out


def _which(name):
    for d in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(d, name)
        if d and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _files(top, recurse=True):
    """{path: (inode, ctime_ns, kind)} under ``top`` (a file: itself), symlinks not followed."""
    out = {}
    try:
        st = os.lstat(top)
    except OSError:
        return out
    if not os.path.isdir(top) or os.path.islink(top):
        out[top] = (st.st_ino, st.st_ctime_ns, _kind(st))
        return out
    for where, subdirs, names in os.walk(top):
        if where == os.path.join(top, ".git", "objects"):
            subdirs[:] = []
            continue
        if not recurse:
            subdirs[:] = []
        for name in names + [d for d in subdirs if os.path.islink(os.path.join(where, d))]:
            path = os.path.join(where, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            out[path] = (st.st_ino, st.st_ctime_ns, _kind(st))
    return out


def _kind(st):
    import stat

    return "l" if stat.S_ISLNK(st.st_mode) else "f" if stat.S_ISREG(st.st_mode) else "o"


def _hash(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _startup(path):
    name = os.path.basename(path)
    return name.endswith(STARTUP) or name.startswith("__editable__") or name == "entry_points.txt"


def _pth_paths(path, site_dir):
    """The directories a ``.pth`` file adds (None when it has an executable ``import`` line)."""
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if not line.strip() or line.startswith("#"):
                    continue
                if line.startswith(("import ", "import\t")):
                    return None
                out.append(os.path.realpath(os.path.join(site_dir, line.rstrip())))
    except OSError:
        return None
    return out


def _own(site_dirs, repo):
    """Files of the distributions installed from the repository (direct_url.json naming it, an
    egg-link to it): their dist-info directory, the files their RECORD lists."""
    own = set()
    for d in site_dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            path = os.path.join(d, name)
            if name.endswith(".dist-info"):
                try:
                    with open(os.path.join(path, "direct_url.json"), encoding="utf-8") as f:
                        url = json.load(f).get("url", "")
                except (OSError, ValueError, AttributeError):
                    continue
                if url.rstrip("/") not in ("file://" + repo, "file:" + repo):
                    continue
                own.update(p for p in _files(path))
                try:
                    with open(os.path.join(path, "RECORD"), encoding="utf-8") as f:
                        for line in f:
                            rel = line.rsplit(",", 2)[0]
                            if rel:
                                own.add(os.path.normpath(os.path.join(d, rel)))
                except OSError:
                    pass
            elif name.endswith(".egg-link"):
                try:
                    with open(path, encoding="utf-8") as f:
                        first = f.readline().strip()
                except OSError:
                    continue
                if os.path.realpath(first) == repo:
                    own.add(path)
    return own


def _pids():
    return {int(p) for p in os.listdir("/proc") if p.isdigit()}


def _describe(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except (OSError, IndexError):
        return None, None
    return state, cmd


def _ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _same_root(pid, root):
    try:
        st = os.stat(f"/proc/{pid}/root")
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (root.st_dev, root.st_ino)


def _entered(pid, before, root):
    """Whether ``pid`` belongs to a session entered into the sandbox from outside after the
    window opened (``docker exec``, ``kubectl exec``: the grader's own polls): its oldest
    ancestor in the sandbox is new and its parent is outside (PID 0 in the sandbox's own PID
    namespace; a process of another root, not the host's init, otherwise). A process the
    window started descends from the eval script's shell, or was adopted by an init."""
    seen = set()
    while pid not in before and pid not in seen:
        seen.add(pid)
        try:
            parent = _ppid(pid)
        except (OSError, ValueError, IndexError):
            return False
        if parent == 0:
            return pid != 1
        if parent == 1 and not _same_root(1, root):
            return False  # adopted by the host's init (a daemon of the window's)
        if not _same_root(parent, root):
            return True
        pid = parent
    return False


def _leftovers(before, private, settle=0.3):
    """Processes started in the window and still alive (not zombies), less sessions entered from
    outside (:func:`_entered`): every one where the PID namespace is the sandbox's own
    (``private``); else those in this sandbox's root. Asked twice ``settle`` seconds apart: a
    process must be there both times (a poll's short-lived ``stat`` is not a leftover)."""
    me, root = os.getpid(), os.stat("/proc/self/root")

    def alive():
        out = {}
        for pid in sorted(_pids() - before - {me}):
            state, cmd = _describe(pid)
            if state is None or state in ("Z", "X"):
                continue
            if (private or _same_root(pid, root)) and not _entered(pid, before, root):
                out[pid] = cmd
        return out

    first = alive()
    if first and settle:
        time.sleep(settle)
        second = alive()
        first = {pid: cmd for pid, cmd in first.items() if second.get(pid) == cmd}
    return [f"{pid} {cmd[:200]}" for pid, cmd in sorted(first.items())]


def _private_pids():
    try:
        return os.readlink("/proc/1/ns/pid") == os.readlink("/proc/self/ns/pid")
    except OSError:
        return False


class Watch:
    """The listing at the window's start, and what differs from it at its end."""

    def __init__(self, run, repo, tests):
        self.run, self.repo, self.tests = run, repo, set(tests)
        self.interps = _interpreters()
        site_dirs, files, lists = set(), set(), set()
        for info in self.interps:
            site_dirs.update(d for d in info["dirs"][2:] if d)
            lists.update(d for d in info["dirs"] if d)
            files.add(info["exe"])
            if info.get("libdir"):
                files.add(("flat", info["libdir"]))
        for name in TOOLS:
            path = _which(name)
            if path:
                files.update({path, os.path.realpath(path)})
        files.update(LOADER)
        files.add("/etc/ld.so.conf.d")
        try:
            with open("/proc/self/maps") as f:
                files.update(ln.split()[-1] for ln in f if ln.rstrip().endswith(".so") or ".so." in ln)
        except OSError:
            pass
        self.site_dirs = sorted(d for d in site_dirs if not _inside(d, repo))
        self.tops = [*sorted(d for d in lists if not _inside(d, repo)), run]
        self.singles = sorted(f for f in files if not isinstance(f, tuple) and f.startswith("/"))
        self.flat = sorted(f[1] for f in files if isinstance(f, tuple))
        self.before = self.listing()
        self.hashes = {p: _hash(p) for p in self.before["outside"] if _startup(p)}
        self.pths = set()
        for p in self.before["outside"]:
            if p.endswith(".pth"):
                self.pths.update(_pth_paths(p, os.path.dirname(p)) or [])
        self.own_before = _own(self.site_dirs, repo)
        self.pids = _pids()
        self.private = _private_pids()

    def listing(self):
        outside = {}
        for top in self.tops:
            outside.update(_files(top))
        for top in self.flat:
            outside.update(_files(top, recurse=False))
        for f in self.singles:
            outside.update(_files(f))
        return {
            "repo": _files(self.repo),
            "outside": {p: v for p, v in outside.items() if not _inside(p, self.repo)},
        }

    def settle(self):
        """Wait until the file system's clock is past every ctime listed (a coarse clock ticks
        in milliseconds): a write in the window then always changes a file's ctime."""
        newest = max([v[1] for part in self.before.values() for v in part.values()] or [0])
        probe = os.path.join(self.run, ".clock")
        for _ in range(3000):
            with open(probe, "w") as f:
                f.write("x")
            if os.lstat(probe).st_ctime_ns > newest:
                break
            time.sleep(0.001)
        os.unlink(probe)

    def report(self):
        after = self.listing()
        own = _own(self.site_dirs, self.repo)
        rec = {"repo": [], "outside": [], "bytecode": 0}
        for part in ("repo", "outside"):
            then, now = self.before[part], after[part]
            for path in sorted(set(then) | set(now)):
                a, b = then.get(path), now.get(path)
                if a == b or path.startswith(self.run + os.sep + ".clock"):
                    continue
                if "__pycache__" in path.split(os.sep) and (b or a)[2] == "f":
                    if b is not None:  # a cache: what the interpreter compiles again from source
                        os.unlink(path)
                        rec["bytecode"] += 1
                    continue
                what = "removed" if b is None else "new" if a is None else "changed"
                if part == "repo":
                    rec["repo"].append([os.path.relpath(path, self.repo), what, (b or a)[2]])
                    continue
                entry = {"path": path, "what": what, "kind": (b or a)[2]}
                entry["own"] = path in (own if b is not None else self.own_before)
                if b is not None and _startup(path):
                    entry["same"] = _hash(path) == self.hashes.get(path)
                    if path.endswith(".pth"):
                        adds = _pth_paths(path, os.path.dirname(path))
                        entry["paths_ok"] = adds is not None and all(
                            _inside(p, self.repo) or p in self.pths for p in adds
                        )
                    if os.path.basename(path) == "entry_points.txt":
                        with open(path, encoding="utf-8", errors="replace") as f:
                            entry["plugins"] = "[pytest11]" in f.read()
                rec["outside"].append(entry)
        rec["leftover"] = _leftovers(self.pids, self.private)
        rec["watched"] = len(after["outside"])
        rec["interpreters"] = [i["exe"] for i in self.interps]
        return rec


def _inside(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def main():
    run, repo = sys.argv[1], os.path.realpath(sys.argv[2])
    _not_dumpable()
    wkey, key = _take(os.path.join(run, "window-key")).strip(), _take(os.path.join(run, "key"))
    with open(os.path.join(run, "window.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    t = time.monotonic()
    watch = Watch(run, repo, cfg.get("tests", []))
    watch.settle()
    opened = time.monotonic() - t
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    if sys.stdin.readline().strip() != "check":
        return
    t = time.monotonic()
    rec = watch.report()
    rec["seconds"] = [round(opened, 4), round(time.monotonic() - t, 4)]
    payload = json.dumps(rec, sort_keys=True).encode()
    mac = hmac.new(wkey, payload, hashlib.sha256).hexdigest().encode()
    fd = os.open(os.path.join(run, "window"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, payload + b"\n" + mac)
    os.close(fd)
    changed_path = os.path.join(run, "changed.json")
    with open(changed_path, encoding="utf-8") as f:
        changed = json.load(f)
    wrote = [
        p
        for p, what, _ in rec["repo"]
        if what != "removed" and p not in watch.tests and p.split("/")[0] != ".git"
    ]
    wrote += [
        e["path"] for e in rec["outside"] if e["own"] and e["path"].endswith(".py") and e["what"] != "removed"
    ]
    with open(changed_path + ".new", "w", encoding="utf-8") as f:
        json.dump(sorted(set(changed) | set(wrote)), f)
    os.rename(changed_path + ".new", changed_path)
    if key:
        fd = os.open(os.path.join(run, "key"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, key)
        os.close(fd)
    sys.stderr.write(
        f"swerl: pre-test window: {len(rec['repo'])} written in the repository, "
        f"{len(rec['outside'])} outside, {len(rec['leftover'])} left running\n"
    )
    sys.stdout.write("done\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
