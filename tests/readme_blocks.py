"""README.md's fenced code blocks, and running a bash one as written (tests/test_readme.py; a test
that needs a block's output, as tests/test_cli.py needs a run, uses the session's one run of it)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import swerl

ROOT = Path(swerl.__file__).resolve().parents[1]
README = ROOT / "README.md"
NO_TEST = re.compile(r"<!--\s*no-test:\s*(?P<why>.+?)\s*-->\s*$")


@dataclass
class Block:
    lang: str
    line: int
    code: str
    skip: str | None


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, with the no-test reason written right above each."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        prev = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        skip = NO_TEST.match(prev.strip())
        out.append(Block(m.group(1), start + 1, "\n".join(lines[start + 1 : j]) + "\n", skip and skip["why"]))
        i = j + 1
    return out


BLOCKS = blocks(README.read_text())


def env() -> dict[str, str]:
    """This checkout's swerl for the subprocess, wherever it runs."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "MPLBACKEND": "Agg", "MSWEA_SILENT_STARTUP": "1"}


def block_with(text: str) -> Block:
    """The one bash block that contains ``text``."""
    (block,) = [b for b in BLOCKS if b.lang == "bash" and text in b.code]
    return block


def run_bash(block: Block, tmp: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """``block`` as written, by ``bash -euo pipefail``, in a scratch directory ``tmp/work`` holding the
    checkout's ``envs/`` (the README's relative paths), ``swerl`` on PATH being this checkout's."""
    bin_dir, work = tmp / "bin", tmp / "work"
    bin_dir.mkdir()
    work.mkdir()
    (work / "envs").symlink_to(ROOT / "envs")
    shim = bin_dir / "swerl"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m swerl.cli "$@"\n')
    shim.chmod(0o755)
    e = env()
    e["PATH"] = f"{bin_dir}{os.pathsep}{e['PATH']}"
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], cwd=work, env=e, capture_output=True,
                       text=True, timeout=900)  # fmt: skip
    return r, work
