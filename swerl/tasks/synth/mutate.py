"""Single-site bug injection: mutants of the functions parsed from a module with ``ast``.

The method SWE-smith published (procedural modification of functions), written here:
each operator changes one node of one function (a comparison or operator flipped, a
constant off by one, a boundary shifted, a statement or branch removed, two arguments
swapped, a return or default changed). Only the node's source span is rewritten, so
the gold patch (the inverse) is a minimal diff. A mutant that does not compile, or
whose AST equals the original (a trivially equivalent edit), is never produced.
"""

from __future__ import annotations

import ast
import hashlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

FLIP_CMP: dict[type, type] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}  # fmt: skip
FLIP_BIN: dict[type, type] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult, ast.Div: ast.Mult,
    ast.Mod: ast.FloorDiv, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd, ast.LShift: ast.RShift,
    ast.RShift: ast.LShift, ast.BitXor: ast.BitOr,
}  # fmt: skip


@dataclass(frozen=True)
class Mutant:
    """One single-site change of one file: lines ``[lo, hi)`` replaced by ``new``."""

    path: str
    lo: int
    hi: int
    new: str
    """The replacement text of lines lo..hi-1 (each line ending in a newline)."""
    operator: str
    function: str
    """Qualified name of the enclosing function (``Class.method``)."""
    scope: tuple[int, int]
    """1-based first and last line of the enclosing top-level definition: the code a test must run."""
    lineno: int

    @property
    def key(self) -> str:
        """Identity of the mutated code: equal keys are duplicates."""
        return hashlib.sha256(f"{self.path}\0{self.lo}\0{self.hi}\0{self.new}".encode()).hexdigest()[:16]

    def apply(self, text: str) -> str:
        lines = text.splitlines(keepends=True)
        return "".join(lines[: self.lo]) + self.new + "".join(lines[self.hi :])


Rewrite = tuple[ast.AST, ast.AST | None, str]
"""(node to replace, replacement or None to delete a statement, operator name)."""


def _cmp(node: ast.AST) -> Iterator[Rewrite]:
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in FLIP_CMP:
        yield (
            node,
            ast.Compare(node.left, [FLIP_CMP[type(node.ops[0])]()], node.comparators),
            "flip_comparison",
        )


def _binop(node: ast.AST) -> Iterator[Rewrite]:
    if isinstance(node, ast.BinOp) and type(node.op) in FLIP_BIN:
        if isinstance(node.op, ast.Add) and _is_str(node.left, node.right):
            return  # "a" - "b" is a TypeError everywhere, not a bug worth a task
        yield node, ast.BinOp(node.left, FLIP_BIN[type(node.op)](), node.right), "flip_operator"
    if isinstance(node, ast.AugAssign) and type(node.op) in FLIP_BIN and not _is_str(node.value):
        yield node, ast.AugAssign(node.target, FLIP_BIN[type(node.op)](), node.value), "flip_operator"
    if isinstance(node, ast.BoolOp):
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield node, ast.BoolOp(other, node.values), "flip_boolean"


def _is_str(*nodes: ast.AST) -> bool:
    return any(
        isinstance(n, (ast.JoinedStr, ast.Constant)) and isinstance(getattr(n, "value", ""), str)
        for n in nodes
    )


def _off_by_one(node: ast.AST) -> Iterator[Rewrite]:
    if isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 1000:
        yield node, ast.Constant(node.value + 1), "off_by_one"
        if node.value > 0:
            yield node, ast.Constant(node.value - 1), "off_by_one"


def _boundary(node: ast.AST) -> Iterator[Rewrite]:
    if isinstance(node, ast.Slice):
        for part in ("lower", "upper"):
            bound = getattr(node, part)
            if bound is not None and not isinstance(bound, ast.Constant):
                shifted = ast.BinOp(bound, ast.Add(), ast.Constant(1))
                yield bound, shifted, "shift_boundary"
    is_range = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
    if is_range and len(node.args) in (1, 2) and not isinstance(node.args[-1], ast.Constant):  # type: ignore[attr-defined]
        yield node.args[-1], ast.BinOp(node.args[-1], ast.Sub(), ast.Constant(1)), "shift_boundary"


def _swap_args(node: ast.AST) -> Iterator[Rewrite]:
    if (
        isinstance(node, ast.Call)
        and len(node.args) >= 2
        and not any(isinstance(a, ast.Starred) for a in node.args[:2])
    ):
        a, b = node.args[0], node.args[1]
        if ast.dump(a) != ast.dump(b):
            yield node, ast.Call(node.func, [b, a, *node.args[2:]], node.keywords), "swap_arguments"


def _returns(node: ast.AST) -> Iterator[Rewrite]:
    if isinstance(node, ast.Return) and node.value is not None:
        v = node.value
        if isinstance(v, ast.Constant) and isinstance(v.value, bool):
            yield node, ast.Return(ast.Constant(not v.value)), "change_return"
        elif not (isinstance(v, ast.Constant) and v.value is None):
            yield node, ast.Return(ast.Constant(None)), "change_return"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield node, node.operand, "remove_negation"


def _branches(node: ast.AST) -> Iterator[Rewrite]:
    if isinstance(node, ast.If):
        yield node.test, ast.UnaryOp(ast.Not(), node.test), "negate_condition"


OPERATORS: dict[str, Callable[[ast.AST], Iterator[Rewrite]]] = {
    "comparison": _cmp,
    "operator": _binop,
    "off_by_one": _off_by_one,
    "boundary": _boundary,
    "swap_arguments": _swap_args,
    "returns": _returns,
    "branches": _branches,
}
"""Expression-level operators; statement removal and default changes are handled per function."""
REMOVABLE = (
    ast.Expr,
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.If,
    ast.For,
    ast.While,
    ast.Raise,
    ast.With,
)


def _functions(
    tree: ast.Module,
) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str, ast.AST, bool]]:
    """(function, qualified name, top-level definition holding it, inside another function?) for every
    def, methods included."""

    def walk(node: ast.AST, prefix: str, top: ast.AST | None, in_fn: bool) -> Iterator:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                holder = top or child
                is_fn = not isinstance(child, ast.ClassDef)
                if is_fn:
                    yield child, name, holder, in_fn
                yield from walk(child, name + ".", holder, in_fn or is_fn)

    yield from walk(tree, "", None, False)


def _unit(fn: ast.AST, top: ast.AST, nested: bool, lines: list[str]) -> tuple[ast.AST, int, int, str]:
    """What a mutant of ``fn`` is checked on: (node, first line, end line, prefix that makes its lines a module).

    A method is checked alone (wrapped in ``if 1:``, its indentation kept), not with its whole class:
    each check parses, compiles and dumps only what it may change, so a big class costs per method,
    not per class (a 2,000-line class made every one of its mutants parse it all). A function inside
    another function needs that function (its free variables), so it is checked with its top-level one.
    """
    first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)]) - 1  # type: ignore[attr-defined]
    col = fn.col_offset  # type: ignore[attr-defined]
    if fn is top or nested or lines[first][:col].strip():
        s0 = min([top.lineno, *(d.lineno for d in getattr(top, "decorator_list", []))]) - 1  # type: ignore[attr-defined]
        return top, s0, top.end_lineno or top.lineno, ""  # type: ignore[attr-defined]
    return fn, first, fn.end_lineno or fn.lineno, "if 1:\n"  # type: ignore[attr-defined]


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """Nodes of ``fn``'s body, not those of nested defs (each def is visited on its own)."""
    stack = list(getattr(fn, "body", []))
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.JoinedStr)
            ):
                stack.append(child)


def _blocks(fn: ast.AST) -> Iterator[list[ast.stmt]]:
    for node in [fn, *_own_nodes(fn)]:
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def _splice(lines: list[str], node: ast.AST, new: ast.AST | None) -> list[tuple[int, int, str]]:
    """Ways to replace ``node``'s span by ``new`` (or delete the statement): [(lo, hi, text)], bare first."""
    lo, hi = node.lineno - 1, node.end_lineno  # type: ignore[attr-defined]
    c0, c1 = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
    first, last = lines[lo], lines[hi - 1]
    if new is None:
        rest = last[c1:].strip()
        if first[:c0].strip() or (rest and not rest.startswith("#")):
            return []  # shares a line with other code (``a; b``)
        return [(lo, hi, "")]
    try:
        text = ast.unparse(new)
    except Exception:
        return []
    if "\n" in text:
        return []
    out = [(lo, hi, first[:c0] + text + last[c1:])]
    if isinstance(node, ast.expr):
        out.append((lo, hi, first[:c0] + f"({text})" + last[c1:]))
    return out


def _expected(
    tree: ast.AST, parents: dict[int, tuple[ast.AST, str, int | None]], node: ast.AST, new: ast.AST | None
) -> str:
    """``ast.dump`` of ``tree`` (a top-level definition) with ``node`` replaced by ``new`` (None: removed), computed in place and undone."""
    parent, name, index = parents[id(node)]
    value = getattr(parent, name)
    if index is None:
        setattr(parent, name, new)
        try:
            return ast.dump(tree)
        finally:
            setattr(parent, name, value)
    copy = list(value)
    if new is None:
        del copy[index]
    else:
        copy[index] = new
    setattr(parent, name, copy)
    try:
        return ast.dump(tree)
    finally:
        setattr(parent, name, value)


def _parents(tree: ast.AST) -> dict[int, tuple[ast.AST, str, int | None]]:
    out: dict[int, tuple[ast.AST, str, int | None]] = {}
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if isinstance(value, ast.AST):
                out[id(value)] = (parent, name, None)
            elif isinstance(value, list):
                for i, v in enumerate(value):
                    if isinstance(v, ast.AST):
                        out[id(v)] = (parent, name, i)
    return out


def mutants_of_source(path: str, source: str, rng: random.Random | None = None) -> list[Mutant]:
    """Every single-site mutant of ``source`` (a module at ``path``) that compiles and changes the AST."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    parents = _parents(tree)
    out: dict[str, Mutant] = {}
    originals: dict[int, str] = {}
    for fn, qualname, top, nested in _functions(tree):
        scope = (top.lineno, top.end_lineno or top.lineno)  # type: ignore[attr-defined]
        if top.decorator_list:  # type: ignore[attr-defined]
            scope = (min(d.lineno for d in top.decorator_list), scope[1])  # type: ignore[attr-defined]
        unit, s0, s1, wrap = _unit(fn, top, nested, lines)
        original = originals.setdefault(id(unit), ast.dump(unit))
        rewrites: list[Rewrite] = []
        for node in _own_nodes(fn):
            for op in OPERATORS.values():
                rewrites.extend(op(node))
        for block in _blocks(fn):
            if len(block) >= 2:
                for stmt in block:
                    if isinstance(stmt, REMOVABLE) and not (
                        isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                    ):
                        rewrites.append(
                            (
                                stmt,
                                None,
                                "remove_statement" if not isinstance(stmt, ast.If) else "remove_branch",
                            )
                        )
            for stmt in block:
                if (
                    isinstance(stmt, ast.If)
                    and stmt.orelse
                    and not (len(stmt.orelse) == 1 and isinstance(stmt.orelse[0], ast.If))
                ):
                    rewrites.append((stmt, ast.If(stmt.test, stmt.body, []), "remove_branch"))
        for d in [*fn.args.defaults, *(k for k in fn.args.kw_defaults if k is not None)]:
            if isinstance(d, ast.Constant):
                if isinstance(d.value, bool):
                    rewrites.append((d, ast.Constant(not d.value), "change_default"))
                elif type(d.value) is int:
                    rewrites.append((d, ast.Constant(d.value + 1), "change_default"))
                elif d.value is None:
                    continue
        for node, new, operator in rewrites:
            if isinstance(node, ast.If) and isinstance(new, ast.If):
                ways = _drop_else(lines, node)
            else:
                ways = _splice(lines, node, new)
            if not ways:
                continue
            expected = _expected(unit, parents, node, new)
            if expected == original:
                continue  # trivially equivalent: same program
            for lo, hi, text in ways:
                m = Mutant(path, lo, hi, text, operator, qualname, scope, node.lineno)  # type: ignore[attr-defined]
                # the unit alone (a top-level definition, or a method under `if 1:`): cheap to parse and compile
                segment = wrap + "".join(lines[s0:lo]) + text + "".join(lines[hi:s1])
                try:
                    seg_tree = ast.parse(segment)
                    compile(seg_tree, path, "exec")
                except (SyntaxError, ValueError):
                    continue
                body = seg_tree.body[0].body if wrap and len(seg_tree.body) == 1 else seg_tree.body  # type: ignore[attr-defined]
                if (
                    len(seg_tree.body) == 1 and len(body) == 1 and ast.dump(body[0]) == expected
                ):  # exactly the intended edit
                    out.setdefault(m.key, m)
                    break
    return list(out.values())


def _drop_else(lines: list[str], node: ast.If) -> list[tuple[int, int, str]]:
    """Delete the ``else:`` block of ``node`` (its lines, from the ``else`` keyword on)."""
    first_else = node.orelse[0]
    end = node.orelse[-1].end_lineno  # type: ignore[attr-defined]
    else_line = None
    for i in range(first_else.lineno - 2, node.body[-1].end_lineno - 1, -1):  # type: ignore[attr-defined]
        if lines[i].strip().startswith("else"):
            else_line = i
            break
    if else_line is None or (end or 0) < else_line or node.end_lineno != end:  # type: ignore[attr-defined]
        return []
    return [(else_line, end or 0, "")]


def sample(mutants: list[Mutant], per_function: int, rng: random.Random) -> list[Mutant]:
    """At most ``per_function`` mutants of each function, operators taken in turn (diverse tasks, bounded cost)."""
    by_fn: dict[tuple[str, str], dict[str, list[Mutant]]] = {}
    for m in mutants:
        by_fn.setdefault((m.path, m.function), {}).setdefault(m.operator, []).append(m)
    out = []
    for ops in by_fn.values():
        queues = [rng.sample(group, len(group)) for _, group in sorted(ops.items())]
        rng.shuffle(queues)
        picked: list[Mutant] = []
        while len(picked) < per_function and any(queues):
            for q in queues:
                if q and len(picked) < per_function:
                    picked.append(q.pop())
        out.extend(picked)
    return out
