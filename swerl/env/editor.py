"""The file editor tool: view, create, str_replace, insert.

Files travel through the sandbox's binary-safe read_file/write_file (length
framed, so any content is safe), and are edited here as text. Bytes that are not
UTF-8 survive a round trip (surrogateescape).
"""

from __future__ import annotations

import posixpath
import shlex

from swerl.sandbox.base import Sandbox

SNIPPET_CONTEXT = 4


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="surrogateescape")


def _encode(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogateescape")


def _numbered(text: str, first: int = 1) -> str:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(lines, first))


class Editor:
    """Edits files inside one sandbox, relative to ``root``."""

    def __init__(self, sandbox: Sandbox, root: str = "/testbed") -> None:
        self.sandbox = sandbox
        self.root = root

    def resolve(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.root, path))

    def run(self, args: dict) -> str:
        command = args["command"]
        path = self.resolve(args["path"])
        if command != "view" and not self._inside_repo(path):
            return f"Error: {args['path']} is outside the repository {self.root}; the editor only writes inside it."
        if command == "view":
            return self.view(path, args.get("view_range"))
        if command == "create":
            return self.create(path, args["file_text"])
        if command == "str_replace":
            return self.str_replace(path, args["old_str"], args.get("new_str", ""))
        return self.insert(path, args["insert_line"], args["new_str"])

    def _inside_repo(self, path: str) -> bool:
        """Lexically and after resolving symlinks (a link inside the repo may point out of it)."""
        root = self.root.rstrip("/")
        if path != root and not path.startswith(root + "/"):
            return False
        real = self.sandbox.execute(f"realpath -m -- {shlex.quote(path)}", timeout=30).output.strip()
        return real == root or real.startswith(root + "/")

    def _read(self, path: str) -> str:
        return _decode(self.sandbox.read_file(path))

    def _write(self, path: str, data: bytes) -> bool:
        """Write ``path``, keeping an existing file's permission bits: an editor changes content,
        not mode, and a source file shipped 755 left at 644 is a mode change that strict grading
        reverts, fix and all. Returns whether ``path`` existed (the same look, not a second one)."""
        r = self.sandbox.execute(f"stat -L -c %a -- {shlex.quote(path)}", timeout=30)
        bits = r.output.strip()
        existed = r.returncode == 0 and bits.isdigit()
        self.sandbox.write_file(path, data, int(bits, 8) if existed else 0o644)
        return existed

    def _is_dir(self, path: str) -> bool:
        return self.sandbox.execute(f"test -d {shlex.quote(path)}").returncode == 0

    def view(self, path: str, view_range: list[int] | None = None) -> str:
        if self._is_dir(path):
            r = self.sandbox.execute(
                f"find {shlex.quote(path)} -maxdepth 2 -not -path '*/.*' | sort | head -n 500", timeout=30
            )
            return f"Files and directories up to 2 levels deep in {path}:\n{r.output}"
        try:
            text = self._read(path)
        except FileNotFoundError:
            return f"Error: {path} does not exist or is not a readable file."
        if not view_range:
            return f"Here is {path} with line numbers:\n{_numbered(text)}"
        lines = text.split("\n")
        n = len(lines) - (1 if lines and lines[-1] == "" else 0)
        first, last = view_range
        last = n if last == -1 else last
        if not 1 <= first <= max(n, 1) or last < first:
            return f"Error: invalid view_range {view_range}: the file has {n} lines (use [first, last], last -1 for the end)."
        body = "\n".join(lines[first - 1 : min(last, n)])
        return f"Here are lines {first}-{min(last, n)} of {path}:\n{_numbered(body, first)}"

    def create(self, path: str, file_text: str) -> str:
        try:
            existed = self._write(path, _encode(file_text))
        except OSError as e:
            return f"Error: cannot create {path}: {e}"
        return f"{'Overwrote' if existed else 'Created'} {path} ({len(file_text)} characters)."

    def str_replace(self, path: str, old: str, new: str) -> str:
        try:
            text = self._read(path)
        except FileNotFoundError:
            return f"Error: {path} does not exist or is not a readable file."
        if old == "":
            return "Error: old_str is empty; it must match exactly one place in the file."
        count = text.count(old)
        if count == 0:
            return f"Error: old_str was not found in {path}; it must match the file exactly, whitespace included."
        if count > 1:
            lines = sorted({text[:i].count("\n") + 1 for i in _find_all(text, old)})
            return (
                f"Error: old_str occurs {count} times in {path} (lines {lines}); "
                "include more context so it matches exactly once."
            )
        start = text.index(old)
        updated = text.replace(old, new, 1)
        self._write(path, _encode(updated))
        line = text[:start].count("\n") + 1
        return f"Edited {path}.\n{self._snippet(updated, line, new.count(chr(10)) + 1)}"

    def insert(self, path: str, insert_line: int, new: str) -> str:
        try:
            text = self._read(path)
        except FileNotFoundError:
            return f"Error: {path} does not exist or is not a readable file."
        lines = text.split("\n")
        trailing = lines and lines[-1] == ""
        if trailing:
            lines.pop()
        if not 0 <= insert_line <= len(lines):
            return f"Error: insert_line {insert_line} is outside 0..{len(lines)} for {path}."
        new_lines = new.split("\n")
        if new_lines and new_lines[-1] == "":
            new_lines.pop()
        lines[insert_line:insert_line] = new_lines
        updated = "\n".join(lines) + ("\n" if trailing or not lines else "")
        self._write(path, _encode(updated))
        return f"Inserted {len(new_lines)} line(s) into {path}.\n{self._snippet(updated, insert_line + 1, len(new_lines))}"

    @staticmethod
    def _snippet(text: str, line: int, span: int) -> str:
        lines = text.split("\n")
        first = max(1, line - SNIPPET_CONTEXT)
        last = min(len(lines), line + span + SNIPPET_CONTEXT - 1)
        return _numbered("\n".join(lines[first - 1 : last]), first)


def _find_all(text: str, sub: str) -> list[int]:
    out, i = [], text.find(sub)
    while i >= 0:
        out.append(i)
        i = text.find(sub, i + 1)
    return out
