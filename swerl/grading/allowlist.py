"""Strict grading's allowlist: the agent's change as the file system holds it after applying.

The patch text's own file names are never read. Before applying, every entry of
the repository (``.git`` included, untracked and ignored files included) is listed
with ``find -printf`` as NUL-separated records; after applying, again. What
differs is the change, byte-exact, however the patch spelled its paths. Only a
regular file with an ordinary mode, outside ``.git``, test directories and test
infrastructure, that is tracked at the base commit or new and not ignored by the
base commit's ignore rules, and that shadows no importable module, counts.
Everything else is reverted to the base commit (deleted when the base has no such
path) with the reason recorded; what cannot be restored (a file inside ``.git``,
an untracked file of the image) refuses the grade.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

# One record per entry: "type mode size mtime inode" NUL path NUL (directories are not listed).
LIST_TREE = r"find . -xdev ! -type d -printf '%y %m %s %T@ %i\0%P\0'"
GIT_INTERNAL_OK = frozenset({".git/index"})
"""What under .git the harness's own ``git apply --3way`` may rewrite; it also writes and
freshens (re-times) objects, which are content-addressed and inert (``.git/objects/``)."""

TEST_DIRS = frozenset({"tests"})
INFRA_NAMES = {
    "conftest.py": "pytest conftest",
    "pytest.ini": "test runner configuration",
    ".pytest.ini": "test runner configuration",
    "pytest.toml": "test runner configuration",
    ".pytest.toml": "test runner configuration",
    "tox.ini": "test runner configuration",
    "setup.cfg": "packaging/test configuration (the environment was built from the base)",
    "pyproject.toml": "packaging/test configuration (the environment was built from the base)",
    "setup.py": "packaging script (the environment was built from the base)",
    "noxfile.py": "test runner configuration",
    "sitecustomize.py": "interpreter start-up hook",
    "usercustomize.py": "interpreter start-up hook",
    ".gitignore": "git ignore rules",
    ".gitattributes": "git attributes (filters, diff drivers)",
    ".gitmodules": "git submodules",
}
INFRA_SUFFIXES = {
    ".pth": "interpreter start-up hook (.pth)",
    ".pyc": "compiled bytecode",
    ".pyo": "compiled bytecode",
    ".so": "compiled extension module",
    ".pyd": "compiled extension module",
    ".egg-link": "package metadata",
}
METADATA_DIRS = (".egg-info", ".dist-info", ".egg")
RUNNER_MODULES = frozenset({"pytest", "_pytest", "pluggy", "py", "iniconfig", "packaging", "attr", "tomli"})
STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {
    "imp",
    "asynchat",
    "asyncore",
    "distutils",
    "smtpd",
}


@dataclass(frozen=True)
class Entry:
    """One file system entry: type (``f`` regular, ``l`` symlink, ...), permission bits, and
    what changes when anything rewrites it."""

    kind: str
    mode: int
    stamp: str


def parse_listing(raw: bytes) -> dict[str, Entry]:
    """``LIST_TREE``'s output -> {path: Entry}; names decoded losslessly (surrogateescape)."""
    parts = raw.split(b"\0")
    out = {}
    for meta, path in zip(parts[0::2], parts[1::2], strict=False):
        if not path:
            continue
        kind, mode, size, mtime, inode = meta.decode().split(" ")
        out[path.decode("utf-8", "surrogateescape")] = Entry(kind, int(mode, 8), f"{size} {mtime} {inode}")
    return out


def infra_reason(path: str, instance_tests: Iterable[str] = ()) -> str:
    """Why ``path`` is not source the agent may change ("" if it is), by its place and name."""
    p, tests = PurePosixPath(path), list(instance_tests)
    if p.parts and p.parts[0] == ".git":
        return "inside .git"
    if path in tests:
        return "test file of the instance"
    test_dirs = {PurePosixPath(t).parent for t in tests if "test" in PurePosixPath(t).parent.name}
    if TEST_DIRS & set(p.parts[:-1]) or any(d in p.parents for d in test_dirs):
        return "under a test directory"
    if "__pycache__" in p.parts[:-1]:
        return "compiled bytecode"
    if any(part.lower().endswith(METADATA_DIRS) for part in p.parts[:-1]):  # importlib.metadata ignores case
        return "package metadata (plugin entry points)"
    if p.name in INFRA_NAMES:
        return INFRA_NAMES[p.name]
    return next((why for suf, why in INFRA_SUFFIXES.items() if p.name.lower().endswith(suf)), "")


def module_at(path: str, after: Iterable[str] = ()) -> tuple[str, str]:
    """The top-level module a path makes importable wherever its directory is on ``sys.path``
    (the repository root, a ``src/``, a directory pytest or ``PYTHONPATH`` prepends), and the
    path of that module: ("", "") if none. The import root is the deepest directory above the
    path that is not a regular package (has no ``__init__.py``); the module below it is a
    ``NAME.py`` file or a package directory with an ``__init__.py`` (a directory without one is
    a namespace portion, which never wins over a module found elsewhere)."""
    parts, present = PurePosixPath(path).parts, set(after)
    i = len(parts) - 1
    while i > 0 and "/".join(parts[:i]) + "/__init__.py" in present:
        i -= 1
    where = "/".join(parts[: i + 1])
    if i == len(parts) - 1:
        name = parts[i][: -len(".py")] if parts[i].endswith(".py") else ""
    else:
        name = parts[i] if f"{where}/__init__.py" in present else ""
    return (name, where) if name.isidentifier() else ("", "")


def top_module(path: str, after: Iterable[str] = ()) -> str:
    """The name :func:`module_at` gives ``path`` ("" if none)."""
    return module_at(path, after)[0]


@dataclass
class Change:
    """What the applied patch changed, and what strict mode does about each path."""

    accepted: list[str] = field(default_factory=list)
    """Source paths kept (created, modified or deleted)."""
    revert: dict[str, str] = field(default_factory=dict)
    """Path -> why it goes back to the base commit."""
    refuse: dict[str, str] = field(default_factory=dict)
    """Path -> why the grade is refused (it cannot be restored)."""
    created_roots: set[str] = field(default_factory=set)
    """Top-level module names of new entries at the repository root (checked for shadowing)."""
    untracked_new: list[str] = field(default_factory=list)
    """Accepted paths the base does not track (to check against the base's ignore rules)."""


def classify(
    before: dict[str, Entry], after: dict[str, Entry], tracked: set[str], instance_tests: Iterable[str]
) -> Change:
    """Decide, path by path, what of the change counts (see the module doc)."""
    tests = list(instance_tests)
    ch = Change()
    for path in sorted(before.keys() | after.keys()):
        b, a = before.get(path), after.get(path)
        if a == b or path in GIT_INTERNAL_OK or path.startswith(".git/objects/"):
            continue
        why = infra_reason(path, tests)
        if not why and a is not None and a.kind != "f":
            why = "a symbolic link" if a.kind == "l" else f"not a regular file (type {a.kind})"
        if not why and b is not None and b.kind != "f":
            why = "replaces a symbolic link of the base" if b.kind == "l" else "replaces a special file"
        if not why and a is not None and b is not None and a.mode != b.mode:
            why = f"mode changed from {b.mode:o} to {a.mode:o}"
        if not why and a is not None and b is None and a.mode & 0o7111:
            why = f"a new executable or special-mode file ({a.mode:o})"
        if not why and b is not None and path not in tracked:
            why = "an untracked file of the image"
        root, where = module_at(path, after) if b is None else ("", "")
        if root and (where in before or f"{where}/__init__.py" in before):
            root = ""  # a module the base already has: adding to it shadows nothing new
        if not why and root and (root in RUNNER_MODULES or root in STDLIB):
            why = f"shadows the installed module {root!r}"
        elif not why and root:
            ch.created_roots.add(root)
        if not why:
            ch.accepted.append(path)
            if path not in tracked and a is not None:
                ch.untracked_new.append(path)
            continue
        if path in tracked or b is None:
            ch.revert[path] = why
        else:  # .git internals, or an image file git cannot give back
            ch.refuse[path] = why
    return ch
