"""Run a command under another interpreter than the command server's plain ``bash -c``.

The command server runs every command as ``bash -c CMD`` on every backend. A login
shell (``bash -lc``, mini-swe-agent's default) reads the image's profile, which is
where SWE-bench images activate the repo's environment (``~/.profile`` sources
``~/.bashrc``, which runs ``conda activate testbed``); ``python3 -c`` runs Python.
Either is one ``exec`` away: the command becomes ``exec INTERPRETER... CMD``, so it
keeps its process group (a timeout still kills all of it) and costs one more exec.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from swerl.errors import ConfigError

PLAIN_SHELL = ("bash", "-c")
"""What the command server runs anyway: no profile is read."""
LOGIN_SHELL = ("bash", "-lc")
"""A login shell: /etc/profile and ~/.profile (hence ~/.bashrc) are read first."""


def check_interpreter(interpreter: Sequence[str]) -> tuple[str, ...]:
    """The interpreter as a tuple, or ConfigError saying what is wrong with it."""
    if isinstance(interpreter, str) or not interpreter:
        raise ConfigError(
            f"interpreter must be a non-empty list of arguments such as ['bash', '-lc'], got {interpreter!r}"
        )
    for arg in interpreter:
        if not isinstance(arg, str) or not arg or "\0" in arg:
            raise ConfigError(f"interpreter argument {arg!r} must be a non-empty string without NUL bytes")
    return tuple(interpreter)


def under_interpreter(command: str, interpreter: Sequence[str]) -> str:
    """``command`` as the command server must run it so that ``interpreter`` runs it."""
    if tuple(interpreter) == PLAIN_SHELL:
        return command
    return f"exec {shlex.join(interpreter)} {shlex.quote(command)}"
