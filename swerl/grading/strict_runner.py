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

import itertools
import json
import operator
import os
import re
import select
import sys
import time
import types

CONFIG_NAMES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
SECTIONS = {
    "pyproject.toml": "[tool.pytest.ini_options]",
    "tox.ini": "[pytest]",
    "setup.cfg": "[tool:pytest]",
}
WATCHED = ("pytest", "_pytest", "pluggy", "unittest")
"""Modules whose functions and classes the tested code may not replace (unittest's too: pytest
runs ``TestCase`` tests through it, and a failed ``assertEqual`` never reaches pytest as an
exception)."""

ALL = frozenset(("*",))
HANDS = {
    "inspect": ALL,
    "linecache": ALL,
    "tokenize": ALL,
    "pathlib": ALL,
    "ctypes": ALL,
    "traceback": frozenset(
        (
            "walk_stack",
            "walk_tb",
            "_walk_tb_with_full_positions",
            "extract_stack",
            "format_stack",
            "print_stack",
            "extract",
            "_extract_from_extended_frame_gen",
            "extended_frame_gen",
            "line",
            "_original_line",
            "_set_lines",
        )
    ),
    "logging": frozenset(("currentframe", "<lambda>")),
    "warnings": frozenset(("formatwarning", "_formatwarnmsg_impl")),
    "codecs": frozenset(("open",)),
    "pkgutil": frozenset(("get_data",)),
    "importlib._bootstrap_external": frozenset(("get_data", "get_source")),
    "signal": frozenset(("signal",)),
    "dis": ALL,
}
"""Standard-library functions (by module: all of them, or these) whose job is to hand the running
stack's frames, its source text, or a file's text to their caller: a frame or a read they ask for
is their caller's. Functions that take frames only for their own use (logging's ``findCaller``,
``warnings``' stack level, ``namedtuple``, ``enum``, ``typing``, ``TracebackException`` and
``extract_tb`` formatting a caught exception's own traceback) are not here: what they ask for is
theirs, and honest code calls them all the time."""
FRAME_ATTRS = {
    "f_code": "read a frame's code",
    "tb_frame": "took a frame from a traceback (tb_frame)",
    "gi_frame": "took a generator's frame (gi_frame)",
    "cr_frame": "took a coroutine's frame (cr_frame)",
    "ag_frame": "took an async generator's frame (ag_frame)",
}
"""The attribute reads that hand out a frame (or show one is held) and raise an audit event;
``f_back``, ``f_locals`` and ``f_globals`` raise none, so the first frame is what is watched."""


class Channel:
    """The test process's side: plain records on a pipe to the supervisor, which alone holds
    the key (the test process never has it: not in memory, environment, argv, files or
    descriptors)."""

    def __init__(self, fd):
        self.fd = fd

    def write(self, record):
        os.write(self.fd, (json.dumps(record, sort_keys=True) + "\n").encode())


class Signer:
    """The supervisor's side: append-only records, each MAC chained to the one before (a
    dropped or forged line breaks it). hashlib and hmac are imported here, in the parent after
    the fork, not before it: the test process never needs them."""

    def __init__(self, fd, key):
        import hashlib
        import hmac

        self.fd, self.key, self.mac, self.seq = fd, key, "", 0
        digest = getattr(hmac, "digest", None)  # one C call on 3.7+
        if digest is not None:
            self.hexmac = lambda data: digest(key, data, "sha256").hex()
        else:
            self.hexmac = lambda data: hmac.new(key, data, hashlib.sha256).hexdigest()

    def write(self, record):
        record = dict(record, seq=self.seq)
        payload = json.dumps(record, sort_keys=True)
        self.mac = self.hexmac((self.mac + payload).encode())
        # what json.dumps({"r": record, "mac": mac}, sort_keys=True) gives, without a second encode
        os.write(self.fd, ('{"mac": "' + self.mac + '", "r": ' + payload + "}\n").encode())
        self.seq += 1


def snapshot(extra=()):
    """Every function, class and method of pytest, _pytest and pluggy (and ``extra`` modules:
    the runner's own), by identity; a function's body, defaults and closure by identity too
    (assigning ``__code__`` keeps the function object). And every builtin (``__import__``,
    ``isinstance``, ...): the test code calls them by name, so package code that replaces one
    changes what every test reads."""
    seen = Seen()
    mod_names, mods = [], []
    for name, mod in list(sys.modules.items()):
        if mod is None or (name.split(".")[0] not in WATCHED and name not in extra and name != "builtins"):
            continue
        mod_names.append(name)
        mods.append(mod)
        members = vars(mod)
        names, values = [], []
        for attr, value in list(members.items()):
            if callable(value) or isinstance(value, property):
                names.append(attr)
                values.append(value)
            if isinstance(value, type) and getattr(value, "__module__", "") == name != "builtins":
                cnames, cvalues = [], []
                for cattr, cvalue in list(vars(value).items()):
                    if callable(cvalue) or isinstance(cvalue, (property, staticmethod, classmethod)):
                        cnames.append(cattr)
                        cvalues.append(cvalue)
                seen.add(("class", name, attr), vars(value), cnames, cvalues)
        seen.add(("module", name), members, names, values)
    seen.add(("modules",), sys.modules, mod_names, mods)
    return seen.done()


BODY = ("__code__", "__defaults__", "__kwdefaults__")
_MISSING = object()


def _frozen_std(fn):
    """Whether ``fn`` is a function of a module the interpreter froze into itself (its code's
    file "<frozen NAME>", its globals that module's: ``_collections_abc``'s ``Mapping.__eq__``,
    which ``UserDict`` compares with), not generated code."""
    name = fn.__code__.co_filename
    if not (name.startswith("<frozen ") and name.endswith(">")):
        return False
    name = name[len("<frozen ") : -1]
    try:
        import _imp

        frozen = _imp.is_frozen(name)
    except Exception:
        return False
    mod = sys.modules.get(name)
    return bool(frozen) and mod is not None and getattr(fn, "__globals__", None) is _namespace(mod)


def _base_texts(top, changed):
    """{changed file: its base text} from the grader's mirror under ``top``, read before any code
    of the change runs in this process (what the change's code writes there later is not read)."""
    out = {}
    for rel in changed:
        try:
            with open(os.path.join(top, rel), "rb") as f:
                out[rel] = f.read()
        except (OSError, ValueError):
            continue
    return out


def _defs_by_path(ast, tree):
    """{(names of the enclosing classes and functions..., name): (the def, its first lines)} of
    every function ``tree`` defines, at any depth (the last of a path wins, as Python binds it)."""
    out, todo = {}, [(tree, ())]
    while todo:
        node, path = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                here = (*path, child.name)
                if not isinstance(child, ast.ClassDef):
                    first = {child.lineno} | {d.lineno for d in child.decorator_list}
                    if here not in out or out[here][0].lineno < child.lineno:
                        out[here] = (child, first)
                todo.append((child, here))
            elif isinstance(child, (ast.stmt, ast.excepthandler)):
                todo.append((child, path))
    return out


def _class_node(tree, qualname):
    """The ``class`` statement of ``tree`` (a module's) named by ``qualname`` (the last one of
    that name in the module's or class's body), None if none."""
    node = tree
    for part in qualname.split("."):
        found = None
        for item in getattr(node, "body", ()) if node is not None else ():
            if type(item).__name__ == "ClassDef" and item.name == part:
                found = item
        node = found
    return node


XFAIL_NAMES = frozenset(("xfail", "expectedFailure"))


def _says_xfail(nodes):
    """Whether any of the syntax trees ``nodes`` names an expected failure (``pytest.mark.xfail``,
    ``unittest.expectedFailure``, a ``pytest.param(..., marks=...xfail)``)."""
    import ast

    for node in nodes:
        for sub in ast.walk(node):
            name = getattr(sub, "attr", None) or getattr(sub, "id", None)
            if name in XFAIL_NAMES:
                return True
    return False


def _declares_xfail(item, trees):
    """Whether ``item`` is an expected failure by its test file's own statements: an xfail
    marker it was collected with, declared by a decorator of its function or class (or of a
    class of that name it inherits from) or the module's or class's ``pytestmark``. An xfail
    the code under test raised (``pytest.xfail()``) or a marker it put on the module at run
    time is no expected failure: read as a skip. ``trees``: path -> parsed test file."""
    import ast

    try:
        if item.get_closest_marker("xfail") is None and not getattr(
            getattr(item, "obj", None), "__unittest_expecting_failure__", False
        ):
            return False
        path = getattr(getattr(item, "module", None), "__file__", None)
        if not path:
            return False
        if path not in trees:
            with open(path, "rb") as f:
                trees[path] = ast.parse(f.read())
        tree = trees[path]
    except Exception:
        return False
    name = getattr(item, "originalname", None) or getattr(item, "name", "")
    classes = {c.__name__ for c in getattr(getattr(item, "cls", None), "__mro__", ())}

    def marks(body):
        return [s.value for s in body if type(s).__name__ == "Assign" and any(
            getattr(t, "id", None) == "pytestmark" for t in s.targets)]  # fmt: skip

    found = marks(tree.body)
    for node in ast.walk(tree):
        kind = type(node).__name__
        if kind in ("FunctionDef", "AsyncFunctionDef") and node.name == name:
            found += node.decorator_list
        elif kind == "ClassDef" and node.name in classes:
            found += node.decorator_list + marks(node.body)
    return _says_xfail(found)


def _member(node, name):
    """The last statement of class ``node``'s body that binds ``name``, if it is a ``def``."""
    hit = None
    for item in getattr(node, "body", ()) if node is not None else ():
        kind = type(item).__name__
        if kind in ("FunctionDef", "AsyncFunctionDef") and item.name == name:
            hit = item
        elif kind in ("Assign", "AnnAssign", "AugAssign"):
            targets = getattr(item, "targets", None) or [getattr(item, "target", None)]
            if any(getattr(t, "id", None) == name for t in targets):
                hit = None
    return hit if type(hit).__name__ == "FunctionDef" else None


def _provider(cls, name):
    """The class of ``cls``'s MRO whose namespace holds ``name`` (``object`` if none does)."""
    return next((k for k in cls.__mro__ if name in vars(k)), object)


class Seen:
    """``snapshot``'s record: for each mapping that holds entries (``sys.modules``, a module's
    dict, a class's dict) the names and the objects, by identity, and each function's body
    (:data:`BODY`). Kept as flat tuples, no key per entry (thousands of them, made on every
    run's start-up path): :meth:`candidates` compares them in C and makes keys only for
    those that differ."""

    def __init__(self):
        self.groups = []
        self.fns, self.at, self.then, self.other = (), (), (), ()

    def add(self, where, mapping, names, values):
        if names:
            self.groups.append((where, mapping, tuple(names), tuple(values)))

    def done(self, _function=types.FunctionType):
        fns, at = [], []
        for g, (where, _, _, values) in enumerate(self.groups):
            if where[0] == "modules":
                continue
            for i, value in enumerate(values):
                fn = value
                if type(value) is not _function:
                    fn = getattr(value, "__func__", None) or getattr(value, "fget", None) or value
                    if getattr(fn, "__code__", None) is None:
                        continue
                fns.append(fn)
                at.append((g, i))
        self.fns, self.at = tuple(fns), tuple(at)
        self.other = tuple(j for j, fn in enumerate(fns) if type(fn) is not _function)
        self.then = tuple(tuple(map(getattr, fns, itertools.repeat(a), itertools.repeat(None))) for a in BODY)
        return self

    def _key(self, g, i):
        where, names = self.groups[g][0], self.groups[g][2]
        return ("module", names[i]) if where[0] == "modules" else (*where[1:], names[i])

    def _body(self, j):
        g, i = self.at[j]
        return ("body", *self._key(g, i)), (self.fns[j], *(then[j] for then in self.then))

    def candidates(self, touched=None, _is=operator.is_, _function=types.FunctionType):
        """(key, object as recorded) of the entries that may have changed: those no longer
        identical to the record (with the class entries of a class the module no longer
        holds), and the bodies ({("body", *key): (function, *its BODY)}) of the functions in
        ``touched`` (every object whose attribute assignment the audit hook saw: a body is
        assigned only so) or, without it, of every function whose body is no longer
        identical."""
        out, gone = [], set()
        for g, (where, mapping, names, values) in enumerate(self.groups):
            same = list(map(_is, map(mapping.get, names), values))
            if all(same):
                continue
            for i in [i for i, ok in enumerate(same) if not ok]:
                out.append((self._key(g, i), values[i]))
                if where[0] == "module":
                    gone.add((where[1], names[i]))
        for g, (where, _, _, values) in enumerate(self.groups):
            if where[1:] in gone:
                out += [(self._key(g, i), v) for i, v in enumerate(values)]
        if touched is not None:  # a function hashes by identity, and without a call of ``id``
            fns = {t for t in touched if type(t) is _function}  # (an audit event per call)
            hit = [j for j, fn in enumerate(self.fns) if type(fn) is _function and fn in fns] if fns else []
            if self.other:  # a body held by something else than a function (rare): by id
                ids = set(map(id, (t for t in touched if type(t) is not _function)))
                hit += [j for j in self.other if id(self.fns[j]) in ids]
            return out + [self._body(j) for j in sorted(hit)]
        moved = set()
        for attr, then in zip(BODY, self.then):  # noqa: B905 (3.6 syntax)
            now = map(getattr, self.fns, itertools.repeat(attr), itertools.repeat(None))
            moved.update(j for j, a, b in zip(itertools.count(), now, then) if a is not b)
        return out + [self._body(j) for j in sorted(moved)]


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


def changed_since(seen, foreign=lambda value: "foreign", touched=None):
    """What of ``seen`` was replaced since, by code ``foreign`` names (installed plugins patch
    pytest too: hypothesis wraps ``FixtureFunctionMarker.__call__`` when pytest loads it).
    ``touched``: the functions whose body the audit hook saw assigned (None: compare all)."""
    out = []
    for key, value in seen.candidates(touched):
        if key[0] == "body":
            fn = value[0]
            now = tuple(getattr(fn, a, None) for a in BODY)
            if any(a is not b for a, b in zip(now, value[1:])) and foreign(fn):  # noqa: B905 (3.6 syntax)
                out.append(".".join(key[1:]) + " (its body)")
            continue
        if key[0] == "module":
            now = sys.modules.get(key[1])
        elif len(key) == 2:
            now = vars(sys.modules.get(key[0], object)).get(key[1])
        else:
            cls = vars(sys.modules.get(key[0], object)).get(key[1])
            now = vars(cls).get(key[2]) if isinstance(cls, type) else None
        if now is not value and (key[0] == "module" or not (_own(now) or not foreign(_unwrap(now)))):
            out.append(".".join(key[1:]) if key[0] == "module" else ".".join(key))
    return sorted(set(out))


def _unwrap(value):
    if isinstance(value, (staticmethod, classmethod)):
        return value.__func__
    return value.fget if isinstance(value, property) else value


def _probe(value):
    """A fresh value of ``value``'s builtin type that no honest object of the run equals."""
    kind = type(value)
    if kind in (list, tuple, set, frozenset):
        return kind([object()])
    if kind is dict:
        return {object(): object()}
    return {str: "\x00swerl-probe\x00", bytes: b"\x00swerl-probe\x00", int: -0x5EED5EED5EED5EED,
            float: -1.2345e-300, complex: complex(-1.2345e-300, 7)}.get(kind)  # fmt: skip


BUILTIN = frozenset((int, float, str, bytes, list, tuple, dict, set, frozenset, type(None)))


def _truth(value, _kinds=BUILTIN):
    """How ``if`` reads ``value`` when that reading runs no code of the value's own (bool, the
    builtin scalars and containers); None for anything else (NotImplemented among them)."""
    if value is True or value is False:
        return value
    return bool(value) if type(value) in _kinds else None


def _declines(x, probe):
    """Whether ``cls``'s ``__eq__`` declines ``probe`` (NotImplemented, or an error): then a
    Python 2 style ``__ne__`` (``not self.__eq__(other)``) says False to it without claiming
    anything. Asked only of a ``__ne__`` that said "equal"; a fresh value of the other side's
    builtin type, which a builtin ``__eq__`` answers, still catches an ``__ne__`` equal to all."""
    try:
        return _slot(x, "__eq__", probe) is NotImplemented
    except Exception:
        return True


COMPARED_BUDGET = 256
"""Values looked at per comparison that said "equal" (operands and their elements)."""

PLAIN = frozenset((str, bytes, int, float, complex, bool, type(None)))
"""Builtin types compared in C with no elements: a comparison of two of them needs no look."""

BASES = (str, bytes, bytearray, int, float, complex, list, tuple, dict, set, frozenset)
"""Builtin types whose own equality compares data: a subclass's value is data of one of them."""

CONTAINERS = frozenset((list, tuple, dict, set, frozenset, type({}.keys()), type({}.items())))


def _base(cls, _bases=BASES):
    """The builtin type whose data an instance of ``cls`` holds (None if none)."""
    for kind in _bases:
        if issubclass(cls, kind):
            return kind
    return None


def _base_eq(x, other):
    """Whether the builtin types' own equality says ``x`` equals ``other`` (neither side's
    own ``__eq__`` is asked: a subclass is compared by its data)."""
    for a, b in ((x, other), (other, x)):
        kind = _base(type(a))
        if kind is not None:
            said = kind.__eq__(a, b)
            if said is not NotImplemented:
                return said is True
    return False


def _number_data(x):
    """``x`` with each instance of a subclass of ``int`` / ``float`` / ``complex`` / ``str`` /
    ``bytes`` / ``list`` / ``tuple`` in it (in lists, tuples and dict values) read as its builtin
    data: what its arithmetic and ordering would give if the subclass did not override them
    (``x`` itself when it holds none, or more than :data:`COMPARED_BUDGET` values)."""
    kind = type(x)
    if kind in PLAIN:
        return x
    base = _base(kind)
    if base in (int, float, complex, str, bytes):
        return base.__add__(x, base())
    if base in (list, tuple) and len(x) <= COMPARED_BUDGET:
        items = [_number_data(v) for v in base.__iter__(x)]
        return x if kind is base and all(map(operator.is_, items, x)) else base(items)
    if kind is dict and len(x) <= COMPARED_BUDGET:
        values = {k: _number_data(v) for k, v in dict.items(x)}
        return x if all(values[k] is v for k, v in dict.items(x)) else values
    return x


ORDER = {
    "<": (operator.lt, "__lt__", "__gt__"),
    "<=": (operator.le, "__le__", "__ge__"),
    ">": (operator.gt, "__gt__", "__lt__"),
    ">=": (operator.ge, "__ge__", "__le__"),
}
"""Each order comparison: its operator, the method it asks of the left operand, and of the right."""


def _approx(value):
    """Whether ``value`` is a ``pytest.approx(...)``: its equality runs the other side's arithmetic."""
    kind = type(value)
    return kind.__module__ == "_pytest.python_api" and kind.__name__.startswith("Approx")


def _fields(x):
    """The attributes an instance holds ({name: value}: its ``__dict__``, or a slotted dataclass's
    fields), {} if none or they cannot be read: what an equality of fields (a dataclass's, an
    attrs class's, a hand-written ``__eq__`` of the repository's) compares in code the checker
    does not see, so an always-equal value of the change's inside a repository object is asked."""
    try:
        names = object.__getattribute__(x, "__dict__")
    except Exception:
        names = None
    if isinstance(names, dict):
        return dict(names)
    fields = getattr(type(x), "__dataclass_fields__", None)
    if not isinstance(fields, dict):
        return {}
    out = {}
    for name in list(fields)[:COMPARED_BUDGET]:
        try:
            out[name] = object.__getattribute__(x, name)
        except Exception:
            continue
    return out


def _slot(x, name, other):
    """``type(x)``'s ``name`` called on ``x`` and ``other`` the way the interpreter's slot
    calls it (a function, a builtin, a ``functools.partial``, a slot wrapper alike: bound
    only if it is a descriptor)."""
    cls = type(x)
    for klass in cls.__mro__:
        if name in vars(klass):
            raw = vars(klass)[name]
            get = getattr(type(raw), "__get__", None)
            return (get(raw, x, cls) if get is not None else raw)(other)
    return NotImplemented


def _wrapper(kind):
    """Whether ``kind`` is (or subclasses, without a ``data`` descriptor of its own)
    ``collections.UserString`` / ``UserList`` / ``UserDict``, whose equality is that of the
    ``.data`` it wraps: a value of it compared with a literal is read by its ``.data`` (an
    honest wrapper of the right text passes; one wrapping an always-equal object does not)."""
    import collections

    wrappers = (collections.UserString, collections.UserList, collections.UserDict)
    if not issubclass(kind, wrappers):
        return False
    for klass in kind.__mro__:
        if "data" in vars(klass):  # a property or slot: what the wrapper compares is not its dict's
            return False
        if klass in wrappers:
            return True
    return False


def _copy_data(value):
    """A copy of a literal's data (lists, tuples, sets, dicts of builtin scalars)."""
    kind = type(value)
    if kind in (list, tuple, set, frozenset):
        return kind(map(_copy_data, value))
    if kind is dict:
        return {k: _copy_data(v) for k, v in value.items()}
    return value


def _same_data(value, copy, _plain=PLAIN):
    """Whether ``value`` still holds ``copy``'s data: the same builtin types all the way down
    (no element's own ``__eq__`` is asked)."""
    todo = [(value, copy)]
    while todo:
        a, b = todo.pop()
        kind = type(a)
        if kind is not type(b):
            return False
        if kind in _plain:
            if a != b:
                return False
        elif kind in (list, tuple):
            if len(a) != len(b):
                return False
            todo += zip(a, b)  # noqa: B905 (3.6 syntax)
        elif kind is dict:
            if len(a) != len(b) or any(type(k) not in _plain for k in a) or set(a) != set(b):
                return False
            todo += [(v, b[k]) for k, v in a.items()]
        elif kind in (set, frozenset):
            if not all(map(_is_data, a)) or a != b:
                return False
        else:
            return False
    return True


def _is_data(value, _plain=PLAIN):
    """Whether ``value`` is builtin scalars, or tuples of them (what a set of literals holds)."""
    kind = type(value)
    return kind in _plain or (kind is tuple and all(map(_is_data, value)))


def _flat(x, _plain=PLAIN):
    """Whether ``x`` is a builtin scalar, or a builtin container of them (one level)."""
    kind = type(x)
    if kind in _plain:
        return True
    if kind in (list, tuple, set, frozenset):
        return _plain.issuperset(map(type, x))
    return kind is dict and _plain.issuperset(map(type, x)) and _plain.issuperset(map(type, x.values()))


def _value_at(mapping, key):
    """``mapping[key]`` for a literal dict (``_MISSING``, which :meth:`Reporter._holds` skips,
    where the key is missing or unhashable)."""
    try:
        return dict.get(mapping, key, _MISSING)
    except TypeError:
        return _MISSING


HASHED_BUDGET = 1 << 16


def _hashed_like(container, needle, limit=HASHED_BUDGET):
    """The elements of a set (a dict's keys) whose hash is ``needle``'s: those ``needle in
    container`` compared it with, wherever they are in a large one (up to ``limit`` elements)."""
    try:
        h = hash(needle)
    except TypeError:
        return []
    out = []
    for e in itertools.islice(container, limit):
        try:
            if hash(e) == h:
                out.append(e)
        except Exception:
            continue
    return out


def _params(item):
    """A copy of a parametrized item's parameters ({name: value}; None if it has none): the
    values a test gets must be the objects collection gave it (a plain dict that any code holding
    the item, e.g. through the session on ``sys.meta_path``, could rewrite before its setup)."""
    params = getattr(getattr(item, "callspec", None), "params", None)
    return dict(params) if isinstance(params, dict) else None


def _match(x, items):
    """The element of ``items`` that ``x`` equals (None if none, or ``items`` is no container):
    what it is compared with."""
    if type(items) not in CONTAINERS:
        return None
    for item in itertools.islice(items, COMPARED_BUDGET):
        try:
            if (item == x) is True:
                return item
        except Exception:
            continue
    return None


GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200
"""CO_GENERATOR, CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR: code whose call runs nothing yet."""

CHECKERS = (
    "eq",
    "ne",
    "in",
    "not_in",
    "chain",
    "bound",
    "enter",
    "raised",
    "left",
    "lt",
    "le",
    "gt",
    "ge",
    "truth",
)
"""The runner's comparison functions, each bound in every rewritten test module as ``@swerl_NAME``
(from ``_pytest.assertion.rewrite._swerl_NAME``): a name no source can spell."""


def _watch_equality(reporter):
    """Every ``==``, ``!=``, ``in`` and ``not in`` in the modules pytest's assertion rewriter
    loads (test modules, conftests, plugins it marks) becomes a call of the runner's checker,
    which compares as Python would and shows ``reporter.compared`` the operands of each
    comparison that says "equal": in an ``assert``, ``assertTrue(a == b)`` or
    ``if a != b: pytest.fail()`` alike. Installed before the snapshot (the rewriter's
    functions and the checkers are watched), with pytest's bytecode cache off (a cached module
    would run without them), so no module it rewrites runs untransformed."""
    import ast

    from _pytest.assertion import rewrite

    seen, hits, plain = reporter.compared, reporter.hits, PLAIN

    def caller(depth, attr, _frame=sys._getframe):
        """``attr`` of the frame ``depth`` levels above the checker calling this, taken with the
        guard told it is the runner's own doing (asked on every comparison: without it, each
        ``sys._getframe`` and ``f_code`` read went through the guard's whole question)."""
        guard = reporter.guard
        if guard is None or guard.busy:
            return getattr(_frame(depth + 1), attr)
        guard.busy = True
        try:
            return getattr(_frame(depth + 1), attr)
        finally:
            guard.busy = False

    # ``site``: the number of a comparison every passing run of its test function makes (see
    # _must_run); ``lit``: which operand the test wrote as a literal (-1: neither; see
    # _literal_sides); no other parameter (a ``functools.partial`` of a checker changes nothing).
    def eq(a, b, lit=-1, site=None):
        __tracebackhide__ = True  # pytest leaves this frame out of a failure's traceback
        if site is not None:
            hits.add((site, caller(1, "f_code")))
        r = a == b
        if r is not False and not (type(a) in plain and type(b) in plain):
            seen(("==",), (a, b), lit)
        return r

    def ne(a, b, lit=-1, site=None):
        __tracebackhide__ = True
        if site is not None:
            hits.add((site, caller(1, "f_code")))
        r = a != b
        if r is not True and not (type(a) in plain and type(b) in plain):
            seen(("!=",), (a, b), lit)
        elif r is True and not (type(a) in plain and type(b) in plain):
            reporter.denied("!=", a, b)
        return r

    def in_(a, b, lit=-1, site=None):
        __tracebackhide__ = True
        if site is not None:
            hits.add((site, caller(1, "f_code")))
        r = a in b
        if r and not (type(a) in plain and type(b) in plain):
            seen(("in",), (a, b), lit)
        return r

    def not_in(a, b, lit=-1, site=None):
        __tracebackhide__ = True
        if site is not None:
            hits.add((site, caller(1, "f_code")))
        r = a not in b
        if not r and not (type(a) in plain and type(b) in plain):
            seen(("in",), (a, b), lit)
        elif r is True and type(b) not in plain and type(b) not in CONTAINERS:
            reporter.denied("not in", a, b)
        return r

    def order(op):
        compare = ORDER[op][0]

        def check(a, b, lit=-1, site=None):
            __tracebackhide__ = True
            if site is not None:
                hits.add((site, caller(1, "f_code")))
            r = compare(a, b)
            if r is not False and not (type(a) in plain and type(b) in plain):
                seen((op,), (a, b), lit)
            return r

        return check

    lt, le, gt, ge = order("<"), order("<="), order(">"), order(">=")

    def truth(v):
        """The operand of a ``not`` (an ``assert``'s own test is one): returned as it is; a builtin
        subclass of the change's whose truth is not its data's is recorded (see Reporter.truthy)."""
        __tracebackhide__ = True
        if type(v) not in plain:
            reporter.truthy(v)
        return v

    class Operand:
        """One operand of a chained comparison (``a == b == c``): Python still evaluates
        each operand once, left to right, and stops at the first false link."""

        __slots__ = ("v",)
        __hash__ = None

        def __init__(self, v):
            self.v = v

        def __eq__(self, other):
            __tracebackhide__ = True
            return eq(self.v, other.v)

        def __ne__(self, other):
            __tracebackhide__ = True
            return ne(self.v, other.v)

        def __lt__(self, other):
            __tracebackhide__ = True
            return lt(self.v, other.v)

        def __le__(self, other):
            __tracebackhide__ = True
            return le(self.v, other.v)

        def __gt__(self, other):
            __tracebackhide__ = True
            return gt(self.v, other.v)

        def __ge__(self, other):
            __tracebackhide__ = True
            return ge(self.v, other.v)

        def __contains__(self, other):
            __tracebackhide__ = True
            return in_(other.v, self.v)

    # named as the framework's own, so the snapshot reads its methods as it reads pytest's classes
    Operand.__module__, Operand.__name__, Operand.__qualname__ = (
        rewrite.__name__,
        "_swerl_chain",
        "_swerl_chain",
    )

    def bound(names, data=()):
        """Record what a test module's import / def / class statement bound (see _bindings),
        and a copy of each constant ``data`` names (a literal display: see Reporter.compared)."""
        space = caller(1, "f_globals")
        held = reporter.bound.setdefault(id(space), (space, {}))[1]
        for name in names:
            held[name] = space.get(name, _MISSING)
        for name in data:
            value = space.get(name)
            reporter.consts[id(value)] = (value, _copy_data(value), name, space.get("__name__"))

    bodies, real = reporter.bodies, reporter.real

    def body(key):
        """Whether the function calling a body checker is the one ``key`` names (its file and
        name): the checkers are reachable as module attributes, a call from elsewhere is forged."""
        code = caller(2, "f_code")
        path, _, name = key.rpartition("::")
        if code.co_name == name and real(code.co_filename) == path.rpartition("::")[0]:
            return True
        reporter.tampered.append(
            "a test body's record written from " + code.co_filename + " (" + code.co_name + ")"
        )
        return False

    def enter(key):
        """A test function's body starts (see _mark_bodies)."""
        if body(key):
            bodies[key] = "running"

    def raised(key):
        if body(key):
            bodies[key] = "raised"

    def left(key):
        if body(key) and bodies.get(key) == "running":
            bodies[key] = "done"  # ran to its end (a return or its last line) without raising

    fns = (eq, ne, in_, not_in, Operand, bound, enter, raised, left, lt, le, gt, ge, truth)
    checkers = dict(zip(CHECKERS, fns))  # noqa: B905 (3.6 syntax)
    for name, fn in checkers.items():
        setattr(rewrite, "_swerl_" + name, fn)
    reporter.checkers = {"@swerl_" + name: fn for name, fn in checkers.items()}
    transform = _Equality(ast)
    original, read_pyc, write_pyc = rewrite.rewrite_asserts, rewrite._read_pyc, rewrite._write_pyc
    root = os.path.realpath(reporter.root)

    def ours(path):
        """Whether the module at ``path`` is transformed: any but an installed one (a plugin
        pytest rewrites too) outside the repository."""
        full = os.path.realpath(str(path))
        installed = os.sep + "site-packages" + os.sep in full or os.sep + "dist-packages" + os.sep in full
        return _inside(full, root) or not installed

    plain = {}  # module path -> pytest's code of it, untransformed (outside the repository only)
    hook = original.__code__.co_filename  # pytest's import hook calls these from its own module;

    def direct():  # a test calling them itself (pytest's own tests of its rewriter) gets pytest's
        return sys._getframe(2).f_code.co_filename != hook

    def rewrite_asserts(mod, *args, **kwargs):
        if direct():
            return original(mod, *args, **kwargs)
        paths = [a for a in args if isinstance(a, str) or hasattr(a, "__fspath__")]  # not the source (bytes)
        path = str(paths[0]) if paths else kwargs.get("module_path")
        if (
            path is not None
            and not sys.dont_write_bytecode
            and ours(path)
            and not _inside(os.path.realpath(path), root)
        ):
            try:  # pytest's own code of a module outside the repository, for its cache (_write_pyc)
                import copy

                twin = copy.deepcopy(mod)
                original(twin, *args, **kwargs)
                plain[str(path)] = compile(twin, str(path), "exec", dont_inherit=True)
            except Exception:
                pass
        if path is None or ours(path):
            if path is not None:  # the tree pytest parsed: _misplaced reads no file again
                reporter.defs[os.path.realpath(str(path))] = _defs_in(ast, mod)
            reporter.bindings[str(path)] = bindings = _bindings(ast, mod, reporter.imported)  # as written
            literal = _literal_sides(ast, mod, bindings)  # before pytest names each operand @py_assertN
        original(mod, *args, **kwargs)  # pytest's explanations first: they see the comparisons
        if path is None or ours(path):
            transform.literal = literal
            transform.sites, funcs = _must_run(ast, mod, transform.OPS)
            reporter.required.update({(str(path), *key): sites for key, sites in funcs.items()})
            transform.module(mod)
            _mark_bodies(ast, mod, str(path), _test_prefixes(reporter.config))
            reporter.rewritten.add(str(path))  # the code's co_filename and the module's __file__

    def _read_pyc(source, pyc, *args, **kwargs):  # a transformed module is compiled every run
        return None if ours(source) and not direct() else read_pyc(source, pyc, *args, **kwargs)

    def _write_pyc(state, co, *args, **kwargs):  # and leaves no cache of transformed code: a module
        if not ours(co.co_filename) or direct():  # outside the repository (a pytester run's) gets
            return write_pyc(state, co, *args, **kwargs)  # pytest's own code cached, as pytest would
        own = plain.pop(co.co_filename, None)
        return False if own is None else write_pyc(state, own, *args, **kwargs)

    rewrite.rewrite_asserts, rewrite._read_pyc, rewrite._write_pyc = rewrite_asserts, _read_pyc, _write_pyc


def _test_prefixes(config):
    """What a test function's name starts with: the base configuration's ``python_functions``
    prefixes (glob patterns are matched whole at check time), and unittest's ``test``."""
    try:
        patterns = list(config.getini("python_functions")) if config is not None else []
    except Exception:
        patterns = []
    return tuple({"test"} | {p for p in patterns if not any(c in p for c in "*?[")})


def body_key(path, cls, name, real=os.path.realpath):
    """The key a test function's body records under: its file, innermost class and name."""
    return real(path) + "::" + (cls or "") + "::" + name


def _mark_bodies(ast, mod, path, prefixes):
    """Wrap the body of each test function of a rewritten module (at the top level or in a
    class; names starting with one of ``prefixes``) so that it records its start, whether an
    exception left it, and its end: a test reported as passed must have run its own body to
    the end (:meth:`Reporter.body_why`), whatever ran in its place (pytest's ``runtest`` or a
    hook implementation swapped for another function, a wrapper forcing the call's result)."""
    todo = [(node, None) for node in mod.body]
    while todo:  # the functions _defs_in finds: at the top level or in a class body, also in if/try
        node, cls = todo.pop()
        if isinstance(node, ast.ClassDef):
            todo += [(child, node.name) for child in node.body]
            continue
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if isinstance(node, ast.stmt):
                todo += [(child, cls) for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt)]
            continue
        if not node.name.startswith(prefixes):
            continue
        body = node.body
        head = 1 if body and isinstance(body[0], ast.Expr) and _is_text(body[0].value) else 0
        rest = body[head:] or [ast.copy_location(ast.Pass(), body[0] if body else node)]  # (a docstring only)
        at = rest[0]
        key = ast.Constant(body_key(path, cls, node.name))

        def call(name, _at=at, _key=key):
            fn = ast.Name("@swerl_" + name, ast.Load())
            return ast.Expr(ast.Call(fn, [_key], []))

        handler = ast.ExceptHandler(
            ast.Name("BaseException", ast.Load()), None, [call("raised"), ast.Raise(None, None)]
        )
        wrapped = ast.Try(rest, [handler], [], [call("left")])
        new = [call("enter"), wrapped]
        for stmt in new:
            for sub in ast.walk(stmt):
                if "lineno" in sub._attributes and not hasattr(sub, "lineno"):
                    sub.lineno, sub.col_offset = at.lineno, getattr(at, "col_offset", 0)
                    sub.end_lineno, sub.end_col_offset = at.lineno, getattr(at, "col_offset", 0)
        node.body = body[:head] + new


REWRITE_NAMES = {"@py_builtins": "builtins", "@pytest_ar": "_pytest.assertion.rewrite"}
"""What pytest's rewrite binds in every module it rewrites: these modules, always."""


def _bindings(ast, mod, imported):
    """The top-level names a test module binds only by top-level statements (an absolute
    import, a ``def`` or ``class``, an assignment to plain names: ``EXPECTED = ...``,
    ``np = pytest.importorskip("numpy")``; in its body or a top-level ``if`` / ``try``
    block), each with how ({name:
    [way]}: the module ``import`` named, "def" for an undecorated def or class, "" else);
    after each such statement a call ``@swerl_bound((names...))`` is inserted, which records
    what the statement bound: what :meth:`Reporter.rebound` expects the names to hold at the
    end. A name the module also binds any other way (in a function with ``global``, a loop,
    ``del``, an exception's name, a nested def) is left out. Adds the top-level package of every absolute import,
    anywhere in the module, to ``imported``."""
    eligible, other = {}, set()
    compound = (ast.If, ast.Try) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    todo, placed = [mod.body], set()
    while todo:  # each statement list at the top level
        body = todo.pop()
        for i in range(len(body) - 1, -1, -1):
            node = body[i]
            names, ways, data = [], [], []
            if isinstance(node, compound):
                todo += [node.body, node.orelse, getattr(node, "finalbody", [])]
                todo += [h.body for h in getattr(node, "handlers", [])]
                other.update(h.name for h in getattr(node, "handlers", []) if h.name)
            elif isinstance(node, ast.Import):
                names = [a.asname or a.name.split(".")[0] for a in node.names]
                ways = [a.name if a.asname else a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level or node.module == "__future__" or any(a.name == "*" for a in node.names):
                    other.update(a.asname or a.name for a in node.names)
                else:
                    names = [a.asname or a.name for a in node.names]
                    ways = [""] * len(names)
            elif isinstance(node, defs):
                names = [node.name]
                ways = ["" if node.decorator_list else "def"]
                placed.add(id(node))
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                flat = [e for t in targets for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])]
                if getattr(node, "value", None) is not None and all(type(e) is ast.Name for e in flat):
                    names = [e.id for e in flat]
                    ways = [""] * len(names)
                    placed.update(map(id, flat))
                    if len(flat) == len(targets) and _display(ast, node.value) and _pure(ast, node.value):
                        data = names  # a constant of data: its copy is kept (Reporter.compared)
            if names:
                for name, way in zip(names, ways):  # noqa: B905 (3.6 syntax)
                    eligible.setdefault(name, []).append(way)
                text = [ast.Constant(n) if hasattr(ast, "Constant") else ast.Str(n) for n in names]
                args = [ast.Tuple(text, ast.Load())]
                if data:
                    args.append(ast.Tuple([ast.Constant(n) for n in data], ast.Load()))
                call = ast.Call(ast.Name("@swerl_bound", ast.Load()), args, [])
                stmt = ast.Expr(call)
                for n in (stmt, call, call.func, *args, *[e for a in args for e in a.elts]):
                    n.lineno, n.col_offset = node.lineno, node.col_offset
                    n.end_lineno, n.end_col_offset = node.lineno, node.col_offset
                body.insert(i + 1, stmt)
    for node in ast.walk(mod):  # every other binding of a name, anywhere in the module
        kind = type(node)
        if kind is ast.Name and type(node.ctx) is not ast.Load and id(node) not in placed:
            other.add(node.id)
        elif kind in (ast.Global, ast.Nonlocal):
            other.update(node.names)
        elif kind in defs and id(node) not in placed:
            other.add(node.name)
        elif kind is ast.Import:
            imported.update(a.name.split(".")[0] for a in node.names)
        elif kind is ast.ImportFrom and not node.level and node.module:
            imported.add(node.module.split(".")[0])
    return {name: ways for name, ways in eligible.items() if name not in other}


def _display(ast, node):
    """Whether ``node`` is a non-empty list / tuple / set / dict display."""
    kind = type(node)
    if kind is ast.Dict:
        return bool(node.keys)
    return kind in (ast.List, ast.Tuple, ast.Set) and bool(node.elts)


def _pure(ast, node):
    """Whether ``node`` is a literal of data: a constant (``-1`` too), or a display of such
    literals (no ``*`` / ``**``, no name, no call)."""
    todo = [node]
    while todo:
        node = todo.pop()
        kind = type(node)
        if kind is ast.UnaryOp and type(node.op) in (ast.USub, ast.UAdd):
            node, kind = node.operand, type(node.operand)
        if kind.__name__ in ("Constant", "Num", "Str", "Bytes", "NameConstant"):
            continue
        if kind in (ast.List, ast.Tuple, ast.Set):
            todo += node.elts
        elif kind is ast.Dict and None not in node.keys:
            todo += node.keys + node.values
        else:
            return False
    return True


def _literal_sides(ast, mod, bindings):
    """{id: node} of each operand of a one-operator comparison that the test wrote as a
    literal: a constant, a display (list, tuple, set, dict, comprehension, f-string: its
    value is of that builtin type whatever its elements), or a name the module binds once, at
    the top level, to a literal of data (``EXPECTED = ["a", "b"]``) and nowhere else (no
    function takes it as a parameter). Read from the tree as the source wrote it: pytest's
    rewrite then assigns each operand node of an assert to a name (``@py_assertN``) and
    compares the names (see _Equality.named); positions are not kept (pytest 7 gives every
    node of an assert the assert's)."""
    consts = set()
    for node in mod.body:
        if type(node) is ast.Assign and len(node.targets) == 1 and type(node.targets[0]) is ast.Name:
            name = node.targets[0].id
            if len(bindings.get(name, ())) == 1 and _pure(ast, node.value):
                consts.add(name)
    shown = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp, ast.JoinedStr)
    ops = tuple(getattr(ast, n) for n in _Equality.OPS)
    compares, params = [], set()
    for node in ast.walk(mod):
        kind = type(node)
        if kind is ast.Compare:
            if len(node.ops) == 1 and type(node.ops[0]) in ops:
                compares.append(node)
        elif kind is ast.arg:
            params.add(node.arg)
    consts -= params

    def literal(node):
        kind = type(node)
        if kind is ast.Name:
            return node.id in consts
        return kind in shown or _pure(ast, node)

    out = {}
    for node in compares:
        for side in (node.comparators[0], node.left):
            if literal(side):
                out[id(side)] = side
    return out


def _must_run(ast, mod, ops):
    """The comparisons (``==``, ``!=``, ``in``, ``not in``, one operator) that every run of a
    function of ``mod`` that returns normally makes: in the simple statements of its own body
    (an ``assert`` pytest rewrote is ``@py_assertN = a == b`` there) up to the first statement
    that can return, outside any branch (``and`` / ``or`` operands but the first, ``if``
    expressions' arms, comprehensions, lambdas). Each gets a number its checker call passes,
    and the checker records (number, caller's code): a test that passed without one of them
    ran it with something else bound to the checker's name, even if that was put back before
    the test ended. Returns ({id(node): number}, {(name, first line): numbers}); ``async``
    functions are left out."""
    simple = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)
    sites, funcs, todo = {}, {}, [mod.body]
    while todo:  # the module's functions and its classes' (in top-level if / try blocks too)
        for node in todo.pop():
            if isinstance(node, ast.ClassDef):
                todo.append(node.body)
            elif isinstance(node, (ast.If, ast.Try)):
                todo += [node.body, node.orelse, getattr(node, "finalbody", [])]
            elif isinstance(node, ast.FunctionDef):  # a generator's is not asked (Reporter.unchecked)
                found = []
                for stmt in node.body:
                    if isinstance(stmt, simple) and stmt.value is not None:
                        found += _unconditional(ast, stmt.value, ops)
                    if isinstance(stmt, ast.Return) or (
                        not isinstance(stmt, simple) and _in_scope(ast, stmt, (ast.Return,))
                    ):
                        break
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                numbers = []
                for compare in found:
                    sites[id(compare)] = len(sites)
                    numbers.append(sites[id(compare)])
                if numbers:
                    funcs[(node.name, first)] = tuple(numbers)
    return sites, funcs


def _in_scope(ast, node, kinds):
    """Whether ``node`` holds a node of ``kinds`` in its own scope (not in a nested def, lambda or
    class), pytest's explanation of a failed assert left out (its code neither returns nor yields;
    it is the bulk of a rewritten test)."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    todo = list(ast.iter_child_nodes(node)) if isinstance(node, nested) else [node]
    while todo:
        item = todo.pop()
        if isinstance(item, kinds):
            return True
        if isinstance(item, ast.If) and _explains_failure(ast, item):
            continue
        if not isinstance(item, nested):
            todo.extend(ast.iter_child_nodes(item))
    return False


def _explains_failure(ast, node):
    """``if not @py_assertN: ...``: pytest's code for an assert that failed."""
    test = node.test
    return (
        type(test) is ast.UnaryOp
        and type(test.op) is ast.Not
        and type(test.operand) is ast.Name
        and test.operand.id.startswith("@py_assert")
    )


def _unconditional(ast, expr, ops):
    """The single-operator comparisons of ``ops`` that evaluating ``expr`` always reaches."""
    out, todo = [], [expr]
    comprehensions = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Compare):
            todo.append(node.left)
            if len(node.ops) == 1:
                todo.append(node.comparators[0])
                if type(node.ops[0]).__name__ in ops:
                    out.append(node)
        elif isinstance(node, ast.BoolOp):
            todo.append(node.values[0])
        elif isinstance(node, ast.IfExp):
            todo.append(node.test)
        elif isinstance(node, comprehensions):
            todo.append(node.generators[0].iter)
        elif isinstance(node, ast.keyword):
            todo.append(node.value)
        elif not isinstance(node, ast.Lambda):
            todo.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, (ast.expr, ast.keyword)))
    return out


class _Equality:
    """The AST transform of :func:`_watch_equality`: one pass over the module (a loop over
    each node's fields, no visitor dispatch: the tree pytest leaves is large), each comparison
    that can say "equal" replaced by a call of the runner's checker."""

    OPS = {
        "Eq": "@swerl_eq",
        "NotEq": "@swerl_ne",
        "In": "@swerl_in",
        "NotIn": "@swerl_not_in",
        "Lt": "@swerl_lt",
        "LtE": "@swerl_le",
        "Gt": "@swerl_gt",
        "GtE": "@swerl_ge",
    }
    SKIP = frozenset(("ctx", "ops"))  # fields that never hold a comparison

    def __init__(self, ast):
        self.ast = ast
        self.literal = {}  # the module's literal operands of comparisons (_literal_sides)
        self.sites = {}  # id(Compare node) -> its site number (see _must_run), for the module at hand

    def module(self, mod):
        ast = self.ast
        self.walk(mod)
        names = [ast.alias(name="_swerl_" + n, asname="@swerl_" + n) for n in CHECKERS]
        imp = ast.ImportFrom(module="_pytest.assertion.rewrite", names=names, level=0)
        pos = 0  # after the docstring and ``from __future__`` imports, as pytest's own imports
        for i, item in enumerate(mod.body):
            if i == 0 and isinstance(item, ast.Expr) and _is_text(item.value):
                pos = 1
            elif isinstance(item, ast.ImportFrom) and item.level == 0 and item.module == "__future__":
                pos = i + 1
            else:
                break
        line = mod.body[pos].lineno if pos < len(mod.body) else 1
        for node in [imp, *names]:
            node.lineno, node.col_offset, node.end_lineno, node.end_col_offset = line, 0, line, 0
        mod.body.insert(pos, imp)  # no fix_missing_locations: pytest's own nodes carry no end line

    def walk(self, mod):
        """Replace every comparison under ``mod``; the replacement is walked in its turn (an
        operand may hold comparisons of its own)."""
        ast = self.ast
        AST, Compare, If, skip, compare = ast.AST, ast.Compare, ast.If, self.SKIP, self.compare
        UnaryOp, Not = ast.UnaryOp, ast.Not
        Assign, literal = ast.Assign, self.literal
        old = ("Num", "Str", "Bytes", "NameConstant") if sys.version_info < (3, 8) else ()  # 3.12 warns
        leaves = frozenset([ast.Name, ast.Constant] + [getattr(ast, n) for n in old])  # hold no expression
        stack = [mod]
        while stack:
            node = stack.pop()
            # pytest's code for an assert that failed explains it (the test fails anyway)
            failed = type(node) is If and self.failed_assert(node)
            if failed or (type(node) is UnaryOp and type(node.op) is Not):  # an assert's test, a `not`
                test = node.test if failed else node
                test.operand = self.call("@swerl_truth", [test.operand], test.operand)
            fields = ("orelse",) if failed else node._fields
            for field in fields:
                if field in skip:
                    continue
                value = getattr(node, field, None)
                if isinstance(value, list):
                    temps = {} if literal else None  # pytest's @py_assertN names of literals, in order
                    for i, item in enumerate(value):
                        if type(item) is Compare:
                            value[i] = item = compare(item)
                        elif temps is not None and type(item) is Assign and len(item.targets) == 1:
                            self.named(item, temps)
                        if isinstance(item, AST) and type(item) not in leaves:
                            stack.append(item)
                elif isinstance(value, AST) and type(value) not in leaves:
                    if type(value) is Compare:
                        value = compare(value)
                        setattr(node, field, value)
                    stack.append(value)

    def named(self, stmt, temps):
        """``@py_assertN = <literal>`` (pytest's rewrite names each operand of an assert before
        comparing the names, in the same statement list): remember it; compare the names of
        ``@py_assertM = @py_assertJ == @py_assertK`` now, with what the list assigned so far."""
        target, value = stmt.targets[0], stmt.value
        if type(target) is not self.ast.Name or not target.id.startswith("@py_assert"):
            return
        if self.literal.get(id(value)) is value:
            temps[target.id] = value
        elif type(value) is self.ast.Compare:
            stmt.value = self.compare(value, temps)
        else:
            temps.pop(target.id, None)

    def failed_assert(self, node):
        """Whether ``node`` is ``if not @py_assertN: ...; raise``: the branch pytest's rewrite
        runs once an assert failed (its message and explanation: the bulk of the rewritten
        tree). An ``or``'s next operand is evaluated under ``if not @py_assertN:`` too, but
        its body never ends in a ``raise``."""
        ast, test = self.ast, node.test
        return (
            type(test) is ast.UnaryOp
            and type(test.op) is ast.Not
            and type(test.operand) is ast.Name
            and test.operand.id.startswith("@py_assert")
            and bool(node.body)
            and type(node.body[-1]) is ast.Raise
        )

    def compare(self, node, temps=None):
        ast = self.ast
        kinds = [type(op).__name__ for op in node.ops]
        if not any(k in self.OPS for k in kinds):
            return node
        if len(kinds) == 1:
            args = [node.left, node.comparators[0]]
            k = self.side(args, temps) if self.literal else -1
            number = self.sites.get(id(node))
            if k >= 0 or number is not None:  # which operand the test wrote as a literal; the site
                extra = [k] if number is None else [k, number]
                args += [
                    ast.copy_location(ast.Constant(v) if hasattr(ast, "Constant") else ast.Num(v), node)
                    for v in extra
                ]
            return self.call(self.OPS[kinds[0]], args, node)
        if "Is" in kinds or "IsNot" in kinds:  # identity of a wrapped operand is not the operand's
            return node
        wrapped = [self.call("@swerl_chain", [e], e) for e in [node.left, *node.comparators]]
        return ast.copy_location(ast.Compare(wrapped[0], node.ops, wrapped[1:]), node)

    def side(self, args, temps):
        """Which of ``args`` (0 or 1) the test wrote as a literal (-1: neither)."""
        literal = self.literal
        for k in (1, 0):
            arg = args[k]
            if literal.get(id(arg)) is arg:
                return k
            if temps and type(arg) is self.ast.Name and arg.id in temps:
                return k
        return -1

    def call(self, name, args, where):
        ast = self.ast
        func = ast.copy_location(ast.Name(name, ast.Load()), where)
        return ast.copy_location(ast.Call(func, args, []), where)


def _is_text(node):
    kind = type(node).__name__
    return kind == "Str" or (kind == "Constant" and isinstance(node.value, str))


UNITTEST_ASSERTS = (
    ("assertEqual", "=="),
    ("assertNotEqual", "!="),
    ("assertIn", "in"),
    ("assertListEqual", "=="),
    ("assertTupleEqual", "=="),
    ("assertDictEqual", "=="),
    ("assertSetEqual", "=="),
    ("assertSequenceEqual", "=="),
    ("assertMultiLineEqual", "=="),
    ("assertCountEqual", "count"),
    ("assertAlmostEqual", "almost"),
)
"""``TestCase`` methods that compare in unittest's code (not rewritten), and how: a passing one
is shown to the checker as that comparison (``count``: each element of the first found in the
second, in any order; ``almost``: ``==`` when the two are equal by ``==``, the shortcut
``assertAlmostEqual`` takes before any arithmetic)."""


def _watch_unittest(reporter):
    """A ``TestCase``'s comparing asserts (:data:`UNITTEST_ASSERTS`) that passed show the runner
    what they compared, as a comparison in test code does (installed before the snapshot):
    ``assertEqual`` of two lists runs ``assertListEqual``, whose ``seq1 == seq2`` is unittest's."""
    import unittest

    for name, op in UNITTEST_ASSERTS:
        if hasattr(unittest.TestCase, name):
            _watch_assert(unittest.TestCase, name, op, reporter)


def _watch_assert(case, name, op, reporter):
    original = getattr(case, name)

    def checked(self, first, second, *args, **kwargs):
        original(self, first, second, *args, **kwargs)
        if op == "almost":
            try:
                said = first == second
                equal = said is True or (said is not False and said is not None and bool(said))
            except Exception:
                equal = False
            if equal:
                reporter.compared(("==",), (first, second))
            else:  # passed by arithmetic: the operands' own, unless read as their builtin data
                reporter.almost_why(first, second, lambda a, b: original(self, a, b, *args, **kwargs))
            return
        if op != "count":
            reporter.compared((op,), (first, second))
            return
        try:
            items, among = list(itertools.islice(first, COMPARED_BUDGET)), list(second)
        except Exception:
            return
        for item in items:
            reporter.compared(("in",), (item, among))

    checked.__name__, checked.__doc__ = name, original.__doc__
    setattr(case, name, checked)


_MODULE_DICT = type(sys).__dict__["__dict__"]


HIDDEN_TEST = "swerl::hidden ("
"""What ``PYTEST_CURRENT_TEST`` starts with while a test of the graded run is running."""


def _hide_current_test(reporter):
    """pytest names the running test in ``PYTEST_CURRENT_TEST``, and reading ``os.environ`` raises
    no audit event: package code could act on the issue's test alone and keep the bug for every
    other caller. Installed before the snapshot (``_pytest.runner`` is watched), so the tests of
    this run see the variable set, as code that asks whether pytest runs it expects, naming no
    test; a run of pytest inside the tests (pytester) has its own config and the real names.
    Every read of the environment decodes its value through ``os.environ.decodevalue``: the
    change's code reading this one is recorded (:meth:`Guard.read_current_test`)."""
    try:
        from _pytest import runner
    except ImportError:
        return
    real = getattr(runner, "_update_current_test_var", None)
    if real is None:  # pytest before 3.2 sets no such variable
        return

    def _update_current_test_var(item, when):
        if when and getattr(item, "config", None) is reporter.config:
            os.environ["PYTEST_CURRENT_TEST"] = HIDDEN_TEST + when + ")"
        else:
            real(item, when)

    runner._update_current_test_var = _update_current_test_var
    decode = getattr(os.environ, "decodevalue", None)
    if decode is None:
        return

    def decodevalue(value):
        text = decode(value)
        if type(text) is str and text.startswith(HIDDEN_TEST):
            guard = reporter.guard
            if guard is not None and guard.installed and not guard.busy:
                try:
                    guard.own(guard.read_current_test)
                except Exception:
                    pass
        return text

    os.environ.decodevalue = decodevalue


def _namespace(mod):
    """A module's own globals, read the way the interpreter holds them: a module class's
    ``__dict__`` property is not run (apipkg's lazy modules, ``py`` among them, import every
    submodule they name when it is read: tens of milliseconds at the end of each run)."""
    try:
        names = _MODULE_DICT.__get__(mod)
    except TypeError:  # not a module (anything may sit in sys.modules)
        names = getattr(mod, "__dict__", None)
    return names if isinstance(names, dict) else {}


def _code(fn, guard=None, _function=types.FunctionType):
    """``fn.__code__`` (None if it has none), read as the runner's own when ``fn`` is a plain
    function, whose code C hands over running no one's code: the guard then need not ask who read
    it (several reads of each test function's code a test, each otherwise a whole question)."""
    if guard is None or type(fn) is not _function:
        return getattr(fn, "__code__", None)
    return guard.own(getattr, fn, "__code__")


def code_file(fn, guard=None):
    code = _code(fn, guard) or getattr(vars(type(fn)).get("__call__"), "__code__", None)
    return getattr(code, "co_filename", "") or ""


class Reporter:
    """The pytest plugin: each test's outcome from its reports and from its own call."""

    def __init__(self, channel, seen, changed, root):
        self.channel, self.seen, self.changed, self.root = channel, seen, changed, root
        self.phases, self.raised, self.tampered, self.count, self.config = {}, set(), [], 0, None
        self.startup, self.startup_ids, self.results, self.current = [], set(), {}, None
        self.unsent = {}  # node ids whose status is not written yet, in the order they finished
        self.startup_fns, self.guard = set(), None
        self.eq_code = {}  # (type, method name) -> why its equality is the change's ("" if not)
        self.consts = {}  # id -> (a test module's literal constant, a copy of its data, its name, module)
        self.kinds = {}  # type -> how a value of it compared with a literal is read (_kind)
        self.base_src = {}  # changed file -> its base text (grade.py mirrors it; read at start: _base_texts)
        self.now_src = {}  # changed file -> its text as the run starts (what its modules load)
        self.kept_code = {}  # code object -> whether its def is the base's, unchanged (unchanged_def)
        self.trees = {}  # changed file -> (its base tree, its tree now), None without a base text
        self.defs = {}  # test file -> its defs' first lines, for _misplaced
        self.checkers, self.rewritten = {}, set()  # what _watch_equality bound, and in which files
        self.rewritten_real = set()
        self.bindings = {}  # rewritten file -> its names bound only by import, def or class (_bindings)
        self.bound = {}  # id(module globals) -> (globals, {name: what its statement bound})
        self.imported = set()  # top-level packages the rewritten modules import (see planted)
        self.required = {}  # (file, function name, first line) -> its comparisons' numbers (_must_run)
        self.hits = set()  # (number, code) of each such comparison whose checker ran, this test
        self.item_globals = {}  # nodeid -> the globals its function runs with, until its teardown
        self.test_globals = {}  # id -> the globals of each test function run from such a file
        self.started = time.time()
        self.where = {}  # code file name -> (real path, path in the repository): one realpath per file
        self.cached = {}  # real path -> why its bytecode cache is not the run's own ("" if it is)
        self.bodies = {}  # body_key -> "running" / "raised" / "done" during the current call
        self.body_failed = {}  # node id -> why its passing call does not count (body_why)
        self.collected = None  # node id -> (item, its class, its parameters), as pytest collected them
        self.params_why = {}  # node id -> params_changed as its setup started
        self.called = set()  # node ids whose call phase ran through the runner's call wrapper
        self.rewrites = True  # whether pytest rewrites (and the runner transforms) test modules
        self.declared_xfail, self.xfail_trees = set(), {}  # see _declares_xfail
        self.reals = {}  # path -> its realpath, for the few test files each test asks about (real)

    def real(self, path):
        """``os.path.realpath(path)``, remembered: the checks of every test ask it of their test
        file and function several times, and each fresh answer is an ``lstat`` per component."""
        full = self.reals.get(path)
        if full is None:
            full = self.reals[path] = os.path.realpath(path)
        return full

    def _foreign(self, fn):
        return self._file_why(code_file(fn, self.guard))

    def _file_why(self, path):
        """Why code from ``path`` is not the base's: generated, a file the change touched, or
        one written (or re-timed) during the run ("" if none of these)."""
        if not path or path.startswith("<"):
            return "generated code " + (path or "(no file)")
        if path not in self.where:
            full = os.path.realpath(os.path.join(self.root, path))
            self.where[path] = (full, os.path.relpath(full, self.root))
        full, rel = self.where[path]
        if rel in self.changed:
            return "a file the change touched: " + rel
        try:
            st = os.stat(full)  # ctime too: code can set a file's mtime back, never its ctime
            if max(st.st_mtime, st.st_ctime) > self.started:
                return "a file written during the run: " + full
        except OSError:
            return "code from a file that does not exist: " + full
        if full not in self.cached:
            self.cached[full] = self._cache_why(full)
        return self.cached[full]

    def _cache_why(self, full):
        """A bytecode cache of ``full`` written during the run by another process (the code
        was loaded from it, not from the file): "" if none. Only where the audit hook sees
        what this process writes itself (Python 3.8+)."""
        guard = getattr(self, "guard", None)
        if guard is None or not hasattr(sys, "addaudithook") or not full.endswith(".py"):
            return ""
        try:
            import importlib.util

            where = os.path.dirname(importlib.util.cache_from_source(full))  # honours pycache_prefix
            names = os.listdir(where)
        except (OSError, ValueError, NotImplementedError):
            return ""
        stem = os.path.basename(full)[:-3] + "."
        tag = getattr(sys.implementation, "cache_tag", None) or ""
        opt = ".opt-" + str(sys.flags.optimize) if sys.flags.optimize else ""
        for name in names:
            path = os.path.join(where, name)
            rest = name[len(stem) : -4]
            if (
                not (name.startswith(stem) and name.endswith(".pyc"))
                or not rest.startswith(tag)  # another interpreter's
                or (".opt-" in rest and not (opt and rest.endswith(opt)))  # ``python -O``'s: never read here
                or os.path.realpath(path) in guard.bytecode
            ):
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            if max(st.st_mtime, st.st_ctime) > self.started:
                return "bytecode another process wrote during the run: " + path
        return ""

    def _plugin_why(self, plugin):
        """A plugin registered after start-up must be what a module loaded from a base file
        defines: the module itself (a conftest, a ``pytest_plugins`` entry) or an instance of
        a class it holds by that name (pytest's own Session, fixture manager, ...)."""
        if isinstance(plugin, type(sys)):
            mod, held = plugin, sys.modules.get(getattr(plugin, "__name__", "")) is plugin
        else:
            cls = type(plugin)
            mod = sys.modules.get(getattr(cls, "__module__", ""))
            held = mod is not None and vars(mod).get(cls.__name__) is cls
        if not held:
            return "an object no loaded module defines"
        return self._file_why(getattr(mod, "__file__", "") or "")

    def rerouted(self, names):
        """Why the globals ``names`` of a module the rewriter transformed no longer hold the
        runner's comparison functions under their names ("" if they do)."""
        bad = sorted(name for name, fn in self.checkers.items() if names.get(name) is not fn)
        return "had its comparisons rerouted (" + ", ".join(bad) + ")" if bad else ""

    def copied(self, fn):
        """Why ``fn`` is a copy the change's code made (of a test's code, or with a body or
        defaults it set) rather than the function the test's file made ("" if it is not)."""
        guard = getattr(self, "guard", None)
        return guard.copy_why(fn) if guard is not None and guard.installed else ""

    def copies_held(self, names):
        """Why the globals ``names`` of a test module, or the attributes of a class among them,
        hold a copy the change's code made under the name of the function it copies ("" if none):
        a helper, fixture or test swapped for one before pytest read it."""
        found = []
        for name, value in list(names.items()):
            places = [(name, value)]
            if isinstance(value, type) and names.get("__name__") == getattr(value, "__module__", None):
                places += [(name + "." + k, v) for k, v in list(vars(value).items())]
            for where, fn in places:
                fn = getattr(fn, "__func__", fn)
                code = getattr(fn, "__code__", None)
                if code is not None and code.co_name == where.split(".")[-1] and self.copied(fn):
                    found.append(where)
        return (
            "holds a copy the change's code made under its name (" + ", ".join(found[:8]) + ")"
            if found
            else ""
        )

    def rebound(self, names):
        """The names of a rewritten module (a test module, a conftest) that no longer hold
        what its own import, ``def`` or ``class`` statement bound them to (the module binds
        them no other way), and whether its ``__builtins__`` and pytest's aliases are still
        the interpreter's and pytest's: so package code cannot hand the tests another
        ``pytest`` (whose ``raises`` expects nothing), another ``raises`` or another helper,
        from whatever frame it reaches the module's globals."""
        import builtins

        out = []
        held = names.get("__builtins__", builtins)
        if held is not builtins and held is not vars(builtins):
            out.append("__builtins__")
        for name, modname in REWRITE_NAMES.items():
            if name in names and names[name] is not sys.modules.get(modname):
                out.append(name)
        eligible = self.bindings.get(names.get("__file__"), {})
        recorded = self.bound.get(id(names), (None, {}))[1]
        for name, ways in sorted(eligible.items()):
            then, now = recorded.get(name, _MISSING), names.get(name, _MISSING)
            if then is _MISSING or now is _MISSING:
                continue  # the statement never ran (an import in a try block that failed)
            try:
                same = now is then and any(self._as_bound(now, way, names) for way in ways)
            except Exception:  # an object that raises when asked what it is: not what was bound
                same = False
            if not same:
                out.append(name)
        return out

    def planted(self):
        """What the change's code (a changed or run-written file, or code the change compiled
        under a name of its own) put into the modules the tests import from outside the
        repository: the assertion helpers the tests call (``numpy.testing``'s, ``math.isclose``)
        are theirs, not the change's. Every public name of every module of each such package
        is read at the end, by value (no baseline is needed); not ``builtins`` (snapshotted),
        nor ``sys`` and ``warnings``, whose hook slots (``excepthook``, ``showwarning``)
        applications set, nor private names (``logging.setLoggerClass`` sets one)."""
        guard = getattr(self, "guard", None)
        root = os.path.realpath(self.root)
        out, seen = [], {}
        for name, mod in list(sys.modules.items()):
            top = str(name).split(".")[0]
            if top not in self.imported or top in ("sys", "builtins", "warnings") or mod is None:
                continue
            path = _namespace(mod).get("__file__") or ""
            if not isinstance(path, str) or (path and _inside(os.path.realpath(path), root)):
                continue  # the repository's own package: the change's to shape
            for attr, value in list(_namespace(mod).items()):
                if attr.startswith("_"):
                    continue
                try:  # whatever the value is (a mock answers every attribute)
                    code = getattr(_unwrap(value), "__code__", None)
                    if isinstance(value, type):
                        owner = sys.modules.get(str(getattr(value, "__module__", "")))
                        where = getattr(owner, "__file__", None)
                    else:
                        where = code.co_filename if isinstance(code, types.CodeType) else None
                except Exception:
                    continue
                if not where or not isinstance(where, str):
                    continue
                if where not in seen:
                    own = guard is not None and guard.compiled_only_by_change(where)
                    seen[where] = own if where.startswith("<") else self._file_why(where)
                why = seen[where]
                if why and not str(why).startswith("generated"):
                    out.append(name + "." + attr)
        return sorted(out)

    def unchecked(self, fn):
        """Why a test function that returned normally skipped a comparison every such run of it
        makes (see _must_run): its checker name held something else while it ran, or what ran
        for it was not its body (a replaced runtest or call hook, a swapped ``__code__``: none of
        its numbers is recorded with its code) ("" if not).
        Only for the function itself (not a wrapper that may not call it)."""
        code = _code(getattr(fn, "__func__", fn), self.guard)
        if code is None or code.co_flags & GENERATOR_FLAGS:  # its body may not have run at all
            return ""
        sites = self.required.get((code.co_filename, code.co_name, code.co_firstlineno))
        missed = [n for n in sites or () if (n, code) not in self.hits]
        if not missed:
            return ""
        return (
            "passed with "
            + str(len(missed))
            + " comparison(s) without the runner's checker (a checker name was rebound, or the"
            + " test's own body did not run: its runtest or call hook replaced, its code swapped)"
        )

    def bound_after(self, nodeid):
        """Test module names that no longer hold what their statements bound once a test and its
        fixtures are done (identity only; :meth:`rebound` checks them all again at the end): a
        rebinding undone before the end is caught when it outlives the test."""
        names = self.item_globals.pop(nodeid, None)
        if names is None:
            return
        recorded = self.bound.get(id(names), (None, {}))[1]
        bad = [
            name
            for name in self.bindings.get(names.get("__file__"), {})
            if recorded.get(name, _MISSING) is not _MISSING
            and names.get(name, _MISSING) is not _MISSING
            and names.get(name) is not recorded[name]
        ]
        if bad:
            self.raised.add(nodeid)
            self.tampered.append(
                "test module "
                + str(names.get("__name__"))
                + " no longer held what its own statements bound after test "
                + nodeid
                + ": "
                + ", ".join(sorted(bad)[:8])
            )

    def _check_installed_names(self):
        """:meth:`InstalledNames.replaced` for the packages the tests import."""
        names = getattr(self, "installed_names", None)
        replaced = names.replaced(self.imported) if names is not None else []
        if replaced:
            self.tampered.append(
                "a module the tests import no longer holds what its own code bound: "
                + ", ".join(replaced[:8])
            )
        helpers = names.helpers_replaced() if names is not None else []
        if helpers:
            self.tampered.append(
                "a test helper module of the repository (its assertion helpers are the tests') was"
                " changed by the change: " + ", ".join(helpers[:8])
            )

    def _as_bound(self, value, way, names):
        """Whether ``value`` can be what the statement made, whenever it ran (a thread may
        swap a name between a statement and its record): an ``import``'s name the module
        itself (a module of the repository may be anything), an undecorated def the
        module's own code."""
        if way == "def":
            if isinstance(value, type):
                return getattr(value, "__module__", None) == names.get("__name__")
            return code_file(value) == names.get("__file__")
        if not way:
            return True
        mod = sys.modules.get(way)
        path = getattr(mod, "__file__", None) or ""
        return mod is None or value is mod or _inside(os.path.realpath(path), os.path.realpath(self.root))

    def test_rerouted(self, fn):
        """:meth:`rerouted` for the globals a test function runs with, if its code (whose file
        name no code can change unseen) was compiled by the rewriter."""
        fn = getattr(fn, "__func__", fn)
        code = _code(fn, self.guard)
        if code is None or code.co_filename not in self.rewritten:
            return ""
        self.test_globals[id(fn.__globals__)] = fn.__globals__
        return self.rerouted(fn.__globals__)

    def compared(self, ops, operands, lit=-1):
        """:meth:`check_comparison`, whose own failure is recorded and refused, never raised into
        the test (a test the runner's bug failed would read as an honest failure)."""
        try:
            self.check_comparison(ops, operands, lit)
        except Exception as e:  # the runner's own bug, or an operand built to break the check
            self.raised.add(self.current)
            where = "test " + str(self.current) if self.current else "code outside a test"
            self.tampered.append(
                where
                + " ran a comparison the runner could not check ("
                + type(e).__name__
                + ": "
                + str(e)[:200]
                + ")"
            )

    def check_comparison(self, ops, operands, lit=-1):
        """A comparison in test code said "equal" (``==`` true, ``!=`` false, ``in`` true) of
        ``operands`` (``lit``: which of them the test wrote as a literal, -1 if neither):

        - an operand whose equality is the change's (its class defined by the change's code,
          whatever its ``__eq__`` / ``__ne__`` holds: see :meth:`_eq_why`) must not say it
          equals a value it has never seen (a fresh object, or a fresh value of the other
          side's type): an object equal to everything passes every test and fixes nothing;
          and if it is a ``str`` / ``int`` / ``list`` / ... subclass, the builtin type's own
          equality of its data must agree (a case-insensitive ``str`` equal to a string of
          other case is not; see :func:`_base_eq`);
        - a value compared with a literal must hold that literal's data (:meth:`_holds`): a
          builtin-typed value, or a number type, an array or a class of the repository's that
          is not the change's; not ``mock.ANY``, ``pytest.approx``, a ``UserString`` or a weak
          proxy the code under test returned;
        - a module constant of a test file bound to a literal display must still hold the data
          its statement bound (nothing changed it in place: see ``bound``).

        Elements of builtin containers are looked at too (a list's ``==`` and ``in`` ask its
        elements), up to :data:`COMPARED_BUDGET` values per comparison."""
        why = self._const_changed(operands) if self.consts else ""
        if not why and all(map(_flat, operands)):  # builtin scalars in builtin containers: nothing to ask
            return
        for i, op in enumerate(ops):
            if why:
                break
            a, b = operands[i], operands[i + 1]
            if op == "in":  # a in b: a's ==, and b's elements' == (a container's own __contains__
                # is not asked: a complement set honestly holds whatever it does not exclude)
                why = self._anything_equal(a, None, "==")
                if not why and type(b) in (list, tuple, set, frozenset, dict):
                    why = self._anything_equal(list(itertools.islice(b, COMPARED_BUDGET)), None, "==")
                why = why or self._in_why(a, b, lit)
            elif op in ORDER:
                why = self._order_why(op, a, b)
            elif op in ("==", "!="):
                why = self._anything_equal(a, b, op) or self._anything_equal(b, a, op)
                if not why and op == "==":
                    why = self._approx_why(a, b) or self._approx_why(b, a)
                if not why and lit in (0, 1):
                    why = self._holds(operands[1 - lit], operands[lit])
        if why:
            self.raised.add(self.current)
            where = "test " + str(self.current) if self.current else "code outside a test"
            self.tampered.append(where + " compared " + why)

    def denied(self, op, a, b):
        """``a != b`` said different, or ``a not in b`` said absent: where the method that said
        so is the change's, on a subclass of a builtin type, its builtin data must agree (a list
        whose ``__contains__`` never finds an empty item still holds one)."""
        try:
            if op == "not in":
                kind, name = type(b), "__contains__"
                base = _base(kind)
                if base is None or kind is base or not self._mine_method(kind, name):
                    return
                if not base.__contains__(b, a):
                    return
                what = (
                    "a "
                    + kind.__name__
                    + " whose `not in` says absent where its "
                    + base.__name__
                    + " data holds it"
                )
            else:
                x = next(
                    (
                        v
                        for v in (a, b)
                        if _base(type(v)) not in (None, type(v)) and self._mine_method(type(v), "__ne__")
                    ),
                    None,
                )
                if x is None or not _base_eq(a, b):
                    return
                what = (
                    "a "
                    + type(x).__name__
                    + " whose != says different where its "
                    + _base(type(x)).__name__
                    + " data is equal"
                )
        except Exception:
            return
        self.raised.add(self.current)
        where = "test " + str(self.current) if self.current else "code outside a test"
        self.tampered.append(where + " compared " + what)

    def _mine_method(self, kind, name):
        """Whether ``kind``'s ``name`` is the change's (not the base's unchanged, not a builtin's or
        an installed class's)."""
        if (kind, name) not in self.eq_code:
            self.eq_code[(kind, name)] = self._eq_why(kind, name)
        return bool(self.eq_code[(kind, name)]) and not self._old_method(kind, name)

    def truthy(self, value):
        """A ``not`` in test code (an ``assert``'s own test among them) read ``value``: a subclass
        of a builtin type whose ``__bool__`` / ``__len__`` is the change's must be as true as its
        builtin data (a list of errors whose ``__len__`` says 0 is not empty)."""
        try:
            kind = type(value)
            base = _base(kind)
            if base is None or kind is base:
                return
            names = [
                n
                for n in ("__bool__", "__len__")
                if n in vars(_provider(kind, n)) and _provider(kind, n) is not base
            ]
            if not any(self._eq_why(kind, n) and not self._old_method(kind, n) for n in names):
                return
            data = _number_data(value)
            if data is value or bool(value) == bool(data):
                return
        except Exception:
            return
        self.raised.add(self.current)
        where = "test " + str(self.current) if self.current else "code outside a test"
        self.tampered.append(
            where + " read the truth of a " + kind.__name__ + " that is not its " + base.__name__ + " data's"
        )

    def _order_why(self, op, a, b):
        """Why ``a OP b`` (an order comparison that said true) does not hold ("" if it does), when
        an operand's order method is the change's (not the repository's as the base had it, not an
        installed class's): it holds against a fresh object (an order that holds against
        anything), or a builtin subclass among the operands is not so ordered by its builtin data
        (an ``int`` of the change's whose ``__le__`` says True)."""
        compare, left, right = ORDER[op]
        mine = False
        for x, name in ((a, left), (b, right)):
            cls = type(x)
            if cls in PLAIN or cls in CONTAINERS:
                continue
            if (cls, name) not in self.eq_code:
                self.eq_code[(cls, name)] = self._eq_why(cls, name)
            where = self.eq_code[(cls, name)]
            if not where or self._old_method(cls, name):
                continue
            mine = True
            try:
                said = _slot(x, name, object())
            except Exception:
                continue
            if _truth(said) is True:
                return (
                    "a " + cls.__name__ + " whose " + name + " says it holds against anything (" + where + ")"
                )
        if not mine:
            return ""
        da, db = _number_data(a), _number_data(b)
        if da is a and db is b:
            return ""
        try:
            said = compare(da, db)
        except Exception:
            said = None
        if said is not False:
            return ""
        x = a if da is not a else b
        kind = _base(type(x))
        return (
            "a " + type(x).__name__ + " whose " + op + " says true where its "
            + (kind.__name__ if kind is not None else "builtin") + " data does not"
        )  # fmt: skip

    def _approx_why(self, value, other):
        """Why ``value``, said equal to ``pytest.approx(...)`` (``other``), is not approximately
        the expected value by its builtin data ("" if it is): approx subtracts the two, so a
        ``float`` subclass whose ``__rsub__`` says 0 would pass with any data."""
        if not _approx(other):
            return ""
        plain = _number_data(value)
        if plain is value:
            return ""
        try:
            said = other == plain
            ok = said is True or (said is not False and bool(said))
        except Exception:
            ok = False
        return (
            ""
            if ok
            else "a " + type(value).__name__ + " equal to pytest.approx(...) whose number data is not"
        )

    def almost_why(self, first, second, check):
        """``assertAlmostEqual`` passed by arithmetic (its operands not ``==``): ``check`` (the
        original assert) must pass on their builtin number data too; else record why."""
        plain = (_number_data(first), _number_data(second))
        if plain[0] is first and plain[1] is second:
            return
        try:
            check(*plain)
        except AssertionError:
            kind = type(first if plain[0] is not first else second).__name__
            self.raised.add(self.current)
            where = "test " + str(self.current) if self.current else "code outside a test"
            self.tampered.append(
                where + " passed assertAlmostEqual with a " + kind + " whose number data is not almost equal"
            )

    def _const_changed(self, operands):
        """Why an operand is a test module's literal constant whose data was changed in place
        since its statement bound it ("" if none)."""
        for x in operands:
            hit = self.consts.get(id(x))
            if hit is not None and hit[0] is x and not _same_data(x, hit[1]):
                return (
                    hit[2] + " of test module " + str(hit[3]) + " after its data was changed in place"
                    " (it no longer holds the literal its statement bound)"
                )
        return ""

    def _anything_equal(self, value, other, op):
        """Only the method the comparison ran is asked (``!=`` on the operands themselves,
        ``==`` on elements, as a container compares them): an honest class's ``__ne__``
        written ``not self.__eq__(other)`` says False to a foreign object, and a test that
        only used ``==`` must not be refused for it."""
        todo, budget = [(value, other, op)], COMPARED_BUDGET
        while todo and budget > 0:
            x, o, op = todo.pop()
            budget -= 1
            kind = type(x)
            if kind in PLAIN:  # compared in C, nothing inside
                continue
            why = self._equal_to_anything(x, o, op)
            if why:
                return why
            if isinstance(x, (list, tuple)) and isinstance(o, (list, tuple)):
                todo.extend((a, b, "==") for a, b in zip(x[:budget], o[:budget]))  # noqa: B905 (3.6 syntax)
            elif isinstance(x, dict) and isinstance(o, dict):
                todo.extend((v, dict.get(o, k), "==") for k, v in list(dict.items(x))[:budget])
            elif isinstance(x, (list, tuple, set, frozenset, dict)):
                todo.extend((v, None, "==") for v in list(x.values() if isinstance(x, dict) else x)[:budget])
            elif _provider(kind, "__eq__") is not object:  # an object that compares its fields
                mine = _fields(x)
                if mine:
                    theirs = _fields(o) if type(o) is kind else {}
                    todo.extend((v, theirs.get(k), "==") for k, v in list(mine.items())[:budget])
        return ""

    CLAIMS = {"==": ("__eq__", True), "!=": ("__ne__", False)}

    def _equal_to_anything(self, x, other, op):
        cls = type(x)
        name, claims = self.CLAIMS[op]
        if (cls, name) not in self.eq_code:  # once per type and method: is it the change's
            self.eq_code[(cls, name)] = self._eq_why(cls, name)
        where = self.eq_code[(cls, name)]
        if not where:
            return ""
        for probe in (object(), _probe(other)):
            # no fresh value of that type: nothing to ask (False would read as __ne__'s "equal")
            if probe is None:
                continue
            try:
                said = _slot(x, name, probe)
            except Exception:
                continue
            if _truth(said) is claims and not (name == "__ne__" and _declines(x, probe)):
                return "a " + cls.__name__ + " whose " + name + " says it equals anything (" + where + ")"
        base = _base(cls)
        if (
            base is not None
            and other is not None
            and not _base_eq(x, other)
            and not self._old_method(cls, name)
        ):
            return (
                "a " + cls.__name__ + " whose " + name + " says equal where its " + base.__name__
                + " data is not (" + where + ")"
            )  # fmt: skip
        return ""

    def _eq_why(self, cls, name):
        """Why ``cls``'s ``name`` (``__eq__`` / ``__ne__``) is the change's ("" if not): the class
        that provides it is defined by the change's code (its module's file, or any function
        of it, is a changed, run-written or change-compiled file), whatever object the
        attribute holds (a function, a builtin, a ``functools.partial``, a slot wrapper); or
        the attribute is code of the change's; or it is not a Python function and its class is
        not where its module holds it."""
        provider = next((k for k in cls.__mro__ if name in vars(k)), None)
        if provider is None or provider.__module__ == "builtins":
            return ""
        fn = _unwrap(vars(provider)[name])
        fn = getattr(fn, "func", fn) if type(fn).__name__ == "partial" else fn
        fn = getattr(fn, "__func__", fn)
        python = isinstance(getattr(fn, "__code__", None), types.CodeType)
        if python and not _frozen_std(fn):
            why = self._file_why(code_file(fn))
            if why:
                return why
        why = self._class_why(provider)
        if why:
            return why
        mod = sys.modules.get(str(provider.__module__))
        if not python and _namespace(mod).get(provider.__name__) is not provider:
            return "class " + provider.__qualname__ + ", which no module holds, with a " + type(fn).__name__
        return ""

    def _class_why(self, klass):
        """Why ``klass`` is defined by the change's code ("" if not): its module's file, or the
        file of any function it defines, is a changed, run-written or change-compiled file."""
        mod = sys.modules.get(str(klass.__module__))
        path = _namespace(mod).get("__file__") if mod is not None else None
        files = [path] if isinstance(path, str) and path else []
        for value in list(vars(klass).values()):
            code = getattr(_unwrap(value), "__code__", None)
            if isinstance(code, types.CodeType) and not code.co_filename.startswith("<"):
                files.append(code.co_filename)
        for path in files:
            why = self._file_why(path)
            if why and not why.startswith("code from a file that does not exist"):
                return "class " + klass.__qualname__ + " from " + why
        return ""

    def _holds(self, value, lit):
        """Why ``value``, which a comparison said equals ``lit`` (what the test wrote as a
        literal), does not hold that literal's data ("" if it does): it must be of a builtin
        type (a subclass's data equal to the literal's by the builtin's own equality), or a
        number, an array or a class of the repository's that is not the change's; element by
        element for containers (an element the test did not write as data: its own ``==``)."""
        todo, budget, kinds = [(value, lit)], COMPARED_BUDGET, self.kinds
        while todo and budget > 0:
            x, want = todo.pop()
            budget -= 1
            kind, wkind = type(x), type(want)
            if kind in PLAIN or not (wkind in PLAIN or wkind in CONTAINERS):
                continue
            how = kinds.get(kind)
            if how is None:
                how = kinds[kind] = self._kind(kind)
            if how == "data":
                base = _base(kind)
                if base is not None and kind is not base and not _base_eq(x, want):
                    return "a " + kind.__name__ + " whose " + base.__name__ + " data is not the literal's"
                if isinstance(x, (list, tuple)) and wkind in (list, tuple):
                    todo.extend(zip(x[:budget], want[:budget]))  # noqa: B905 (3.6 syntax)
                elif isinstance(x, dict) and wkind is dict:
                    todo.extend((v, _value_at(want, k)) for k, v in list(dict.items(x))[:budget])
                elif wkind in CONTAINERS and not isinstance(x, (str, bytes, bytearray, int, float, complex)):
                    todo.extend((e, _match(e, want)) for e in list(itertools.islice(x, budget)))
            elif how == "wrapper":  # a collections.UserString / UserList / UserDict: its .data
                data = vars(x).get("data", _MISSING) if hasattr(x, "__dict__") else _MISSING
                if data is _MISSING:
                    return "a " + kind.__name__ + " without its own .data where the test wrote a literal"
                todo.append((data, want))
            elif how in ("mapping", "items", "bytes"):  # an installed container: its data, read
                try:
                    if how == "mapping":
                        data = dict(itertools.islice(x.items(), budget))
                    else:
                        data = bytes(x) if how == "bytes" else list(itertools.islice(iter(x), budget))
                except Exception:
                    return "a " + kind.__name__ + " whose data cannot be read where the test wrote a literal"
                todo.append((data, want))
            elif how == "array":  # numbers hold data; an array of objects: look inside
                dtype = getattr(x, "dtype", None)
                if getattr(dtype, "kind", "O") == "O" and callable(getattr(x, "tolist", None)):
                    todo.append((x.tolist(), want))
            elif how not in ("number", "repository"):
                return "a " + kind.__name__ + how
        return ""

    def _kind(self, kind):
        """How :meth:`_holds` reads a value of type ``kind`` compared with a literal: "data" (a
        builtin type or subclass), "number" / "array" / "repository" (not the change's), or
        why it cannot hold a literal's data."""
        base = _base(kind)
        if base is not None and kind is not base and self._own_kept(kind):
            return "repository"  # boltons' OrderedMultiDict: its equality is not its dict data's
        if base is not None or kind in CONTAINERS:
            return "data"
        mine = [n for n in ("__eq__", "__ne__") if self._eq_why(kind, n)]
        if mine and not all(self._old_method(kind, n) for n in mine):
            return " where the test wrote a literal (its equality is the change's)"
        if _wrapper(kind):
            return "wrapper"
        import numbers

        if issubclass(kind, numbers.Number):
            return "number"
        if getattr(kind, "__array__", None) is not None:
            return "array"
        if any(
            self._class_why(k) and not self._in_base(k) for k in kind.__mro__ if k.__module__ != "builtins"
        ):
            return (  # its equality is an installed class's (its own was asked above): not data
                " (a class of the change's whose equality is " + str(_provider(kind, "__eq__").__module__)
                + "'s) where the test wrote a literal: a value compared with a literal must hold that literal's data"
            )  # fmt: skip
        mod = sys.modules.get(str(getattr(kind, "__module__", "")))
        path = _namespace(mod).get("__file__") if mod is not None else None
        if isinstance(path, str) and _inside(os.path.realpath(path), os.path.realpath(self.root)):
            return "repository"  # the repository's own class (not the change's): the tests are written against it
        import collections.abc as abc

        if kind is memoryview:
            return "bytes"
        if issubclass(kind, abc.Mapping):  # MappingProxyType, an installed frozendict: read by their items
            return "mapping"
        if issubclass(kind, (abc.Sequence, abc.Set)):
            return "items"
        return (
            " (" + str(getattr(kind, "__module__", "?")) + ") where the test wrote a literal: a value"
            " compared with a literal must hold that literal's data"
        )

    def _own_kept(self, kind):
        """Whether the builtin subclass ``kind`` is a class of the repository with an equality of
        its own that is not the change's (its file untouched, or its ``__eq__`` / ``__ne__`` as
        the base commit had them): the tests are written against that equality, not the data."""
        mod = sys.modules.get(str(getattr(kind, "__module__", "")))
        path = _namespace(mod).get("__file__") if mod is not None else None
        if not isinstance(path, str) or not _inside(os.path.realpath(path), os.path.realpath(self.root)):
            return False
        own = [
            n
            for n in ("__eq__", "__ne__")
            if getattr(_provider(kind, n), "__module__", "builtins") != "builtins"
        ]
        return bool(own) and all(not self._eq_why(kind, n) or self._old_method(kind, n) for n in own)

    def _trees(self, path):
        """(the base commit's syntax tree, the tree now) of the repository file ``path`` that the
        change touched, None if the base had no such file (or it does not parse)."""
        full = os.path.realpath(path)
        rel = os.path.relpath(full, os.path.realpath(self.root))
        if rel not in self.trees:
            import ast

            trees = None
            text, now = self.base_src.get(rel), self.now_src.get(rel)
            if (
                text is not None
                and now is not None
                and self._file_why(full) == "a file the change touched: " + rel
            ):
                try:
                    trees = (ast.parse(text), ast.parse(now))
                except (SyntaxError, ValueError):
                    trees = None
            self.trees[rel] = trees
        return self.trees[rel]

    def unchanged_def(self, code):
        """Whether ``code`` is a function's whose ``def``, in a file the change touched, is the
        base commit's, unchanged (the same path of class and function names, the same syntax
        tree): the repository's own function (boltons' ``tbutils`` taking frames, a fix
        elsewhere in its file), not the change's."""
        hit = self.kept_code.get(code)
        if hit is None:
            import ast

            trees, hit = self._trees(code.co_filename), False
            if trees is not None:
                now, line = _defs_by_path(ast, trees[1]), code.co_firstlineno
                path = next(
                    (k for k, (_, first) in now.items() if k[-1] == code.co_name and line in first), None
                )
                if path is None and code.co_name.startswith(
                    "<"
                ):  # a comprehension, lambda: the def around it
                    around = [
                        k for k, (n, f) in now.items() if min(f) <= line <= getattr(n, "end_lineno", -1)
                    ]
                    path = max(around, key=lambda k: now[k][0].lineno, default=None)
                was = _defs_by_path(ast, trees[0]).get(path) if path is not None else None
                hit = was is not None and ast.dump(was[0]) == ast.dump(now[path][0])
            self.kept_code[code] = hit
        return hit

    def _in_base(self, klass):
        """Whether ``klass``, of a file the change touched, is a class the base commit's text of
        that file defines (same qualified name), held where its module holds it: the
        repository's class, not one the change added."""
        qual = getattr(klass, "__qualname__", "")
        mod = sys.modules.get(str(getattr(klass, "__module__", "")))
        path = _namespace(mod).get("__file__") if mod is not None else None
        if not isinstance(path, str) or "<" in qual:
            return False
        held = mod
        for part in qual.split("."):
            if isinstance(held, types.ModuleType):
                held = _namespace(held).get(part)
            elif isinstance(held, type):
                held = vars(held).get(part)
            else:
                return False
        trees = self._trees(path) if held is klass else None
        return trees is not None and _class_node(trees[0], qual) is not None

    def _old_method(self, cls, name):
        """Whether ``cls``'s ``name`` (``__eq__`` / ``__ne__``) is a method the base commit already
        had, unchanged: a ``def`` in a class the base defines (:meth:`_in_base`) whose syntax tree
        is the base's. An honest fix that touches the file of a value class (sympy's numbers,
        astropy's quantities) keeps its comparisons with literals; a class the change added, or
        an ``__eq__`` it rewrote, does not."""
        provider = _provider(cls, name)
        fn = vars(provider).get(name)
        if type(fn) is not types.FunctionType or not self._in_base(provider):
            return False
        for _ in range(8):  # a decorated def (functools.wraps): the def is the innermost function;
            inner = getattr(fn, "__wrapped__", None)  # each wrapper's code must be the base's own
            if type(inner) is not types.FunctionType:
                break
            if self._file_why(fn.__code__.co_filename):
                return False
            fn = inner
        mod = sys.modules.get(str(provider.__module__))
        path = _namespace(mod).get("__file__") if mod is not None else None
        if os.path.realpath(fn.__code__.co_filename) != os.path.realpath(str(path)):
            return False
        trees = self._trees(path)
        import ast

        was, now = (_member(_class_node(t, provider.__qualname__), name) for t in trees)
        if was is None or now is None or ast.dump(was) != ast.dump(now):
            return False
        first = min([now.lineno] + [d.lineno for d in now.decorator_list])
        return fn.__code__.co_name == name and fn.__code__.co_firstlineno in (first, now.lineno)

    def _in_why(self, a, b, lit):
        """``a in b`` said found: with a literal container, ``a`` must hold the data of one of
        its elements; with a literal needle and a builtin container, one of the container's
        elements must hold the needle's data (a text's own ``in`` must find it in its text);
        a needle whose equality is the change's, in a builtin container, must equal one of its
        elements by its builtin data."""
        if lit == 1 or (lit == 0 and isinstance(b, (list, tuple, set, frozenset, dict))):
            needle, items = (a, b) if lit == 1 else (None, b)
            pool = list(itertools.islice(b, COMPARED_BUDGET))
            if lit == 0 and isinstance(b, (set, frozenset, dict)) and len(pool) == COMPARED_BUDGET:
                pool = _hashed_like(b, a)  # (``"name" in sys.modules``: hundreds of keys)
            for e in pool:
                try:
                    if (a == e) is True and not (self._holds(a, e) if lit == 1 else self._holds(e, a)):
                        return ""
                except Exception:
                    continue
            what = needle if needle is not None else next(iter(items), None)
            return (
                "a "
                + type(what).__name__
                + " found "
                + ("in a literal" if lit == 1 else "holding a literal")
                + " whose data none of the elements hold"
            )
        if lit == 0 and isinstance(b, (str, bytes, bytearray)):
            if not _base(type(b)).__contains__(b, a):
                return (
                    "a "
                    + type(b).__name__
                    + " said to contain a literal its "
                    + _base(type(b)).__name__
                    + " data does not"
                )
            return ""
        kind = _base(type(a))
        if kind is not None and type(a) is not kind and isinstance(b, (list, tuple, set, frozenset, dict)):
            where = self._eq_why(type(a), "__eq__")
            if where and not any(_base_eq(a, e) for e in itertools.islice(b, COMPARED_BUDGET)):
                return (
                    "a "
                    + type(a).__name__
                    + " found in a container none of whose elements holds its "
                    + kind.__name__
                    + " data ("
                    + where
                    + ")"
                )
        return ""

    def pytest_configure(self, config):
        self.config = config
        self.rewrites = getattr(config.option, "assertmode", "rewrite") == "rewrite"
        os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)  # the tests' own pytest runs autoload
        self.startup = [impl.function for _, impl in self.hookimpls(config)]  # kept alive: ids stay unique
        self.startup_fns = {f for f in self.startup if type(f) is types.FunctionType}  # by hash: no id()
        self.startup_ids = set(map(id, (f for f in self.startup if type(f) is not types.FunctionType)))

    @staticmethod
    def hookimpls(config):
        pm = config.pluginmanager
        for name in dir(pm.hook):
            caller = getattr(pm.hook, name, None)
            for impl in getattr(caller, "get_hookimpls", lambda: [])():
                yield name, impl

    def pytest_collection_finish(self, session):
        """What pytest collected, as it collected it: the item that runs for a node id must be
        that one, of that class (``session.items`` is a plain list that any code holding the
        session, e.g. through the rewrite hook on ``sys.meta_path``, can refill)."""
        self.collected = {item.nodeid: (item, type(item), _params(item)) for item in session.items}
        self.declared_xfail = {
            item.nodeid for item in session.items if _declares_xfail(item, self.xfail_trees)
        }

    def not_collected(self, item):
        """Why ``item`` is not the test pytest collected under its node id ("" if it is)."""
        if self.collected is None:
            return "an item run before collection finished"
        held = self.collected.get(item.nodeid)
        if held is None:
            return "an item pytest did not collect"
        if held[0] is not item:
            return "another item carrying its node id"
        if type(item) is not held[1]:
            return "an item whose class was changed to " + type(item).__qualname__
        why = self.params_why.pop(item.nodeid, None)
        return self.params_changed(item) if why is None else why

    def params_changed(self, item):
        """Why ``item``'s parameters are not the objects collection gave it ("" if they are).
        Asked as its setup starts (a plugin such as pytest-lazy-fixture fills its own values in
        during setup), else at its call."""
        held = (self.collected or {}).get(item.nodeid)
        if held is None or held[0] is not item:
            return ""
        now, then = _params(item) or {}, held[2] or {}
        changed = sorted(
            str(k) for k in set(now) | set(then) if k not in now or k not in then or now[k] is not then[k]
        )
        return (
            "an item whose parameters were changed after collection: " + ", ".join(changed) if changed else ""
        )

    def body_why(self, item):
        """Why ``item``'s passing call does not count: the function its file defines for it
        (in its class or a base class), called by pytest itself, did not run its body to the end
        during the call ("" if it did, or the item has no such function: an alias, a doctest,
        another plugin's item, a test wrapped by a decorator of the tests, which may skip it)."""
        module = getattr(item, "module", None)
        path = getattr(module, "__file__", None)
        if not path or not self.was_rewritten(path):
            return ""
        name = getattr(item, "originalname", None) or getattr(item, "name", "")
        code = _code(getattr(item, "obj", None), self.guard)
        if code is None or code.co_name != name or self.real(code.co_filename) != self.real(path):
            return ""  # a wrapper of the tests' own decides whether the body runs (one may skip it)
        classes = [c.__name__ for c in getattr(getattr(item, "cls", None), "__mro__", ())] or [None]
        keys = [body_key(path, c, name, self.real) for c in classes]
        ran = [self.bodies[k] for k in keys if k in self.bodies]
        if not ran:
            defs = self.defs.get(self.real(path), {})
            if not any((c, name) in defs for c in classes):
                return ""  # no def of that name where the item is (an alias such as test_b = test_a)
            return "its body never ran"
        if "done" in ran:
            return ""
        return "its body " + ("raised" if "raised" in ran else "did not reach its end")

    def was_rewritten(self, path):
        """Whether the module at ``path`` (any spelling of it) is one the runner transformed."""
        if path in self.rewritten:
            return True
        if len(self.rewritten_real) != len(self.rewritten):
            self.rewritten_real = {self.real(p) for p in self.rewritten}
        return self.real(path) in self.rewritten_real

    def unwatched(self, item):
        """Why the module of ``item``'s test ran without the runner's checks ("" if it did):
        every test module of the repository pytest rewrites is transformed (its comparisons
        watched); one the rewrite hook was made to pass over loads as plain Python."""
        module = getattr(item, "module", None)
        path = getattr(module, "__file__", None)
        if not self.rewrites or not path or not _inside(self.real(path), self.real(self.root)):
            return ""
        if self.was_rewritten(path):
            return ""
        return "a module loaded without assertion rewriting (its comparisons unwatched): " + path

    def pytest_runtest_logreport(self, report):
        phases = self.phases.setdefault(report.nodeid, {})
        phases[report.when] = (report.outcome, bool(getattr(report, "wasxfail", False)))
        if report.when == "teardown":
            self.bound_after(report.nodeid)
            self._finish(report.nodeid)

    def _finish(self, nodeid):
        phases = self.phases.pop(nodeid)
        setup, call, teardown = (phases.get(w, (None, False)) for w in ("setup", "call", "teardown"))
        if call[0] == "failed":
            status = "FAILED"
        elif "failed" in (setup[0], teardown[0]):
            status = "ERROR"
        elif "skipped" in (setup[0], call[0]):  # an expected failure only where its test file says so
            status = "XFAIL" if (setup[1] or call[1]) and nodeid in self.declared_xfail else "SKIPPED"
        elif call[0] == "passed":
            status = "XPASS" if call[1] else "PASSED"
        else:
            status = "ERROR"  # no call phase reported
        if status == "PASSED" and (nodeid in self.raised or nodeid not in self.called):
            status = "FAILED"  # (a call phase the runner's wrapper did not see: not this item's)
        body = self.body_failed.pop(nodeid, "")
        if status == "PASSED" and body:
            status = "FAILED"
            self.tampered.append("test " + nodeid + " was reported passed but " + body)
        self.results[nodeid] = status  # a rerun plugin's last attempt wins
        self.unsent[nodeid] = None  # written once another test starts (see send_finished), or at the end

    def send_finished(self, starting):
        """A test starts: write the status of every test finished before it but this one (a rerun
        plugin runs a test again at once, and its last attempt counts). Code that reaches this
        reporter (the plugin manager hands it out) can then no longer rewrite what an earlier test
        reported; a second record for a test is refused by the supervisor."""
        for nodeid in [n for n in self.unsent if n != starting]:
            del self.unsent[nodeid]
            self.channel.write({"test": nodeid, "status": self.results[nodeid]})

    def pytest_sessionfinish(self, session):
        self.check(session.config)

    def check(self, config):
        guard = getattr(self, "guard", None)
        touched = guard.touched if guard is not None and guard.installed else None
        changed = changed_since(self.seen, self._foreign, touched)
        if changed:
            self.tampered.append("the test framework was modified during the run: " + ", ".join(changed[:8]))
        spaces = list(self.test_globals.values())  # and every module loaded from a rewritten file
        spaces += [
            d for d in map(_namespace, list(sys.modules.values())) if d.get("__file__") in self.rewritten
        ]
        planted = self.planted()
        if planted:
            self.tampered.append(
                "the change's code was put into a module the tests import: " + ", ".join(planted[:8])
            )
        self._check_installed_names()
        for names in spaces:
            why = self.rerouted(names) or self.copies_held(names)
            if why:
                self.tampered.append("test module " + str(names.get("__name__")) + " " + why)
            rebound = self.rebound(names)
            if rebound:
                self.tampered.append(
                    "test module "
                    + str(names.get("__name__"))
                    + " no longer holds what its own statements bound: "
                    + ", ".join(rebound[:8])
                )
        if config is None:
            return
        for name, impl in self.hookimpls(config):
            # Plugins loaded while pytest configured itself are the base's (builtins, entry
            # points, initial conftests); one registered later must come from a base file.
            fn = impl.function
            if fn in self.startup_fns if type(fn) is types.FunctionType else id(fn) in self.startup_ids:
                continue
            why = self._foreign(impl.function) or self._plugin_why(impl.plugin)
            if why:
                self.tampered.append(f"hook {name} registered by {why}")

    def close(self, exit_code):
        if not self.tampered:
            self.check(self.config)
        guard = getattr(self, "guard", None)
        self.tampered += guard.found[:8] if guard is not None else []
        if guard is not None and not guard.threads_watched():
            self.tampered.append("the runner's thread starter was replaced during the run")
        others = guard.other_writers() if guard is not None else []
        if others:
            self.tampered.append(
                "files of the tests were changed during the run by another process: " + ", ".join(others[:8])
            )
        for nodeid in list(self.unsent):
            self.channel.write({"test": nodeid, "status": self.results[nodeid]})
        self.channel.write(
            {
                "end": True,
                "exit": int(exit_code),
                "tests": len(self.results),
                "tampered": sorted(set(self.tampered)),
            }
        )


class Guard:
    """An audit hook (Python 3.8+; it cannot be removed once added): the operations that reach
    the runner's and the framework's objects, rewrite code in place, or write what the run
    reads as its own, when the change's code asks for them (a frame of a changed file, or of
    code the change compiled, is on the stack). Recorded, never blocked."""

    REACH = {
        "gc.get_objects": "reached every object (gc.get_objects)",
        "gc.get_referrers": "reached objects through gc.get_referrers",
        "gc.get_referents": "reached objects through gc.get_referents",
        "sys._current_frames": "reached other threads' frames",
        "sys.setprofile": "installed a profile hook",
        "sys.settrace": "installed a trace hook",
        "marshal.loads": "loaded code from bytes (marshal), under whatever file name they carry",
        "marshal.load": "loaded code from a file through marshal, under whatever file name it carries",
    }
    CTYPES = frozenset(
        (
            "ctypes.cdata",
            "ctypes.cdata/buffer",
            "ctypes.string_at",
            "ctypes.wstring_at",
            "ctypes.addressof",
            "ctypes.call_function",
            "ctypes.dlsym",
            "ctypes.dlsym/handle",
        )
    )
    """ctypes reaching raw memory or C functions: any object's insides (a test's constants) with
    no other event. Blamed on the code that called ctypes itself (see :meth:`_ctypes_caller`)."""
    EVENTS = (
        frozenset(REACH)
        | CTYPES
        | {
            "object.__setattr__",
            "compile",
            "code.__new__",
            "open",
            "os.rename",
            "os.remove",
            "os.truncate",
            "os.symlink",
            "os.link",
            "function.__new__",
            "os.utime",
            "os.chmod",
            "os.chown",
            "sys._getframe",
            "object.__getattr__",
        }
    )
    PROC_MEM = re.compile(r"/proc/(self|thread-self|[0-9]+)(/task/[0-9]+)?/mem")
    """A process's memory as a file: writing it rewrites any object (a test's constants) with no
    other event; nothing honest in a test run opens it to write."""

    def __init__(self, root, changed, protected, started, test_dirs=()):
        self.root, self.protected, self.started = root, protected, started
        self.test_dirs = tuple(test_dirs)
        """Directories of the run's tests (a ``tests`` directory, a test file's directory named
        for tests): the files they held before the run (data, expected output) are the tests'."""
        self.before = _listing(self.test_dirs)  # taken before any code of the repository runs
        self.wrote_tests = set()
        self.code_dirs = {root} | {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
        self.changed = {os.path.realpath(os.path.join(root, p)) for p in changed}
        self.tainted, self.found, self.busy, self.cache = set(), [], False, {}
        self.touched = []
        """Every object an ``object.__setattr__`` event named (a function's body, defaults and
        keyword defaults are assigned only through it): the only bodies :func:`changed_since`
        reads."""
        self.installed = False
        self.threads = {}
        """{thread ident: changed file} for each running thread the change's code started (see
        :meth:`watch_threads`): what such a thread does is the change's."""
        self.hands = {}  # co_filename -> what of it hands frames or text to its caller (HANDS)
        self.sources = set()  # the files pytest rewrote (the reporter's set, shared once it exists)
        self.kept = lambda code: False  # Reporter.unchanged_def once it exists (see asker)
        self.bytecode = set()  # bytecode caches this process wrote (its import system, pytest's rewriter)
        self.copied, self.copies = {}, {}
        """{id(code): (code, [functions with it], their ids)} for each code object the change's code
        made a function from (``types.FunctionType``), the functions as they were when it first
        did; and {id: function} of the copies whose body or defaults the change's code then set
        (both kept alive: an id is an object's only while it lives)."""
        self.made, self.shared = set(), set()
        """Names (``<...>``) of code the change's code compiled, and of code other code compiled: a
        function built from a name only the change used is the change's own, whose body and
        defaults it may set (boltons' ``FunctionBuilder``); a shared name (``<string>``: every
        ``exec`` of text, every dataclass ``__init__``) is nobody's."""

    def compiled_only_by_change(self, name):
        """Whether the change's code compiled under the ``<...>`` name ``name`` and no other code did."""
        return name in self.made and name not in self.shared

    @staticmethod
    def _stdlib_made(fn):
        """Whether ``fn`` is a function the standard library generated (``eval`` under a
        ``<...>`` name, no file's function) being given its defaults by the standard library's
        own statement: ``namedtuple``'s ``__new__`` (a ``typing.NamedTuple`` with defaults that
        a changed file defines; a fix to parso's tokenizer was refused so)."""
        name = getattr(getattr(fn, "__code__", None), "co_filename", None)
        if not isinstance(name, str) or not name.startswith("<"):
            return False
        return bool(_stdlib_module(sys._getframe(3).f_code.co_filename))  # past _check and the hook

    def _mine(self, code):
        """Whether ``code`` is the change's own: from a changed file, or compiled by the change's
        code under a ``<...>`` name no other code compiled under."""
        name = getattr(code, "co_filename", None)
        return isinstance(name, str) and (self.compiled_only_by_change(name) or self._ours(name))

    def _copy(self, fn):
        """Whether ``fn`` is a function the change's code made from another's code (a copy): one
        whose body or defaults the change set before, or one with code the change's code made a
        function from that did not exist when it first did. Everything else with that code (the
        test itself, and whatever existed before) is not the change's, whatever it does to it."""
        if id(fn) in self.copies:
            return True
        code = _code(fn, self)
        return id(code) in self.copied and id(fn) not in self.copied[id(code)][2]

    def copy_why(self, fn):
        """Why ``fn`` (a test's function, or a test module's global under its own name) is not what
        the test's file made: a copy the change's code made ("" if it is not)."""
        fn = getattr(fn, "__func__", fn)
        if not self._copy(fn):
            return ""
        return (
            "a copy the change's code made of "
            + str(getattr(fn, "__qualname__", fn))
            + " (or one made after it first copied that code)"
        )

    def other_writers(self):
        """The files of the test directories that another process (the change's code can start
        one: no audit hook of this process sees it) wrote, moved or removed during the run:
        changed since :attr:`before` and not written by this process itself."""
        now = _listing(self.test_dirs)
        return sorted(p for p, was in self.before.items() if now.get(p) != was and p not in self.wrote_tests)

    def _ours(self, filename):
        hit = self.cache.get(filename)
        if hit is None:
            hit = filename in self.tainted or (
                not filename.startswith("<")
                and os.path.realpath(os.path.join(self.root, filename)) in self.changed
            )
            self.cache[filename] = hit
        return hit

    def culprit(self, importing=False, named=None):
        """The changed (or change-compiled) file with a frame on the stack ("" if none). With
        ``importing``, "" also when the import system's own ``get_code`` is between: it caches
        the bytecode of a module the change imports (the cache holds the module's real text).
        With ``named`` (a file code is made under), "" also when a frame of that file comes
        first: the file is making its own code (asyncio's module applies ``types.coroutine``,
        which rebuilds a code object under asyncio's name, while the change imports it)."""
        f = sys._getframe(1)
        while f is not None:
            code = f.f_code
            if (
                importing
                and code.co_name == "get_code"
                and code.co_filename.startswith(("<frozen importlib", "<frozen zipimport"))
            ):
                return ""
            if named is not None and code.co_filename == named:
                return ""
            if self._ours(code.co_filename):
                return code.co_filename
            f = f.f_back
        return self._thread_owner()

    def _thread_owner(self):
        """The changed file that started the running thread ("" if none, or the main thread):
        what a thread of the change's does is the change's, though no frame of it is on the
        thread's stack (a thread whose target is ``importlib.import_module`` or a C function)."""
        if not self.threads:
            return ""
        import _thread

        return self.threads.get(_thread.get_ident(), "")

    def watch_threads(self):
        """Start every thread through a wrapper that notes which changed file started it (no audit
        event tells, before Python 3.13). ``threading`` starts its threads with the function it
        bound at import, so both names are replaced; :meth:`threads_watched` tells whether they
        still hold the wrapper at the end."""
        import _thread
        import threading

        start, get_ident = _thread.start_new_thread, _thread.get_ident
        owners = self.threads

        def start_new_thread(function, args, kwargs=None):
            who = self.culprit()
            if not who:
                return start(function, args, kwargs or {})

            def run(*a, **k):
                owners[get_ident()] = who
                try:
                    return function(*a, **k)
                finally:
                    owners.pop(get_ident(), None)

            return start(run, args, kwargs or {})

        self.thread_starter = start_new_thread
        _thread.start_new_thread = threading._start_new_thread = start_new_thread

    def threads_watched(self):
        import _thread
        import threading

        starter = getattr(self, "thread_starter", None)
        return starter is None or _thread.start_new_thread is threading._start_new_thread is starter

    def asker(self, depth, also=()):
        """The frame that asked for what the frame ``depth`` levels up did: that frame, or, while
        it is a standard-library function that hands frames or text to its caller (HANDS, or any
        function of the standard-library modules ``also``), its caller. Only the asker is blamed:
        a frame of the change further up the stack is not (its logging, warnings and namedtuples
        take frames for their own use)."""
        f = sys._getframe(depth + 1)
        while f is not None and (
            self._hands(f.f_code)
            or (also and _stdlib_module(f.f_code.co_filename) in also)
            or (self._mine(f.f_code) and self.kept(f.f_code))
        ):
            f = f.f_back  # a function of a changed file that the change left as the base had it hands too
        return f

    def own(self, fn, *args):
        """``fn(*args)`` as the runner's own doing: the events it raises (frames taken, code read)
        are no one's question for the guard."""
        if self.busy:
            return fn(*args)
        self.busy = True
        try:
            return fn(*args)
        finally:
            self.busy = False

    def _blame_reader(self, f, what):
        """Record ``what`` as the change's doing when the asking frame ``f`` is the change's code,
        or the running thread is one the change started (its target may be C code)."""
        who = f.f_code.co_filename if f is not None and self._mine(f.f_code) else self._thread_owner()
        why = "the change's code (" + str(who) + ") " + what
        if who and why not in self.found:
            self.found.append(why)

    def read_current_test(self):
        """Record the change's code reading ``PYTEST_CURRENT_TEST`` (see _hide_current_test): the
        asker above ``os.environ``'s own and its mapping methods' frames."""
        f = self.asker(4, also=("os", "_collections_abc"))  # read_current_test, own, decodevalue, os's
        self._blame_reader(f, "read PYTEST_CURRENT_TEST: which test runs is not its to know")

    def _test_function(self, fn, _function=types.FunctionType):
        """Whether ``fn`` is a test function of a module pytest rewrote (at its top level or in a
        class: not a function a test defines inside itself). Read with no audit event."""
        if type(fn) is not _function or not self.sources or not fn.__name__.startswith("test"):
            return False
        mod = sys.modules.get(fn.__module__) if isinstance(fn.__module__, str) else None
        return (
            mod is not None
            and "<locals>" not in fn.__qualname__
            and _namespace(mod).get("__file__") in self.sources
        )

    def _code_read(self, fn):
        """The change's code read a test function's ``__code__`` (directly, or through a standard
        library function that hands it over: ``inspect``, ``dis``), or a thread the change started
        did: its constants are the test's expected values (a test module is reached through
        ``sys.modules`` with no event; reading its function's code is the event)."""
        f = self.asker(3)  # _code_read, _check, __call__, then the frame that read it
        what = "read a test's code (" + fn.__qualname__ + "): its constants are the test's expected values"
        self._blame_reader(f, what)

    def _hands(self, code):
        names = self.hands.get(code.co_filename, _MISSING)
        if names is _MISSING:
            names = self.hands[code.co_filename] = HANDS.get(_stdlib_module(code.co_filename))
        return names is not None and (names is ALL or code.co_name in names)

    def _asked(self, what, path=None):
        """Record ``what`` when the frame that asked (see :meth:`asker`; called from ``_check``)
        is the change's code; with ``path``, only when the file read is a test's source."""
        f = self.asker(3)  # _asked, _check, __call__, then the frame whose call raised the event
        if f is None or not self._mine(f.f_code):
            return
        if path is not None and not self._test_source(path):
            return
        why = "the change's code (" + f.f_code.co_filename + ") " + what
        if why not in self.found:
            self.found.append(why)

    def _test_source(self, path):
        """Whether ``path`` is a test's source: a file pytest rewrote (a test module, a conftest),
        a test file of the run, a ``conftest.py``, or a ``.py`` a test directory held before the
        run (one the change made there is its own)."""
        try:
            full = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        if not full.endswith(".py"):
            return False
        if os.path.basename(full) == "conftest.py" or full in self.before or full in self.protected:
            return True
        return full in {os.path.realpath(p) for p in self.sources}

    def handler_set(self, handler):
        """``signal.signal`` was called (the runner wraps it: no audit event): a handler is handed
        the frame the signal interrupts, the test's own, with no event the hook could see."""
        if not callable(handler) or self.busy:
            return
        self.busy = True
        try:
            f = self.asker(2)  # handler_set, the wrapper, then its caller
            why = "the change's code (%s) installed a signal handler: it is handed the frame a signal interrupts"
            if f is not None and self._mine(f.f_code) and why % f.f_code.co_filename not in self.found:
                self.found.append(why % f.f_code.co_filename)
        finally:
            self.busy = False

    def hooks_why(self):
        """Trace or profile hooks the change's code left for threads to install (``threading.settrace``
        sets a name; the thread's own ``sys.settrace`` then runs with none of the change's frames on
        its stack): each such hook is handed every frame of the thread."""
        threading = sys.modules.get("threading")
        out = []
        for name in ("_trace_hook", "_profile_hook"):
            hook = getattr(threading, name, None)
            code = getattr(getattr(hook, "__func__", hook), "__code__", None)
            if code is not None and self._mine(code):
                out.append("the change's code left a hook for new threads (threading." + name[1:] + ")")
        return out

    def __call__(self, event, args, _events=EVENTS, _frames=FRAME_ATTRS, _function=types.FunctionType):
        if event not in _events:  # most events end here
            return
        if event == "object.__getattr__":
            name = args[1]
            if name not in _frames and (
                name != "__code__"
                or type(args[0]) is not _function  # (thousands of reads a run: the cheap tests inline)
                or not args[0].__name__.startswith("test")
                or not self._test_function(args[0])
            ):
                return  # every other ``__code__`` read ends here
        elif event == "object.__setattr__":  # whatever the name says: compared later, by identity
            self.touched.append(args[0])  # before ``busy``: another thread's assignment counts too
        if self.busy:
            return
        self.busy = True
        try:
            self._check(event, args)
        except Exception:
            pass
        finally:
            self.busy = False

    def _check(self, event, args):
        if event in ("os.utime", "os.chmod", "os.chown"):  # metadata only: noted (a test's own
            self._protected(args[0])  # touch of its data changes the ctime), never blamed
            return
        if event == "object.__getattr__" and args[1] == "__code__":
            self._code_read(args[0])
            return
        if event in ("sys._getframe", "object.__getattr__"):
            what = FRAME_ATTRS[args[1]] if event == "object.__getattr__" else "took a frame (sys._getframe)"
            self._asked(what + ": the calling test's locals, globals and source line are a step away")
            return
        if event == "ctypes.dlsym" and str(args[-1]).startswith(("Py", "_Py")):
            self._asked("reached the interpreter's own C API through ctypes (" + str(args[-1]) + ")")
        if event == "open":
            path, mode, flags = args[0], args[1] or "", args[2] or 0
            writes = any(c in str(mode) for c in "wax+") or (flags & (os.O_WRONLY | os.O_RDWR))
            if writes and isinstance(path, (str, bytes)) and self._memory_file(path):
                self.found.append("the test process opened its memory to write: " + str(path))
                return
            if writes and isinstance(path, str) and path.endswith(".pyc"):
                self.bytecode.add(os.path.realpath(path))
            if not writes:
                if isinstance(path, (str, bytes)) or hasattr(path, "__fspath__"):
                    self._asked("read a test file's source: " + str(path), path)
                return
            if not self._protected(path):
                return
            what = "wrote " + str(path)
        elif event in ("os.rename", "os.link", "os.symlink"):
            if event == "os.rename" and isinstance(args[1], str) and args[1].endswith(".pyc"):
                self.bytecode.add(os.path.realpath(args[1]))
            if not any(self._protected(p) for p in args[:2]):
                return
            what = "moved or linked onto " + str(args[1])
        elif event in ("os.remove", "os.truncate"):
            if not self._protected(args[0]):
                return
            what = "removed or truncated " + str(args[0])
        elif event == "object.__setattr__":
            if args[1] not in ("__code__", "__defaults__", "__kwdefaults__", "__globals__"):
                return
            if self._mine(getattr(args[0], "__code__", None)):
                return  # a function of the change's own making: as if it had written it that way
            if self._copy(args[0]):  # a copy the change's code made (boltons' copy_function)
                self.copies[id(args[0])] = args[0]
                return
            if args[1] in ("__defaults__", "__kwdefaults__") and self._stdlib_made(args[0]):
                return
            what = "replaced the " + args[1] + " of " + str(getattr(args[0], "__qualname__", args[0]))
        elif event == "function.__new__":  # types.FunctionType(code, ...): before the function exists
            code = args[0]
            if id(code) not in self.copied and not self._mine(code) and self.culprit():
                import gc

                before = [f for f in gc.get_referrers(code) if type(f) is types.FunctionType]
                self.copied[id(code)] = (code, before, set(map(id, before)))
            return
        elif event in ("compile", "code.__new__"):
            filename = args[1]
            if not isinstance(filename, str):
                return
            if filename.startswith("<"):
                (self.made if self.culprit() else self.shared).add(filename)
                return
            who = self.culprit(named=filename)
            if who and not (event == "compile" and self._same_source(filename, args[0])):
                self.tainted.add(filename)  # the change's code from now on, whatever it says
                self.cache.pop(filename, None)
                if self._forgeable(filename):
                    self.found.append(
                        "the change's code (" + who + ") made code under another file's name: " + filename
                    )
            return
        elif event in self.CTYPES:
            who = self._ctypes_caller()
            if who:
                self.found.append(
                    "the change's code (" + who + ") reached raw memory or C functions (ctypes)"
                )
            return
        else:
            what = self.REACH[event]
        named = None
        if event == "object.__setattr__":  # a module setting its own function's body (asyncio's
            named = getattr(getattr(args[0], "__code__", None), "co_filename", None)  # types.coroutine)
        who = self.culprit(
            importing=event in ("open", "os.rename", "marshal.loads", "marshal.load"), named=named
        )
        if who:
            self.found.append("the change's code (" + who + ") " + what)

    def _ctypes_caller(self):
        """The changed file that called ctypes itself ("" if none): the first frame outside the
        ctypes package, or the thread's starter when that frame is not the change's (a thread
        of the change's whose target is a ctypes function). Installed code that uses ctypes for
        its own ends (multiprocessing's shared values) is not the change's, whoever called it."""
        f = sys._getframe(3)  # past this method, _check and the hook itself
        while f is not None and os.sep + "ctypes" + os.sep in f.f_code.co_filename:
            f = f.f_back
        if f is not None and self._ours(f.f_code.co_filename):
            return f.f_code.co_filename
        return self._thread_owner()

    def _memory_file(self, path):
        try:
            return self.PROC_MEM.fullmatch(os.path.realpath(os.fsdecode(path))) is not None
        except (TypeError, ValueError, OSError):
            return False

    def _protected(self, path):
        try:
            full = os.path.realpath(os.fspath(path) if not isinstance(path, int) else "")
        except (TypeError, ValueError):
            return False
        if not full or full in self.changed:
            return False
        if any(full == p or full.startswith(p + os.sep) for p in self.protected):
            return True
        if any(full.startswith(d + os.sep) for d in self.test_dirs):
            try:
                st = os.stat(full)
            except OSError:
                return False  # a new file: the change's own (a test's output, a cache)
            if max(st.st_mtime, st.st_ctime) <= self.started:
                self.wrote_tests.add(full)  # by this process (by whichever code): see other_writers
                return True  # a file the tests had before the run: what they compare with
        # Python code or configuration the interpreter or pytest reads, where they read it
        if full.endswith((".py", ".pyc", ".pth", ".ini", ".cfg", ".toml")):
            return any(full.startswith(d + os.sep) for d in self.code_dirs) and not self._new_module(full)
        return False

    def _forgeable(self, filename):
        """Whether code made under ``filename`` could pass for code the run trusts by its file: a
        Python source (a test's, pytest's, the standard library's), a file the run protects or a
        test's source. A template's path (Jinja2 and Mako compile a template under its own name,
        so tracebacks point at it) is none of these: its code is only the change's own."""
        full = os.path.realpath(os.path.join(self.root, filename))
        return (
            filename.endswith((".py", ".pyw", ".pyc", ".pyi"))
            or not os.path.splitext(filename)[1]
            or self._protected(full)
            or self._test_source(full)
        )

    def _new_module(self, full):
        """Whether ``full`` is a new ``.py`` file inside a package of the repository, not at the
        top of an import path (where it could shadow an installed module): a generated module
        (PLY's ``parsetab.py``, a table written on first import). It is the change's own code
        from then on (its hooks and tests are refused as written during the run)."""
        folder = os.path.dirname(full)
        if not full.endswith(".py") or os.path.basename(full) == "conftest.py" or os.path.lexists(full):
            return False
        if folder in self.code_dirs or not _inside(folder, self.root):
            return False
        if not os.path.isfile(os.path.join(folder, "__init__.py")):
            return False
        self.changed.add(full)
        self.cache.clear()
        return True

    def _same_source(self, filename, source):
        """A compile of a file's own text (an import) is not a forgery; anything else under an
        existing file's name is (a name no file has is left to the checks of hooks and tests,
        which refuse code from a missing file)."""
        full = os.path.realpath(os.path.join(self.root, filename))
        try:
            with open(full, "rb") as f:
                text = f.read()
        except OSError:
            return True
        if not isinstance(source, (bytes, str)):
            return False
        return text == (source if isinstance(source, bytes) else source.encode("utf-8"))


class InstalledNames:
    """The public names of every module loaded from outside the repository (installed or
    standard library), as that module's own import bound them, and who rebinds them later.

    Judged at the end for the packages the tests import (:meth:`replaced`): a public name that
    no longer holds what its import bound must have been rebound by the tests (a test module,
    a conftest: their own monkeypatching), by installed code the change did not call (a base
    conftest's ``gevent.monkey.patch_all``, pytest's ``pdb.set_trace``), or by the package
    itself lazily binding a function under its own name. Whatever the value is: the old rule
    asked whether it was the change's code, and a ``MagicMock``, ``print`` or
    ``functools.partial`` planted by the change is not. Who set a name is read from the stack
    of each ``setattr`` (modules are given a ``ModuleType`` subclass whose ``__setattr__``
    records it: plain assignment raises no audit event); a write straight into the module's
    dict bypasses that and is judged by its value. A rebinding by the change's code counts
    even if it is undone later, unless the same call of the change's code undid it (a
    ``mock.patch`` inside one function). Values that cannot be called (flags, data) are not
    judged; nor are ``sys`` and ``warnings`` (hook slots) or ``builtins`` (snapshotted)."""

    EXEMPT = frozenset(("sys", "builtins", "warnings", "__main__"))
    HOOK_SLOTS = frozenset((("threading", "excepthook"),))
    """Names of other modules that hold a hook the standard library calls, as ``sys``'s do: pytest
    sets and restores ``threading.excepthook`` around every phase of every test, and who set it
    is not asked (a stack walk each time); what it holds at the end must not be the change's
    code (:meth:`replaced`)."""

    def __init__(self, root, reporter):
        import threading

        self.root, self.reporter = os.path.realpath(root), reporter
        self.main = threading.get_ident()
        self.before = {}  # id(module) -> (module, name, {attr: value} when its import finished)
        self.set = {}  # (id(module), attr) -> the value last set through setattr
        self.writes = []  # [module name, attr, who, frame, value before]: set by the change's code
        self.cls = _recording_module(self)
        self.load = None  # the import system's wrapped _load_unlocked (see watch_imports)
        self.helpers = {}
        """{id(module): (module, name, {attr: value}, {class name: (class, {attr: value})})} of each
        test helper module of the repository (see :func:`_helper_module`) as its import left it."""
        self.helper_writes = []  # "module.attr (set by ...)": a helper name the change's code set

    def take(self, name, mod):
        """Record ``mod`` as its import left it (a module of the repository is the change's to shape)."""
        names = _namespace(mod)
        path = names.get("__file__")
        if isinstance(path, str) and _inside(os.path.abspath(path), self.root):
            if path not in self.reporter.rewritten and (_helper_module(name) or self._in_test_dir(path)):
                self._take_helper(str(name), mod, names)
            return
        self.before[id(mod)] = (mod, str(name), dict(names))
        if type(mod) is types.ModuleType:  # a module of a class of its own keeps it (by value only)
            try:
                mod.__class__ = self.cls
            except TypeError:
                pass

    def take_all(self):
        """Every module loaded now: before any code of the repository runs."""
        for name, mod in list(sys.modules.items()):
            if isinstance(mod, types.ModuleType) and name not in self.EXEMPT:
                self.take(name, mod)

    def watch_imports(self):
        """Record each module when its import finishes, before the importer gets it back (the
        import system's ``_load_unlocked``, which every ``import`` statement and
        ``importlib.import_module`` goes through)."""
        boot = sys.modules.get("_frozen_importlib")
        load = getattr(boot, "_load_unlocked", None)
        if load is None:
            return
        take = self.take

        def _load_unlocked(spec):
            __tracebackhide__ = True
            mod = load(spec)
            try:
                if isinstance(mod, types.ModuleType) and mod.__name__ not in self.EXEMPT:
                    take(spec.name, mod)
            except Exception:
                pass
            return mod

        boot._load_unlocked = self.load = _load_unlocked

    def wrote(self, mod, attr, value):
        """``setattr(mod, attr, value)`` on a recorded module: who did it (see :meth:`_who`)."""
        if (attr[:1] == "_" and attr != "__getattr__") or not callable(value):
            return
        helper = self.helpers.get(id(mod))
        if helper is not None and helper[0] is mod:  # the package's own code gets no excuse here
            self.set[(id(mod), attr)] = value
            if value is not helper[2].get(attr, _MISSING) and value is not _namespace(mod).get(
                attr, _MISSING
            ):
                who = self._who()
                if who is not None:
                    self.helper_writes.append(helper[1] + "." + attr + " (set by " + who[0] + ")")
            return
        entry = self.before.get(id(mod))
        held = _namespace(mod).get(attr, _MISSING)
        if entry is None or entry[0] is not mod or value is held or (entry[1], attr) in self.HOOK_SLOTS:
            return  # not recorded, set to what it holds already (nothing changes), or a hook slot
        self.set[(id(mod), attr)] = value
        if (self.writes and self._undone(entry[1], attr, value)) or value is entry[2].get(attr, _MISSING):
            return
        if self._package_own(value, attr, entry[1].split(".")[0]):
            return  # a lazy loader of the package binding its own function under its name
        who = self._who()
        if who is not None:
            self.writes.append([entry[1], attr, who[0], who[1], held])

    def _who(self):
        """(why, frame) when the change's code set the name: a frame of a changed (or
        change-compiled) file is on the stack nearer than any frame of a test module or conftest
        (the change calling ``mock.patch(...).start()`` or a patcher of an installed package is
        the change's doing; a test calling its own helper is the test's). A thread with neither
        (a ``threading.Timer`` of ``functools.partial(setattr, ...)``) is nobody's: counted.
        None when the tests or installed code did it."""
        guard = getattr(self.reporter, "guard", None)
        if guard is None or guard.busy:
            return self._walk(guard)
        guard.busy = True  # the runner's own frames and f_code reads: no one's question for the guard
        try:
            return self._walk(guard)
        finally:
            guard.busy = False

    def _walk(self, guard):
        rewritten = self.reporter.rewritten
        f = sys._getframe(3)  # past this and _who: what _who saw as its frame 2
        while f is not None:
            name = f.f_code.co_filename
            if guard is not None and guard._ours(name):
                outer = f
                while f is not None:  # the outermost call of the change's code on the stack
                    if guard._ours(f.f_code.co_filename):
                        outer = f
                    f = f.f_back
                return "the change's code (" + name + ")", outer
            if name in rewritten:
                return None
            f = f.f_back
        import threading

        return ("another thread", None) if threading.get_ident() != self.main else None

    def _undone(self, modname, attr, value):
        """A name the change's code set, set back to what it held before: forgiven if the call of
        the change's code that set it is still running (a ``with mock.patch(...)`` inside one
        function, whatever the tests had bound there)."""
        pending = [w for w in self.writes if w[0] == modname and w[1] == attr and w[4] is value]
        if not pending:
            return False
        stack, f = set(), sys._getframe(2)
        while f is not None:
            stack.add(id(f))
            f = f.f_back
        gone = {id(w) for w in pending if id(w[3]) in stack}
        self.writes = [w for w in self.writes if id(w) not in gone]
        return bool(gone)

    def _take_helper(self, name, mod, names):
        """Record a test helper module of the repository (:func:`_helper_module`) as its import
        left it: its names and its own classes' attributes."""
        classes = {
            attr: (value, dict(vars(value)))
            for attr, value in list(names.items())
            if isinstance(value, type) and getattr(value, "__module__", None) == name
        }
        self.helpers[id(mod)] = (mod, name, dict(names), classes)
        if type(mod) is types.ModuleType:
            try:
                mod.__class__ = self.cls
            except TypeError:
                pass

    def helpers_replaced(self):
        """The test helper modules of the repository (``pkg.testing``, ``sklearn.utils._testing``,
        ``matplotlib.testing.decorators``, ``pylint.testutils``: :func:`_helper_module`) loaded
        during the run that are not as the base commit made them: their file's code rewritten by
        the change (an ``assert_equal`` or ``raises`` that no longer fails: its comparisons are
        in a module pytest does not rewrite, so no other rule sees them), a public function or a
        class's method rebound by the change's code (through ``setattr``, or written into the
        dictionary with code that is not the tests'), or the module in ``sys.modules`` one its
        file did not make. A test's own monkeypatching is the tests'."""
        reporter, out = self.reporter, list(self.helper_writes)
        for name, mod in list(sys.modules.items()):  # a module put in a helper's place
            if mod is None or not _HELPER_NAME.search(name):
                continue
            entry = self.helpers.get(id(mod))
            if entry is None or entry[0] is not mod:
                path = _namespace(mod).get("__file__")
                if path not in reporter.rewritten and self._repository_module(name, path):
                    out.append(name + " (a module its file did not make)")
        for mod, name, before, classes in list(self.helpers.values()):
            names = _namespace(mod)
            path = names.get("__file__")
            entry = (mod, name, before, classes)
            if isinstance(path, str) and reporter._file_why(path).startswith("a file the change touched"):
                trees = reporter._trees(path)
                import ast

                if trees is not None and ast.dump(trees[0]) != ast.dump(trees[1]):
                    out.append(name + " (its code rewritten)")
            places = [(name, names, entry[2])]
            places += [(name + "." + k, vars(cls), then) for k, (cls, then) in entry[3].items()]
            for where, now, then in places:
                if all(map(operator.is_, map(now.get, list(then)), then.values())):
                    continue
                for attr, was in then.items():
                    value = now.get(attr, _MISSING)
                    if value is was or value is _MISSING or (attr[:1] == "_" and attr != "__getattr__"):
                        continue
                    if not (callable(was) or isinstance(was, (staticmethod, classmethod, property))):
                        continue
                    if where == name and self.set.get((id(mod), attr), _MISSING) is value:
                        continue  # set through setattr: judged by who did it (wrote)
                    if not self._tests_own(value):
                        out.append(where + "." + attr + " (rebound)")
        return sorted(set(out))

    def _in_test_dir(self, path):
        """Whether ``path`` is a file of the run's test directories (a ``tests/utils.py`` that
        pytest's rootdir insertion imports as the top-level ``utils``)."""
        dirs = getattr(getattr(self.reporter, "guard", None), "test_dirs", ())
        if not dirs:
            return False
        full = os.path.abspath(path)  # (every module of the repository passes here: no realpath)
        return any(_inside(full, d) for d in dirs)

    def _tests_own(self, value):
        """Whether ``value`` is code of the tests (a rewritten module, a test directory)."""
        path = _value_file(value)
        if not path:
            return False
        guard = getattr(self.reporter, "guard", None)
        full = os.path.realpath(path)
        return path in self.reporter.rewritten or any(
            _inside(full, d) for d in getattr(guard, "test_dirs", ())
        )

    def _repository_module(self, name, path):
        """Whether the module ``name`` (its file ``path``, if any) is the repository's: its file,
        or its top-level package's, is inside the repository."""
        if not isinstance(path, str) or not path:
            top = sys.modules.get(str(name).split(".")[0])
            path = _namespace(top).get("__file__") if top is not None else None
        return isinstance(path, str) and _inside(os.path.realpath(path), self.root)

    def replaced(self, imported):
        """The public names (and ``__getattr__``) of the modules of the packages ``imported``
        that no longer hold, or at some point held, what their own import bound, and not for a
        reason :class:`InstalledNames` accepts: ["module.name (why)"]."""
        out = []
        boot = sys.modules.get("_frozen_importlib")
        if self.load is not None and getattr(boot, "_load_unlocked", None) is not self.load:
            out.append("the import system (its _load_unlocked was replaced)")
        for modname, attr, who, _, _ in self.writes:
            top = modname.split(".")[0]
            if top in imported and top not in self.EXEMPT:
                out.append(modname + "." + attr + " (set by " + who + ")")
        for mod, modname, before in list(self.before.values()):
            top = modname.split(".")[0]
            if top not in imported or top in self.EXEMPT:
                continue
            names = _namespace(mod)
            keys = list(before)
            if all(map(operator.is_, map(names.get, keys), before.values())) and (
                names.get("__getattr__") is before.get("__getattr__")
            ):
                continue
            for attr in [*keys, "__getattr__"]:
                now = names.get(attr, _MISSING)
                if (attr[:1] == "_" and attr != "__getattr__") or now is before.get(attr, _MISSING):
                    continue
                if (modname, attr) in self.HOOK_SLOTS:
                    path = code_file(getattr(now, "func", now))  # (pytest's own is a partial)
                    if path and self.reporter._file_why(path):
                        out.append(modname + "." + attr + " (holds the change's code)")
                    continue
                if now is _MISSING or not callable(now) or self.set.get((id(mod), attr), _MISSING) is now:
                    continue  # data, or set through setattr (judged by who did it, above)
                if not self._explained(now, attr, top):
                    out.append(modname + "." + attr + " (written into the module's dict)")
        return sorted(set(out))

    def _explained(self, value, attr, top):
        """A value written into a module's dict (no ``setattr``: no record of who): the tests' own
        (defined in a test module, a conftest, a test directory) or the package's own."""
        path = _value_file(value)
        if not path:
            return False
        guard = getattr(self.reporter, "guard", None)
        dirs = guard.test_dirs if guard is not None else ()
        full = os.path.realpath(path)
        return (
            path in self.reporter.rewritten
            or any(_inside(full, d) for d in dirs)
            or (self._package_own(value, attr, top))
        )

    def _package_own(self, value, attr, top):
        """Whether ``value`` is a function or class of the package ``top`` itself, bound under its
        own name (a lazy loader's ``globals()[name] = ...``, a reload): never a mock, a builtin,
        a partial, or another of its functions under this name."""
        try:
            home = getattr(sys.modules.get(top), "__file__", None) or ""
            path = _value_file(value)
            return (
                bool(home and path)
                and getattr(_unwrap(value), "__name__", None) == attr
                and _inside(os.path.realpath(path), os.path.dirname(os.path.realpath(home)))
            )
        except Exception:
            return False


HELPER_PARTS = frozenset(
    ("testing", "testutils", "testutil", "test_utils", "testing_utils", "testhelpers", "test_helpers",
     "testlib", "test_support", "pytester", "tests", "test")
)  # fmt: skip
"""Parts of a module's dotted name (less leading underscores) that make it a test helper module."""


_HELPER_NAME = re.compile(r"(?:^|\.)_*(?:" + "|".join(sorted(HELPER_PARTS)) + r")(?:\.|$)", re.I)


def _helper_module(name):
    """Whether the module named ``name`` is a test helper module by its name (``pkg.testing``,
    ``sklearn.utils._testing``, ``numpy.testing._private.utils``, ``pylint.testutils``,
    ``_pytest.pytester``, a module of a ``tests`` package)."""
    return _HELPER_NAME.search(str(name)) is not None


def _value_file(value):
    """The file whose code made ``value`` (a function's code, a class's module), "" if none
    (a builtin, a partial, an instance) or a ``<...>`` name."""
    try:
        fn = _unwrap(value)
        if isinstance(fn, type):
            path = getattr(sys.modules.get(str(getattr(fn, "__module__", ""))), "__file__", None)
        else:
            path = code_file(fn)
    except Exception:
        return ""
    return path if isinstance(path, str) and path and not path.startswith("<") else ""


def _recording_module(names):
    """The module class :class:`InstalledNames` gives the modules it records: a ``ModuleType``
    whose ``setattr`` tells it who set what (named ``module``, as ModuleType is)."""

    class Module(types.ModuleType):
        __slots__ = ()

        def __setattr__(self, attr, value):
            try:
                names.wrote(self, attr, value)
            except Exception:
                pass
            types.ModuleType.__setattr__(self, attr, value)

    Module.__name__ = Module.__qualname__ = "module"
    Module.__module__ = "builtins"  # its repr is ModuleType's: <class 'module'>
    return Module


STDLIB = os.path.dirname(getattr(os, "__file__", None) or "")


def _stdlib_module(filename, _lib=STDLIB):
    """The standard-library module ``filename`` is ("" if none): frozen ones (``<frozen codecs>``)
    by their name, the others by their path under the library (not its site-packages)."""
    if filename.startswith("<frozen "):
        return filename[8:-1]
    if not _lib or not filename.startswith(_lib + os.sep) or "-packages" + os.sep in filename:
        return ""
    name = filename[len(_lib) + 1 :]
    name = name[:-3] if name.endswith(".py") else name
    name = name.replace(os.sep, ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def _watch_signals(guard):
    """Route ``signal.signal`` (``_signal.signal``, which ``signal.signal`` calls) through the
    guard: installing a handler raises no audit event, and a handler is handed a frame."""
    try:
        import _signal
    except ImportError:
        return
    real = _signal.signal

    def signal(signalnum, handler):
        guard.handler_set(handler)
        return real(signalnum, handler)

    _signal.signal = signal


def _watch_setup(reporter):
    import pytest

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(item):
        reporter.send_finished(item.nodeid)
        reporter.params_why[item.nodeid] = reporter.params_changed(item)

    return pytest_runtest_setup


def _wrap_call(reporter):
    import pytest

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_call(item):
        try:
            why = reporter._foreign(item.obj)
        except Exception:  # items without a Python function (doctests, other plugins' items)
            why = ""
        if "runtest" in getattr(item, "__dict__", {}):  # pytest never sets it; the class's is watched
            why = why or "a runtest set on the item itself"
        why = (
            why
            or reporter.not_collected(item)
            or _renamed(item, reporter.guard)
            or _misplaced(item, reporter)
        )
        why = why or reporter.copied(getattr(item, "obj", None))
        unwatched = reporter.unwatched(item)
        if unwatched:
            reporter.raised.add(item.nodeid)
            reporter.tampered.append("test " + item.nodeid + " ran from " + unwatched)
        reporter.current = item.nodeid
        reporter.called.add(item.nodeid)
        reporter.bodies.clear()
        reporter.hits.clear()
        _forget_sources(reporter.rewritten)
        outcome = yield
        if outcome.excinfo is None and not why:  # judged in _finish, if its report says passed
            reporter.body_failed[item.nodeid] = reporter.body_why(item)  # (unittest's failures come later)
        guard = getattr(reporter, "guard", None)
        if guard is not None and guard.installed:
            reporter.tampered += guard.hooks_why()
        try:
            rerouted = reporter.test_rerouted(item.obj)
        except Exception:  # items without a Python function (doctests, other plugins' items)
            rerouted = ""
        _after_call(reporter, item, outcome.excinfo is None)
        if rerouted:
            reporter.raised.add(item.nodeid)
            reporter.tampered.append("test " + item.nodeid + " ran in a module that " + rerouted)
        if outcome.excinfo is not None or why:
            reporter.raised.add(item.nodeid)
        if why:
            reporter.tampered.append(f"test {item.nodeid} was replaced by {why}")

    return pytest_runtest_call


def _after_call(reporter, item, passed):
    """A passing test's comparisons all went through the checker (:meth:`Reporter.unchecked`);
    its module's globals are kept for the check after its teardown (:meth:`Reporter.bound_after`)."""
    try:
        fn = getattr(item.obj, "__func__", item.obj)
        why = reporter.unchecked(fn) if passed else ""
        if _code(fn, reporter.guard).co_filename in reporter.rewritten:
            reporter.item_globals[item.nodeid] = fn.__globals__
    except Exception:  # items without a Python function (doctests, other plugins' items)
        return
    if why:
        reporter.raised.add(item.nodeid)
        reporter.tampered.append("test " + item.nodeid + " " + why)


def _forget_sources(files):
    """Drop the tests' files from ``linecache`` before each test: a line cached there (pytest's
    report of an earlier failure or warning put it there) is read with no ``open`` to see."""
    cache = getattr(sys.modules.get("linecache"), "cache", None)
    if isinstance(cache, dict):
        for name in list(files):
            cache.pop(name, None)


def _name_and_code(item, guard=None):
    """The name a test's file gives it and the code of the function it runs (decorators'
    ``__wrapped__`` followed; None for no function)."""
    fn = getattr(item, "obj", None)
    fn = getattr(fn, "__func__", fn)
    while getattr(fn, "__wrapped__", None) is not None:
        fn = fn.__wrapped__
    name = getattr(item, "originalname", None) or getattr(item, "name", "")
    return name, _code(fn, guard)


def _renamed(item, guard=None):
    """A test the file defines with ``def NAME`` but whose collected function is another one
    (a sibling bound to its name; an alias like ``test_b = test_a`` has no ``def`` and passes)."""
    name, code = _name_and_code(item, guard)
    path = str(getattr(item, "fspath", "") or "")
    if code is None or code.co_name == name or not path.endswith(".py"):
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    if re.search(r"^[ \t]*(async[ \t]+)?def[ \t]+" + re.escape(name) + r"[ \t]*\(", text, re.M):
        return "another function (" + code.co_name + ") bound to its name"
    return ""


def _misplaced(item, reporter):
    """A test whose function has its name but is another ``def`` of its file (a passing namesake
    of another class bound in its place): the function pytest calls must be one the file defines
    where the item is, at the top level for a module's test, in a class of the item's class's
    MRO for a method. ``reporter.defs``: {path: {(class name or None, name): first lines}},
    filled by the rewrite hook (:func:`_watch_equality`), else here."""
    name, code = _name_and_code(item, reporter.guard)
    defs, real = reporter.defs, reporter.real
    path = real(str(getattr(item, "fspath", "") or ""))
    if code is None or code.co_name != name or real(code.co_filename) != path:
        return ""
    if path not in defs:
        defs[path] = _defs(path)
    cls = getattr(item, "cls", None)
    owners = [c.__name__ for c in cls.__mro__] if isinstance(cls, type) else [None]
    lines = set().union(*[defs[path].get((owner, name), ()) for owner in owners])
    if lines and code.co_firstlineno not in lines:
        where = "the top level" if cls is None else "class " + cls.__name__
        return "another def of its name (line " + str(code.co_firstlineno) + ") than " + where + "'s"
    return ""


def _defs(path):
    """:func:`_defs_in` of the file at ``path`` ({} if it does not parse): for a test file
    pytest did not rewrite (the rewrite hook fills ``Reporter.defs`` from its own tree)."""
    import ast

    try:
        with open(path, "rb") as f:
            return _defs_in(ast, ast.parse(f.read()))
    except (OSError, SyntaxError, ValueError):
        return {}


def _defs_in(ast, tree):
    """{(class name or None, name): first lines (decorator or ``def``)} of the functions the
    module ``tree`` defines at its top level or directly in a class body."""
    out, todo = {}, [(tree, None)]
    while todo:
        node, owner = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = [child.lineno] + [d.lineno for d in child.decorator_list]
                out.setdefault((owner, child.name), set()).update((child.lineno, min(first)))
            elif isinstance(child, ast.ClassDef):
                todo.append((child, child.name))
            elif isinstance(child, ast.stmt):  # if / try / with blocks at the same level
                todo.append((child, owner))
    return out


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


def _listing(dirs):
    """{path: (inode, ctime)} of every file under ``dirs`` (bytecode caches left out: the
    bytecode rule reads those); ctime changes with every write and no code can set it back."""
    out = {}
    for top in dirs:
        for where, subdirs, files in os.walk(top):
            subdirs[:] = [d for d in subdirs if d != "__pycache__"]
            for name in files:
                path = os.path.join(where, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                out[path] = (st.st_ino, st.st_ctime_ns)
    return out


def test_dirs(tests, root):
    """The directories of the run's tests (as the allowlist reads them): the nearest
    ``tests`` directory above each test path, and a test file's own directory (or a test
    directory given itself) whose name says test; never the repository root."""
    out = set()
    root = os.path.realpath(root)
    for path in tests:
        here = path if os.path.isdir(path) else os.path.dirname(path)
        if "test" in os.path.basename(here):
            out.add(here)
        while _inside(here, root) and here != root:
            if os.path.basename(here) == "tests":
                out.add(here)
                break
            here = os.path.dirname(here)
    return sorted(d for d in out if d != root and _inside(d, root))


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


def framework_names():
    """Top-level module names of pytest, pluggy and the installed pytest's own requirements
    (what pytest's start-up imports), read from the environment's metadata."""
    names = {"pytest", "_pytest", "pluggy"}
    try:
        from importlib import metadata
    except ImportError:
        try:
            import importlib_metadata as metadata
        except ImportError:
            return names
    try:
        requires = metadata.requires("pytest") or []
    except Exception:
        return names
    for req in requires:
        if "extra" in req.partition(";")[2]:
            continue  # pytest's test extras: never imported while it starts
        try:
            dist = metadata.distribution(re.split(r"[^A-Za-z0-9._-]", req.strip(), maxsplit=1)[0])
            top = (dist.read_text("top_level.txt") or "").split()
            files = [str(f).split("/") for f in dist.files or ()]
        except Exception:
            continue
        names.update(top)
        for parts in files:
            if parts[-1].endswith(".py") and not parts[0].endswith((".dist-info", ".egg-info", "..")):
                names.add(parts[0][:-3] if len(parts) == 1 else parts[0])
    return names


def framework_packages(entries):
    """{entry: [package directory or module file]} of the entries (of the script's own path,
    inside the repository) that hold pytest's own modules or those of its start-up (the
    repository under test is pytest, pluggy, attrs, ...): pytest starts from them, as it would
    without the runner, or the tests would test the installed copy and never the change. The
    allowlist reverts a module the change adds that shadows an installed one, so what is found
    there is the base's own package."""
    if not entries:
        return {}
    names = framework_names()
    out = {}
    for entry in entries:
        for name in sorted(names):
            where = os.path.join(entry, name)
            if os.path.isfile(os.path.join(where, "__init__.py")):
                out.setdefault(entry, []).append(where)
            elif os.path.isfile(where + ".py"):
                out.setdefault(entry, []).append(where + ".py")
    return out


def supervise(pipe, pid, verdict, key):
    """The parent: the only holder of the key. It signs what the test process reports, and
    closes the verdict only if that process reported its end and then exited with the code
    it reported."""
    signer = Signer(os.open(verdict, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), key)
    buf, end, started, status, bad, tests = b"", None, False, None, [], set()
    while True:
        ready = select.select([pipe], [], [], 0.2)[0]
        chunk = os.read(pipe, 65536) if ready else b""
        buf += chunk
        lines = buf.split(b"\n")
        buf = lines.pop()
        for line in lines:
            try:
                rec = json.loads(line.decode())
            except ValueError:
                rec = None
            if not isinstance(rec, dict) or end is not None or (rec.get("start") and started):
                bad.append("the runner's pipe carried a line that is not the runner's record")
            elif rec.get("end"):
                end = rec
            elif rec.get("test") in tests:  # the runner writes each test once (when the next starts)
                bad.append("two records for one test on the runner's pipe")
            elif rec.get("start") or started:
                signer.write(rec)
                started = True
                tests.add(rec.get("test"))
        if ready and not chunk:  # every writer closed the pipe
            break
        if status is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            status = status if done else None
        elif not ready:  # the test process is gone and nothing is left to read
            break
    if status is None:
        status = os.waitpid(pid, 0)[1]
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    if started and bad:
        signer.write({"end": True, "exit": code, "tests": 0, "tampered": sorted(set(bad))})
    elif started and end is not None and end.get("exit") == code:
        signer.write(end)
    return code


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    mode, args = sys.argv[1], sys.argv[2:]
    os.environ.pop("PYTHONSAFEPATH", None)  # safe-path (3.11+) for this process, not the tests' own
    cwd = os.getcwd()
    # The key never enters the test process: the parent reads (and unlinks) it only after
    # forking, and lets the child go on once it is gone from the disk.
    pipe_r, pipe_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(pipe_w)
        os.close(go_r)
        _not_dumpable()
        key = None
        try:
            key = _take_key(os.path.join(here, "key"))
        finally:
            os.write(go_w, b"1" if key else b"0")
            os.close(go_w)
        _exit(supervise(pipe_r, pid, os.path.join(here, "verdict"), key) if key else os.waitpid(pid, 0) and 3)
    os.close(pipe_r)
    os.close(go_w)
    if os.read(go_r, 1) != b"1":
        os._exit(3)
    os.close(go_r)
    with open(os.path.join(here, "changed.json"), encoding="utf-8") as f:
        changed = set(json.load(f))
    # Nothing of the repository or of this directory is importable while pytest starts;
    # afterwards the path is the script's own (PYTHONPATH entries included), less this directory.
    kept = [p for p in sys.path if p and os.path.abspath(p) != here]
    sys.path[:] = [p for p in kept if not _inside(os.path.abspath(p), cwd)]
    plugins = base_plugins()  # from the environment's own metadata, not the repository's
    own = framework_packages([p for p in kept if p not in sys.path])
    if own:  # the repository is pytest, pluggy, ...: the tests test its copy, not the installed one
        sys.path[:] = [p for p in kept if p in own or p in sys.path]
    import pytest

    sys.path[:] = kept
    # Its files are the runner, as the installed pytest's are: their code is not blamed as the
    # change's (hooks they register, frames they take); the grade says so (Integrity.verdict).
    framework = sorted(os.path.relpath(p, cwd) for ps in own.values() for p in ps)
    changed = {c for c in changed if not any(c == f or c.startswith(f + "/") for f in framework)}

    version = tuple(int(x) for x in pytest.__version__.split(".")[:2] if x.isdigit())
    extra = []
    if plugins is not None and version >= (5, 0):
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        for name in plugins:
            extra += ["-p", name]
    reporter = Reporter(Channel(pipe_w), None, changed, cwd)
    reporter.base_src = _base_texts(os.path.join(here, "base-src"), changed)
    reporter.now_src = _base_texts(cwd, [rel for rel in changed if rel in reporter.base_src])  # (the change
    # may rewrite its own files later: what it loaded is this text)
    _watch_equality(reporter)  # every ==, !=, in of the test modules shows the runner what said "equal"
    _watch_unittest(reporter)  # imports unittest (watched; pytest imports it anyway)
    _hide_current_test(reporter)  # which test runs is not the change's to read

    reporter.seen = snapshot(extra=(__name__,))
    if mode == "module":  # `python -m pytest` puts the working directory first
        sys.path.insert(0, cwd)
    reporter.pytest_runtest_call = _wrap_call(reporter)
    reporter.pytest_runtest_setup = _watch_setup(reporter)
    marker = os.path.join(here, "started")  # the file system's own clock (coarser than time())
    open(marker, "w").close()
    reporter.started = os.stat(marker).st_mtime
    tests = [os.path.realpath(os.path.join(cwd, a.split("::")[0])) for a in args if not a.startswith("-")]
    protected = [here] + [t for t in tests if os.path.isfile(t)]
    guard = Guard(cwd, changed, protected, reporter.started, test_dirs(tests, cwd))
    reporter.guard = guard
    guard.sources = reporter.rewritten
    guard.kept = reporter.unchanged_def
    reporter.installed_names = InstalledNames(cwd, reporter)  # before any code of the repository runs
    reporter.installed_names.take_all()  # (and before the hook: its own hundreds of events are no one's)
    if hasattr(sys, "addaudithook"):
        sys.addaudithook(guard)
        guard.installed = True
        guard.watch_threads()
        _watch_signals(guard)
    reporter.installed_names.watch_imports()
    start = {"start": True, "plugins": plugins or [], "pytest": pytest.__version__}
    if framework:
        start["framework"] = framework
    reporter.channel.write(start)
    code = pytest.main(extra + pinned(args, os.path.join(here, "base"), cwd), plugins=[reporter])
    reporter.close(int(code))
    _exit(int(code))


def _exit(code):
    """End this process as Python's own exit does, less the teardown of every module and object
    (tens of milliseconds with pytest loaded, on the grade's critical path; the verdict is
    written by then): non-daemon threads joined, ``atexit`` handlers run, standard streams
    flushed, then the exit code (which the supervisor compares with the one reported)."""
    threading = sys.modules.get("threading")
    try:
        if threading is not None and hasattr(threading, "_shutdown"):
            threading._shutdown()
    except BaseException:
        pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(int(code) & 0xFF)


def _take_key(path):
    """Read and unlink the key ("" if there is none): done by the parent after the fork and
    before the child goes on, so no copy of it is ever in the test process."""
    try:
        with open(path, "rb") as f:
            key = f.read().strip()
        os.unlink(path)
    except OSError:
        return b""
    return key


def _not_dumpable():
    """Keep the test process (same user) out of the parent's memory: with the parent not
    dumpable, /proc/PID/mem and ptrace need CAP_SYS_PTRACE, which containers lack by default.
    ``prctl`` through ``_ctypes`` itself: the ``ctypes`` package's import (its types, struct,
    endianness) is most of the cost, and the child waits for this."""
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


if __name__ == "__main__":
    main()
