"""What the command line lets through of Ray's own driver output.

When a node's raylet dies, Ray's driver prints the GCS's error message for it as a
``(raylet) ...`` line followed by the raylet's last log lines, ~20 ``[state-dump]`` lines of
event-loop statistics, once per actor it hosted. They say nothing to a swerl user (the run
itself says which node died and what was retried) and bury the progress lines. Ray has no
switch for these messages (its error listener prints every one in a driver), so the CLI's
stdout drops the dump lines and keeps Ray's one-line reason.
"""

from __future__ import annotations

from typing import Any, TextIO

DUMP_MARK = "[state-dump]"


class RayDumpFilter:
    """A text stream that passes everything to ``stream`` except Ray's ``[state-dump]`` lines."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        if DUMP_MARK not in text:
            return self.stream.write(text)
        lines = text.splitlines(keepends=True)
        kept = [line for line in lines if DUMP_MARK not in line]
        dropped = len(lines) - len(kept)
        note = f"    [swerl: {dropped} line(s) of the raylet's state dump left out; Ray's logs keep them]\n"
        self.stream.write("".join(kept).rstrip("\n") + "\n" + note)
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, ...
        return getattr(self.stream, name)
